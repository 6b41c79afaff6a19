#include "tenax/data/prepare.h"

#include <gtest/gtest.h>

#include "tenax/core/temp_dir.h"

namespace tenax::data {
namespace {

using testing::TempDir;

std::vector<uint32_t> ToVector(const TokenStream& s) {
  std::vector<uint32_t> v;
  for (int64_t i = 0; i < s.size(); ++i) v.push_back(s.at(i));
  return v;
}

TEST(SplitRule, DocumentRuleAndTailRule) {
  EXPECT_FALSE(IsValidationDocument(19, 19));  // fewer than 20 documents: token rule instead
  EXPECT_TRUE(IsValidationDocument(19, 20));
  EXPECT_TRUE(IsValidationDocument(39, 500));
  EXPECT_FALSE(IsValidationDocument(20, 500));
  EXPECT_EQ(TailValidationTokens(2), 1);
  EXPECT_EQ(TailValidationTokens(100), 50);       // min(256, n/2) wins over 5%
  EXPECT_EQ(TailValidationTokens(1000), 256);
  EXPECT_EQ(TailValidationTokens(100000), 5000);  // 5%
  EXPECT_EQ(TailValidationTokens(5121), 257);     // ceil(5%)
}

TEST(Prepare, FewDocumentsUseTheTailTokenRule) {
  TempDir dir;
  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir.Join("a.txt"), std::string(300, 'a')).ok());
  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir.Join("b.txt"), "hello world").ok());
  ByteTokenizer tok;
  const std::string out = dir.Join("out");
  ASSERT_TRUE(Prepare({dir.Join("a.txt"), dir.Join("b.txt")}, tok, out).ok());

  Result<PreparedData> d = OpenPrepared(out);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  // Stream: 300 'a', EOS, "hello world", EOS = 313 tokens; val = max(16, 156) = 156.
  EXPECT_EQ(d->meta.split_rule, "tail-tokens");
  EXPECT_EQ(d->meta.train.tokens, 157);
  EXPECT_EQ(d->meta.val.tokens, 156);
  EXPECT_EQ(d->meta.train.documents, 1);
  EXPECT_EQ(d->meta.val.documents, 2);  // document a straddles the cut
  EXPECT_EQ(d->meta.words, 3);
  EXPECT_EQ(d->meta.vocab_size, 257u);
  EXPECT_EQ(d->meta.eos, std::optional<uint32_t>(256));
  EXPECT_EQ(d->meta.tokenizer, "byte");
  EXPECT_EQ(d->meta.sources, (std::vector<std::string>{dir.Join("a.txt"), dir.Join("b.txt")}));
  const std::vector<uint32_t> val = ToVector(d->val);
  EXPECT_EQ(val.back(), 256u);
  EXPECT_EQ(val[val.size() - 2], static_cast<uint32_t>('d'));
  EXPECT_EQ(val[0], static_cast<uint32_t>('a'));
  EXPECT_EQ(ToVector(d->train), std::vector<uint32_t>(157, 'a'));
}

TEST(Prepare, TwentyDocumentsUseTheDocumentRule) {
  TempDir dir;
  std::vector<Document> docs;
  for (int i = 0; i < 40; ++i) docs.push_back({"d" + std::to_string(i), std::string(i + 1, 'x')});
  ByteTokenizer tok;
  Result<PreparedMeta> m = PrepareDocuments(docs, tok, dir.path(), "text");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->split_rule, "document-mod-20");
  // Documents 19 and 39 (lengths 20 and 40, plus an EOS each) are validation.
  EXPECT_EQ(m->val.documents, 2);
  EXPECT_EQ(m->val.tokens, 21 + 41);
  EXPECT_EQ(m->train.documents, 38);
  EXPECT_EQ(m->train.tokens, (40 * 41 / 2 + 40) - 62);
  Result<PreparedData> d = OpenPrepared(dir.path());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->val.at(20), 256u);
  EXPECT_EQ(d->val.size(), 62);
}

