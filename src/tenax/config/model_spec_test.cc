#include "tenax/config/model_spec.h"

#include <gtest/gtest.h>

namespace tenax {
namespace {

ModelSpec Preset(const std::string& name) {
  ModelOptions o;
  o.preset = name;
  auto r = ResolveModelSpec(o, 0);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

// Published totals: 8.03B, 70.55B, 405.85B (Meta's model cards), 1.24B and 3.21B for Llama 3.2.
TEST(ModelSpec, PublishedParameterCounts) {
  EXPECT_EQ(CountParams(Preset("llama3-8b")).total, 8030261248);
  EXPECT_EQ(CountParams(Preset("llama3-70b")).total, 70553706496);
  EXPECT_EQ(CountParams(Preset("llama3-405b")).total, 405853388800);
  EXPECT_EQ(CountParams(Preset("llama3.2-1b")).total, 1235814400);
  EXPECT_EQ(CountParams(Preset("llama3.2-3b")).total, 3212749824);
}

TEST(ModelSpec, FlopsPerTokenFollowsTorchtitan) {
  ModelSpec s = Preset("llama3-8b");
  FlopsPerToken f = TrainingFlopsPerToken(s, 8192);
  // Untied: 6 x (total - embedding) + 12 L H Q T.
  const double n = 8030261248.0 - 128256.0 * 4096.0;
  EXPECT_DOUBLE_EQ(f.dense, 6.0 * n);
  EXPECT_DOUBLE_EQ(f.attention, 12.0 * 32 * 32 * 128 * 8192);
  // Tied: the output projection still costs matmul FLOPs.
  ModelSpec t = Preset("llama3.2-1b");
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(t, 1).dense, 6.0 * 1235814400.0);
}

TEST(ModelSpec, OverridesAndDataVocab) {
  ModelOptions o;
  o.preset = "llama3-8b";
  o.n_layers = 8;
  auto r = ResolveModelSpec(o, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_layers, 8);
  EXPECT_EQ(r->dim, 4096);
  ModelOptions d;
  d.preset = "debug-tiny";
  auto dr = ResolveModelSpec(d, 257);
  ASSERT_TRUE(dr.ok());
  EXPECT_EQ(dr->vocab_size, 257);
  EXPECT_FALSE(ResolveModelSpec(d, 0).ok());
}

TEST(ModelSpec, InvalidShapesNameTheFactors) {
  ModelOptions o;
  o.preset = "debug-small";
  o.n_kv_heads = 3;
  auto r = ResolveModelSpec(o, 257);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.n_heads (4) is not divisible by model.n_kv_heads (3)"),
            std::string::npos)
      << r.status().message();
  ModelOptions u;
  u.preset = "nope";
  auto ur = ResolveModelSpec(u, 257);
  ASSERT_FALSE(ur.ok());
  EXPECT_NE(ur.status().message().find("llama3-405b"), std::string::npos);
  ModelOptions v;
  v.preset = "llama3-8b";
  v.vocab_size = 100;
  EXPECT_FALSE(ResolveModelSpec(v, 257).ok());
}

}  // namespace
}  // namespace tenax
