#include "tenax/config/config.h"

#include <gtest/gtest.h>

namespace tenax {
namespace {

TEST(Config, DefaultsAndValues) {
  auto c = ParseConfig("[training]\nsteps = 7\nseq_len = 64\n[optimizer]\nlr = 1\n", {}, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->training.steps, 7);
  EXPECT_EQ(c->training.seq_len, 64);
  EXPECT_DOUBLE_EQ(c->optimizer.lr, 1.0);  // an integer is accepted where a number is expected
  EXPECT_EQ(c->training.local_batch_size, 8);
  EXPECT_EQ(c->data.source, "brown");
}

TEST(Config, UnknownKeyNamesKeyAndAllowed) {
  auto c = ParseConfig("[training]\nstep = 7\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("unknown key 'training.step'"), std::string::npos) << m;
  EXPECT_NE(m.find("steps"), std::string::npos) << m;
}

TEST(Config, UnknownSectionAndNested) {
  auto c = ParseConfig("[trainin]\nsteps = 1\n[data.synthetic]\nordr = 2\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("unknown section [trainin]"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key 'data.synthetic.ordr'"), std::string::npos) << m;
  EXPECT_NE(m.find("2 problems"), std::string::npos) << m;
}

TEST(Config, BadValuesNameValueAndAllowed) {
  auto c = ParseConfig("[training]\nsteps = -3\n[lr_scheduler]\nname = \"linear\"\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("training.steps = -3 is invalid: must be > 0"), std::string::npos) << m;
  EXPECT_NE(m.find("lr_scheduler.name = \"linear\" is invalid: expected one of: cosine, wsd, "
                   "constant"),
            std::string::npos)
      << m;
}

// Values that parse but make no sense stop the run before any work, naming the key and the
// allowed range: TOML's inf and nan, and numbers far outside what training can use.
TEST(Config, NonFiniteAndOutOfRangeNumbersNameTheKey) {
  for (const auto& [set, message] : std::vector<std::pair<std::string, std::string>>{
           {"model.norm_eps=inf", "model.norm_eps = inf is invalid: expected a finite number"},
           {"model.norm_eps=nan", "model.norm_eps = nan is invalid: expected a finite number"},
           {"model.norm_eps=0.5", "model.norm_eps = 0.5 is invalid: must be in (0, 0.1]"},
           {"optimizer.lr=1e308", "optimizer.lr = 1e+308 is invalid: must be in (0, 1]"},
           {"optimizer.lr=-inf", "optimizer.lr = -inf is invalid: expected a finite number"},
           {"training.max_norm=inf", "training.max_norm = inf is invalid"},
           {"parallelism.collective_timeout_s=nan", "parallelism.collective_timeout_s = nan"},
           {"optimizer.weight_decay=1e9", "optimizer.weight_decay = 1000000000 is invalid"},
       }) {
    auto c = ParseConfig("", {set}, "t.toml");
    ASSERT_FALSE(c.ok()) << set;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(message), std::string::npos) << c.status().message();
  }
  EXPECT_TRUE(ParseConfig("", {"model.norm_eps=1e-6", "optimizer.lr=1"}, "t.toml").ok());
}

TEST(Config, WrongType) {
  auto c = ParseConfig("[training]\nsteps = \"ten\"\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("training.steps = \"ten\" is invalid: expected an integer"),
            std::string::npos)
      << c.status().message();
}

TEST(Config, OverridesApplyInOrderAndParseTypes) {
  auto c = ParseConfig("[training]\nsteps = 7\n",
                       {"training.steps=9", "data.source=synthetic", "model.n_layers=3",
                        "data.synthetic.order=1", "metrics.tensorboard=false"},
                       "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->training.steps, 9);
  EXPECT_EQ(c->data.source, "synthetic");
  ASSERT_TRUE(c->model.n_layers.has_value());
  EXPECT_EQ(*c->model.n_layers, 3);
  EXPECT_EQ(c->data.synthetic.order, 1);
  EXPECT_FALSE(c->metrics.tensorboard);
}

TEST(Config, BadOverrideSyntax) {
  EXPECT_FALSE(ParseConfig("", {"steps=3"}, "t").ok());
  EXPECT_FALSE(ParseConfig("", {"training.steps"}, "t").ok());
  auto c = ParseConfig("", {"training.bogus=1"}, "t");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("training.bogus"), std::string::npos);
}

TEST(Config, SyntaxErrorHasLine) {
  auto c = ParseConfig("[training]\nsteps = = 3\n", {}, "bad.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.toml:2:"), std::string::npos) << c.status().message();
}

TEST(Config, TomlRoundTrip) {
  auto c = ParseConfig("[model]\npreset = \"llama3-8b\"\nn_layers = 8\n[job]\nseed = 42\n",
                       {"data.synthetic.concentration=0.5"}, "t");
  ASSERT_TRUE(c.ok());
  std::string text = ConfigToToml(*c);
  auto back = ParseConfig(text, {}, "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(ConfigToToml(*back), text);
  EXPECT_EQ(*back->model.n_layers, 8);
  EXPECT_EQ(back->job.seed, 42u);
  EXPECT_FALSE(back->model.dim.has_value());
}

// Mixture-of-experts keys: read, range-checked naming the key, and written back.
TEST(Config, MoeKeysRoundTripAndRanges) {
  auto c = ParseConfig(
      "[model]\npreset = \"debug-tiny\"\nn_experts = 8\nn_experts_per_token = 2\n"
      "n_shared_experts = 1\nmoe_ffn_hidden_dim = 32\nmoe_router = \"sigmoid\"\n"
      "moe_aux_loss_coef = 0.001\nmoe_bias_update_rate = 0.001\nmoe_layer_start = 1\n"
      "moe_layer_interval = 2\n[parallelism]\nexpert_parallel = 4\n",
      {}, "t");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c->model.n_experts, 8);
  EXPECT_EQ(*c->model.moe_router, "sigmoid");
  EXPECT_EQ(c->parallelism.expert_parallel, 4);
  const std::string text = ConfigToToml(*c);
  auto back = ParseConfig(text, {}, "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(ConfigToToml(*back), text);
  EXPECT_EQ(*back->model.moe_layer_interval, 2);
  EXPECT_DOUBLE_EQ(*back->model.moe_bias_update_rate, 0.001);
  for (const auto& [set, message] : std::vector<std::pair<std::string, std::string>>{
           {"model.moe_router=\"top2\"", "model.moe_router = \"top2\" is invalid"},
           {"model.n_experts=-1", "model.n_experts = -1 is invalid: must be >= 0"},
           {"model.n_experts_per_token=0", "model.n_experts_per_token = 0 is invalid"},
           {"model.moe_aux_loss_coef=2", "model.moe_aux_loss_coef = 2 is invalid"},
           {"parallelism.expert_parallel=0", "parallelism.expert_parallel = 0 is invalid"},
       }) {
    auto bad = ParseConfig("", {set}, "t.toml");
    ASSERT_FALSE(bad.ok()) << set;
    EXPECT_NE(bad.status().message().find(message), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace tenax