TEST(Prepare, TooLittleDataIsAnError) {
  TempDir dir;
  ByteTokenizer tok;
  Result<PreparedMeta> m = PrepareDocuments({{"empty", ""}}, tok, dir.path(), "text");
  // One EOS token only.
  EXPECT_EQ(m.status().code(), StatusCode::kDataError);
  EXPECT_FALSE(PrepareDocuments({}, tok, dir.path(), "text").ok());
  EXPECT_EQ(Prepare({dir.Join("missing.txt")}, tok, dir.path()).code(), StatusCode::kNotFound);
}

// Delegates to the local filesystem but fails writes of one file name, as a crash would.
class FailingFs final : public FileSystem {
 public:
  explicit FailingFs(std::string fail_suffix) : fail_(std::move(fail_suffix)) {}
  Status WriteFileAtomic(const std::string& path, std::string_view data) override {
    if (path.size() >= fail_.size() && path.compare(path.size() - fail_.size(), fail_.size(),
                                                    fail_) == 0) {
      return IoError("injected failure writing " + path);
    }
    return LocalFs().WriteFileAtomic(path, data);
  }
  Result<std::string> ReadFile(const std::string& p) override { return LocalFs().ReadFile(p); }
  Status CreateDirs(const std::string& p) override { return LocalFs().CreateDirs(p); }
  Status RemoveAll(const std::string& p) override { return LocalFs().RemoveAll(p); }
  Status Rename(const std::string& a, const std::string& b) override {
    return LocalFs().Rename(a, b);
  }
  bool Exists(const std::string& p) override { return LocalFs().Exists(p); }
  Result<std::vector<std::string>> ListDir(const std::string& d) override {
    return LocalFs().ListDir(d);
  }
  Status SyncDir(const std::string& d) override { return LocalFs().SyncDir(d); }

 private:
  std::string fail_;
};

TEST(Prepare, ACrashedRewriteLeavesAFolderReadersRefuse) {
  TempDir dir;
  ByteTokenizer tok;
  ASSERT_TRUE(PrepareDocuments({{"a", std::string(1000, 'a')}}, tok, dir.path(), "text").ok());
  ASSERT_TRUE(OpenPrepared(dir.path()).ok());
  // Rewrite with new data, "crashing" while writing val.bin: train.bin is already new.
  FailingFs fs("val.bin");
  Result<PreparedMeta> crashed =
      PrepareDocuments({{"b", std::string(3000, 'b')}}, tok, dir.path(), "text", fs);
  EXPECT_EQ(crashed.status().code(), StatusCode::kIoError);
  EXPECT_EQ(OpenPrepared(dir.path()).status().code(), StatusCode::kNotFound);
  // Re-running the prepare repairs it.
  ASSERT_TRUE(PrepareDocuments({{"b", std::string(3000, 'b')}}, tok, dir.path(), "text").ok());
  Result<PreparedData> d = OpenPrepared(dir.path());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.size() + d->val.size(), 3001);
  EXPECT_EQ(d->train.at(0), static_cast<uint32_t>('b'));
}

TEST(OpenPrepared, RejectsMissingOrMismatchedFiles) {
  TempDir dir;
  Result<PreparedData> none = OpenPrepared(dir.path());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("meta.json"), std::string::npos);

  ByteTokenizer tok;
  ASSERT_TRUE(PrepareDocuments({{"a", std::string(1000, 'q')}}, tok, dir.path(), "text").ok());
  // Replace val.bin with a valid shard of another size: meta.json no longer matches.
  ASSERT_TRUE(WriteShard(LocalFs(), dir.Join("val.bin"), {1, 2, 3}, 257, 256u).ok());
  Result<PreparedData> mixed = OpenPrepared(dir.path());
  EXPECT_EQ(mixed.status().code(), StatusCode::kDataError);
  EXPECT_NE(mixed.status().message().find("does not match"), std::string::npos);

  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir.Join("meta.json"), "{not json").ok());
  EXPECT_EQ(OpenPrepared(dir.path()).status().code(), StatusCode::kDataError);
}

}  // namespace
}  // namespace tenax::data
