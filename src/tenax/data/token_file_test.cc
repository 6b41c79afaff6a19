// Token files read directly: llm.c (both versions), nanoGPT, tenax shards, globs, and the
// messages for what cannot be read.
#include "tenax/data/token_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tenax/core/temp_dir.h"
#include "tenax/data/shard.h"
#include "tenax/data/source.h"

namespace tenax::data {
namespace {

using testing::TempDir;

std::vector<uint32_t> ToVector(const TokenStream& s) {
  std::vector<uint32_t> v;
  for (int64_t i = 0; i < s.size(); ++i) v.push_back(s.at(i));
  return v;
}

// The llm.c header byte for byte, as dev/data/data_common.py writes it (int32 x 256).
TEST(TokenFile, LlmcHeaderLayout) {
  TempDir dir;
  ASSERT_TRUE(WriteLlmcFile(dir.Join("a.bin"), {50256, 1, 2}, false).ok());
  const std::string b = *LocalFs().ReadFile(dir.Join("a.bin"));
  ASSERT_EQ(b.size(), 1024u + 3 * 2);
  int32_t h[4];
  std::memcpy(h, b.data(), sizeof(h));
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 3);
  EXPECT_EQ(h[3], 0);
  uint16_t first;
  std::memcpy(&first, b.data() + 1024, 2);
  EXPECT_EQ(first, 50256);
}

TEST(TokenFile, ReadsLlmcVersionsWithTheirVocabularies) {
  TempDir dir;
  ASSERT_TRUE(WriteLlmcFile(dir.Join("gpt2.bin"), {50256, 15496, 995, 50256, 7}, false).ok());
  Result<TokenStream> s = OpenTokenFiles(dir.Join("gpt2.bin"), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(ToVector(*s), (std::vector<uint32_t>{50256, 15496, 995, 50256, 7}));
  EXPECT_EQ(s->vocab_size(), 50257u);
  EXPECT_EQ(s->eos(), std::optional<uint32_t>(50256));

  ASSERT_TRUE(WriteLlmcFile(dir.Join("llama.bin"), {128000, 9906, 1917, 128000}, true).ok());
  s = OpenTokenFiles(dir.Join("llama.bin"), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->vocab_size(), 128256u);
  EXPECT_EQ(s->bos(), std::optional<uint32_t>(128000));
  EXPECT_EQ(s->at(2), 1917u);

  // An id past the assumed vocabulary names the setting that fixes it.
  ASSERT_TRUE(WriteLlmcFile(dir.Join("big.bin"), {1, 60000}, false).ok());
  Status st = OpenTokenFiles(dir.Join("big.bin"), {}).status();
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("id 60000 at position 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("data.vocab_size"), std::string::npos) << st.message();
  TokenFileOptions o;
  o.vocab_size = 60001;
  EXPECT_TRUE(OpenTokenFiles(dir.Join("big.bin"), o).ok());

  // A truncated file (a download cut short) is named as such.
  std::string cut = *LocalFs().ReadFile(dir.Join("gpt2.bin"));
  dir.Write("cut.bin", cut.substr(0, cut.size() - 2));
  EXPECT_NE(OpenTokenFiles(dir.Join("cut.bin"), {}).status().message().find("truncated"),
            std::string::npos);
}

TEST(TokenFile, NanoGptNeedsItsFormatAndVocabularyNamed) {
  TempDir dir;
  const uint16_t ids[] = {3, 1, 4, 1, 5};
  dir.Write("train.bin", std::string(reinterpret_cast<const char*>(ids), sizeof(ids)));
  Status st = OpenTokenFiles(dir.Join("train.bin"), {}).status();
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("data.token_format = \"nanogpt\""), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("delete"), std::string::npos) << st.message();
  TokenFileOptions o;
  o.format = "nanogpt";
  EXPECT_NE(OpenTokenFiles(dir.Join("train.bin"), o).status().message().find("data.vocab_size"),
            std::string::npos);
  o.vocab_size = 65;
  Result<TokenStream> s = OpenTokenFiles(dir.Join("train.bin"), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(ToVector(*s), (std::vector<uint32_t>{3, 1, 4, 1, 5}));
  EXPECT_FALSE(s->eos().has_value());
  o.vocab_size = 4;  // id 4 and 5 are outside
  EXPECT_NE(OpenTokenFiles(dir.Join("train.bin"), o).status().message().find("id 4 at position 2"),
            std::string::npos);
}

TEST(TokenFile, GlobsConcatenateInSortedOrderAndMustAgree) {
  TempDir dir;
  ASSERT_TRUE(WriteLlmcFile(dir.Join("fineweb_train_000002.bin"), {5, 6}, false).ok());
  ASSERT_TRUE(WriteLlmcFile(dir.Join("fineweb_train_000001.bin"), {1, 2, 3}, false).ok());
  ASSERT_TRUE(WriteShard(LocalFs(), dir.Join("tenax.bin"), {9, 9}, 50257, 50256u).ok());
  Result<TokenStream> s = OpenTokenFiles(dir.Join("fineweb_train_*.bin"), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(ToVector(*s), (std::vector<uint32_t>{1, 2, 3, 5, 6}));
  EXPECT_NE(s->name().find("(2 files)"), std::string::npos);
  // A tenax shard of the same vocabulary and separators joins an llm.c stream.
  s = OpenTokenFiles(dir.Join("*.bin"), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->size(), 7);
  ASSERT_TRUE(WriteLlmcFile(dir.Join("x_wide.bin"), {1}, true).ok());
  EXPECT_NE(OpenTokenFiles(dir.Join("*.bin"), {}).status().message().find("does not match"),
            std::string::npos);
  Status none = OpenTokenFiles(dir.Join("nothing_*.bin"), {}).status();
  EXPECT_EQ(none.code(), StatusCode::kNotFound);
  EXPECT_NE(none.message().find("data.path"), std::string::npos);
}

TEST(TokenFile, TokensSourceTrainsOnTwoFiles) {
  TempDir dir;
  std::vector<uint32_t> train, val;
  for (uint32_t i = 0; i < 1000; ++i) train.push_back(i % 50257);
  for (uint32_t i = 0; i < 100; ++i) val.push_back(i);
  ASSERT_TRUE(WriteLlmcFile(dir.Join("t_train.bin"), train, false).ok());
  ASSERT_TRUE(WriteLlmcFile(dir.Join("t_val.bin"), val, false).ok());
  DataOptions o;
  o.source = "tokens";
  o.path = dir.Join("t_train.bin");
  o.val_path = dir.Join("t_val.bin");
  Result<DataSplits> s = OpenDataSource(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.size(), 1000);
  EXPECT_EQ(s->val.size(), 100);
  EXPECT_EQ(s->vocab_size, 50257u);
  EXPECT_EQ(s->eos, std::optional<uint32_t>(50256));
  EXPECT_NE(s->description.find("token files"), std::string::npos);
  // Pointing data.source = "shards" at a file names the source that reads it.
  o.source = "shards";
  Status wrong = OpenDataSource(o).status();
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("data.source = \"tokens\""), std::string::npos) << wrong.message();
  // `tenax eval --data FILE.bin` reads it too.
  Result<TokenStream> e = OpenEvalSpec(dir.Join("t_val.bin"), o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size(), 100);
}

}  // namespace
}  // namespace tenax::data
