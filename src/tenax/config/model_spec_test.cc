#include "tenax/config/model_spec.h"

#include <gtest/gtest.h>

#include "tenax/config/model_spec_json.h"

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

// One check serves `tenax train` (config keys) and `tenax plan` (flags): each names its own.
TEST(ModelSpec, HeadShapeCheckNamesTheFieldsAsTheCallerSpellsThem) {
  ModelSpec s;
  s.dim = 96;
  s.n_heads = 5;
  s.n_kv_heads = 5;
  Status st = CheckHeadShape(s, kShapeConfigKeys);
  EXPECT_EQ(st.message(), "model.dim (96) is not divisible by model.n_heads (5)");
  st = CheckHeadShape(s, {"--hidden", "--heads", "--kv-heads"});
  EXPECT_EQ(st.message(), "--hidden (96) is not divisible by --heads (5)");
  s.n_heads = 8;
  s.n_kv_heads = 3;
  st = CheckHeadShape(s, {"--hidden", "--heads", "--kv-heads"});
  EXPECT_NE(st.message().find("--heads (8) is not divisible by --kv-heads (3)"), std::string::npos)
      << st.message();
  s.n_kv_heads = 2;
  EXPECT_TRUE(CheckHeadShape(s, kShapeConfigKeys).ok());
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

// Mixtral 8x7B: 46.7B parameters, 12.9B active (Mistral AI's announcement), and FLOPs from the
// active ones: 6 x (active - embedding) + attention.
TEST(ModelSpec, MixtralTotalAndActiveParameters) {
  const ModelSpec s = Preset("mixtral-8x7b");
  const ParamCounts c = CountParams(s);
  EXPECT_EQ(c.total, 46702792704);
  EXPECT_EQ(c.experts, 32LL * 8 * 3 * 4096 * 14336);
  EXPECT_EQ(c.active, c.total - c.experts / 8 * 6);
  EXPECT_NEAR(c.active / 1e9, 12.9, 0.05);
  EXPECT_EQ(c.feed_forward, 0);
  const FlopsPerToken f = TrainingFlopsPerToken(s, 4096);
  EXPECT_DOUBLE_EQ(f.dense, 6.0 * static_cast<double>(c.active - c.embedding));
  EXPECT_EQ(s.n_moe_layers(), 32);
}

TEST(ModelSpec, MoeLayersAndOverrides) {
  ModelOptions o;
  o.preset = "debug-small";  // 4 dense layers
  o.n_experts = 4;
  o.n_experts_per_token = 1;
  o.moe_layer_start = 1;
  o.moe_layer_interval = 2;
  auto r = ResolveModelSpec(o, 257);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->moe.ffn_hidden_dim, r->ffn_hidden_dim);  // defaults to the dense width
  EXPECT_FALSE(r->moe.IsMoeLayer(0));
  EXPECT_TRUE(r->moe.IsMoeLayer(1));
  EXPECT_FALSE(r->moe.IsMoeLayer(2));
  EXPECT_TRUE(r->moe.IsMoeLayer(3));
  const ParamCounts c = CountParams(*r);
  EXPECT_EQ(c.feed_forward, 2 * 3 * 128 * 384);
  EXPECT_EQ(c.experts, 2 * 4 * 3 * 128 * 384);
  EXPECT_EQ(c.active, c.total - c.experts / 4 * 3);
}

TEST(ModelSpec, MoeJsonRoundTrip) {
  ModelSpec s = Preset("mixtral-8x7b");
  s.moe.router = "sigmoid";
  s.moe.bias_update_rate = 0.001;
  s.moe.n_shared = 2;
  auto back = ModelSpecFromJson(ModelSpecToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ModelSpecToJson(*back), ModelSpecToJson(s));
  EXPECT_FALSE(ModelSpecToJson(Preset("llama3-8b")).contains("moe"));
}

TEST(ModelSpec, MoeMistakesNameTheKeys) {
  auto message = [](ModelOptions o) {
    auto r = ResolveModelSpec(o, 257);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  ModelOptions a;
  a.preset = "debug-moe";
  a.n_experts_per_token = 9;
  EXPECT_NE(message(a).find("model.n_experts_per_token (9) must be between 1 and model.n_experts "
                            "(8)"),
            std::string::npos);
  ModelOptions b;
  b.preset = "debug-moe";
  b.moe_bias_update_rate = 0.001;
  EXPECT_NE(message(b).find("model.moe_bias_update_rate (0.001) needs model.moe_router = "
                            "\"sigmoid\""),
            std::string::npos);
  ModelOptions c;
  c.preset = "debug-tiny";
  c.n_experts_per_token = 2;
  EXPECT_NE(message(c).find("model.n_experts_per_token is set but model.n_experts is 0"),
            std::string::npos);
  ModelOptions d;
  d.preset = "debug-moe";
  d.moe_layer_start = 2;
  EXPECT_NE(message(d).find("model.moe_layer_start (2) must name a layer: 0 .. model.n_layers - 1 "
                            "= 1"),
            std::string::npos);
}

}  // namespace
}  // namespace tenax
