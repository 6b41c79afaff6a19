#include "tenax/data/tokenizer.h"

#include <gtest/gtest.h>

#include "tenax/core/subprocess.h"
#include "tenax/core/temp_dir.h"

namespace tenax::data {
namespace {

using testing::TempDir;

TEST(ByteTokenizer, IdsAreBytesAndEosIs256) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 257u);
  EXPECT_EQ(t.eos(), std::optional<uint32_t>(256));
  const std::string text = "Hi \xC3\xA9\n";  // "Hi é\n" in UTF-8
  const std::vector<uint32_t> ids = *t.Encode(text);
  EXPECT_EQ(ids, (std::vector<uint32_t>{72, 105, 32, 0xC3, 0xA9, 10}));
  EXPECT_EQ(*t.Decode(ids), text);
  // EOS decodes to nothing; an id past the vocabulary to U+FFFD.
  EXPECT_EQ(*t.Decode({72, 256, 105, 999}), "Hi\xEF\xBF\xBD");
  EXPECT_EQ(t.name(), "byte");
}

TEST(MakeTokenizer, ParsesSpecs) {
  Result<std::unique_ptr<Tokenizer>> byte = MakeTokenizer("byte");
  ASSERT_TRUE(byte.ok());
  EXPECT_EQ((*byte)->vocab_size(), 257u);

  Result<std::unique_ptr<Tokenizer>> bad = MakeTokenizer("gpt2");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("sentencepiece:PATH"), std::string::npos);
  EXPECT_FALSE(MakeTokenizer("sentencepiece:").ok());
  Result<std::unique_ptr<Tokenizer>> missing = MakeTokenizer("sentencepiece:/tmp/no/such.model");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(SentencePiece, MissingHelperSaysHowToBuildIt) {
  ::setenv("TENAX_SPM", "/nonexistent/tenax-spm", 1);
  Result<std::string> spm = FindSpmBinary();
  ::unsetenv("TENAX_SPM");
  EXPECT_EQ(spm.status().code(), StatusCode::kNotFound);
  EXPECT_NE(spm.status().message().find("libsentencepiece-dev"), std::string::npos);
}

TEST(Subprocess, PipesLargeInputAndOutput) {
  // 4 MiB through `cat` exceeds every pipe buffer in both directions.
  std::string big(4 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4097) big[i] = static_cast<char>('a' + i % 26);
  Result<ProcessResult> r = RunProcess({"cat"}, big);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_TRUE(r->out == big);
  Result<ProcessResult> fail = RunProcess({"sh", "-c", "echo oops >&2; exit 3"}, "ignored");
  ASSERT_TRUE(fail.ok());
  EXPECT_EQ(fail->exit_code, 3);
  EXPECT_EQ(fail->err, "oops\n");
  // A child that exits without reading its stdin must not kill us with SIGPIPE.
  Result<ProcessResult> early = RunProcess({"true"}, big);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->exit_code, 0);
  EXPECT_EQ(RunProcess({"/no/such/program"}, "").status().code(), StatusCode::kIoError);
}

// Needs tenax-spm (built from apps/spm when libsentencepiece-dev is installed) and spm_train
// (Debian package `sentencepiece`) to make a model; skipped otherwise.
TEST(SentencePiece, TrainsEncodesAndDecodes) {
  if (!HaveSentencePiece()) GTEST_SKIP() << FindSpmBinary().status().message();
  TempDir dir;
  // 2,000 lines of pseudo-words built from 20 syllables: enough variety for 100 pieces.
  const char* syllables[] = {"ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "we",
                             "zo", "an", "el", "in", "or", "us", "th", "st", "qu", "br"};
  uint64_t x = 12345;
  auto next = [&x] { return x = (x * 1103515245 + 12345) % 2147483648u; };
  std::string text;
  for (int line = 0; line < 2000; ++line) {
    for (int w = 0; w < 10; ++w) {
      const uint64_t n = 2 + next() % 3;
      for (uint64_t k = 0; k < n; ++k) text += syllables[(next() >> 8) % 20];
      text += w == 9 ? "\n" : " ";
    }
  }
  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir.Join("corpus.txt"), text).ok());
  Result<ProcessResult> train = RunProcess(
      {"spm_train", "--input=" + dir.Join("corpus.txt"), "--model_prefix=" + dir.Join("sp"),
       "--vocab_size=100", "--model_type=unigram", "--num_threads=1", "--character_coverage=1.0"},
      "");
  if (!train.ok()) GTEST_SKIP() << "spm_train is not installed: " << train.status().message();
  ASSERT_EQ(train->exit_code, 0) << train->err;

  Result<std::unique_ptr<Tokenizer>> r = MakeTokenizer("sentencepiece:" + dir.Join("sp.model"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tokenizer& t = **r;
  EXPECT_EQ(t.vocab_size(), 100u);
  EXPECT_EQ(t.eos(), std::optional<uint32_t>(2));  // spm_train's default: unk 0, bos 1, eos 2
  EXPECT_EQ(t.name(), "sentencepiece:" + dir.Join("sp.model"));
  EXPECT_EQ(t.cache_slug().rfind("sp-sp-", 0), 0u) << t.cache_slug();

  const std::string sample = "kalo mista quibr wezo thelan";
  Result<std::vector<uint32_t>> ids = t.Encode(sample);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_FALSE(ids->empty());
  EXPECT_LT(ids->size(), sample.size());  // subwords, not characters
  for (uint32_t id : *ids) EXPECT_LT(id, 100u);
  EXPECT_EQ(*t.Decode(*ids), sample);
  std::vector<uint32_t> with_eos = *ids;
  with_eos.push_back(2);
  EXPECT_EQ(*t.Decode(with_eos), sample);
  EXPECT_EQ(*t.Encode(""), std::vector<uint32_t>{});

  // An id past the vocabulary decodes to U+FFFD between the decoded runs around it.
  std::vector<uint32_t> bad = *t.Encode("kalo");
  bad.push_back(5000);
  EXPECT_EQ(*t.Decode(bad), "kalo\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tenax::data
