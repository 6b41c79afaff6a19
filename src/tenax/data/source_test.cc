#include "tenax/data/source.h"

#include <gtest/gtest.h>

#include "tenax/core/temp_dir.h"
#include "tenax/data/prepare.h"

namespace tenax::data {
namespace {

using testing::TempDir;

DataOptions SmallSynthetic() {
  DataOptions o;
  o.source = "synthetic";
  o.synthetic.train_tokens = 3000;
  o.synthetic.val_tokens = 500;
  return o;
}

TEST(OpenDataSource, Synthetic) {
  Result<DataSplits> s = OpenDataSource(SmallSynthetic());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.size(), 3000);
  EXPECT_EQ(s->val.size(), 500);
  EXPECT_EQ(s->vocab_size, 64u);
  EXPECT_FALSE(s->eos.has_value());
  ASSERT_TRUE(s->entropy_rate_nats.has_value());
  EXPECT_GT(*s->entropy_rate_nats, 0.5);
  EXPECT_LT(*s->entropy_rate_nats, 4.16);  // log 64
  EXPECT_NE(s->description.find("entropy rate"), std::string::npos);
}

TEST(OpenDataSource, ShardsAndErrors) {
  TempDir dir;
  ByteTokenizer tok;
  ASSERT_TRUE(PrepareDocuments({{"a", std::string(2000, 'z')}}, tok, dir.path(), "text").ok());
  DataOptions o;
  o.source = "shards";
  o.path = dir.path();
  Result<DataSplits> s = OpenDataSource(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->train.size() + s->val.size(), 2001);
  EXPECT_EQ(s->val.size(), 256);
  EXPECT_EQ(s->tokenizer, "byte");
  EXPECT_EQ(s->eos, std::optional<uint32_t>(256));
  EXPECT_FALSE(s->entropy_rate_nats.has_value());

  o.path.clear();
  EXPECT_NE(OpenDataSource(o).status().message().find("data.path"), std::string::npos);
  o.source = "wikipedia";
  Result<DataSplits> bad = OpenDataSource(o);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"brown\", \"synthetic\", \"shards\""), std::string::npos);
}

TEST(OpenEvalSpec, AllForms) {
  TempDir dir;
  ByteTokenizer tok;
  ASSERT_TRUE(PrepareDocuments({{"a", std::string(2000, 'z')}}, tok, dir.path(), "text").ok());
  const DataOptions defaults = SmallSynthetic();

  Result<TokenStream> val = OpenEvalSpec(dir.path(), defaults);
  ASSERT_TRUE(val.ok()) << val.status().ToString();
  EXPECT_EQ(val->size(), 256);
  Result<TokenStream> train = OpenEvalSpec(dir.path() + ":train", defaults);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->size(), 2001 - 256);
  EXPECT_EQ(OpenEvalSpec(dir.path() + ":val", defaults)->size(), 256);

  Result<TokenStream> shard = OpenEvalSpec(dir.Join("train.bin"), defaults);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ(shard->size(), 2001 - 256);
  EXPECT_FALSE(OpenEvalSpec(dir.Join("train.bin") + ":train", defaults).ok());

  EXPECT_EQ(OpenEvalSpec("synthetic", defaults)->size(), 500);
  EXPECT_EQ(OpenEvalSpec("synthetic:val", defaults)->size(), 500);
  EXPECT_EQ(OpenEvalSpec("synthetic:train", defaults)->size(), 3000);

  Result<TokenStream> bad = OpenEvalSpec("/no/such/place", defaults);
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("FILE.bin"), std::string::npos);
  EXPECT_FALSE(OpenEvalSpec("", defaults).ok());
  EXPECT_FALSE(OpenEvalSpec(":val", defaults).ok());
}

TEST(OpenEvalSpec, BrownUsesTheCache) {
  TempDir corpus, cache;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "ca" + std::string(i < 10 ? "0" : "") + std::to_string(i);
    ASSERT_TRUE(LocalFs().WriteFileAtomic(corpus.Join(name), "doc/nn " + name + "/np").ok());
  }
  DataOptions o;
  o.brown_dir = corpus.path();
  o.cache_dir = cache.path();
  Result<TokenStream> val = OpenEvalSpec("brown", o);
  ASSERT_TRUE(val.ok()) << val.status().ToString();
  EXPECT_EQ(val->size(), 9);  // file 19: "doc ca19" + EOS
  Result<TokenStream> train = OpenEvalSpec("brown:train", o);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->size(), 19 * 9);
}

}  // namespace
}  // namespace tenax::data
