#include "tenax/config/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "tenax/config/keys.h"

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

// The key table drives the reader and the writer: every key of the table is written, and a value
// changed in any one key survives the round trip (the old per-key writer could forget a key and
// no test noticed).
TEST(Config, EveryKeyRoundTripsAChangedValue) {
  const Config defaults;
  for (const KeySpec& k : ConfigKeys()) {
    SCOPED_TRACE(k.path);
    if (k.allowed.size() == 1) continue;  // one accepted value: the default
    // A valid value other than the default, found from the key's own description.
    std::vector<std::string> candidates;
    const std::optional<KeyValue> d = k.get(defaults);
    switch (k.type) {
      case KeyType::kString:
        for (const auto& a : k.allowed) candidates.push_back("\"" + a + "\"");
        candidates.push_back("\"x\"");
        break;
      case KeyType::kBool:
        candidates = {"true", "false"};
        break;
      case KeyType::kInt:
      case KeyType::kUInt:
        candidates = {"3", "1", "2", "0", "4096"};
        if (k.allows_auto) candidates.insert(candidates.begin(), "\"auto\"");
        break;
      case KeyType::kFloat:
        candidates = {"0.25", "0.5", "2.5", "1e-06", "3.0", "700.0"};
        break;
    }
    bool changed = false;
    for (const std::string& cand : candidates) {
      auto c = ParseConfig("", {k.path + "=" + cand}, "t");
      if (!c.ok() || k.get(*c) == d) continue;
      const std::string text = ConfigToToml(*c);
      EXPECT_NE(text.find(k.name + " = "), std::string::npos) << text;
      auto back = ParseConfig(text, {}, "roundtrip");
      ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
      EXPECT_TRUE(k.get(*back) == k.get(*c)) << cand;
      changed = true;
      break;
    }
    EXPECT_TRUE(changed) << "no valid non-default value found for " << k.path;
  }
}

// `tenax config show --defaults` is TOML that reads back to the defaults, key by key, and names
// every key of the table (set ones as `key = value`, unset optional ones as comments).
TEST(Config, ShowDefaultsRoundTripsEveryKey) {
  const Config defaults;
  const std::string text = ConfigShowToml(defaults, "defaults");
  auto back = ParseConfig(text, {}, "show");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  for (const KeySpec& k : ConfigKeys()) {
    EXPECT_TRUE(k.get(*back) == k.get(defaults)) << k.path;
    const std::string line = (k.get(defaults) ? "\n" : "\n# ") + k.name + " =";
    EXPECT_NE(text.find(line), std::string::npos) << k.path;
  }
  // An effective config shows its values and what they changed.
  auto c = ParseConfig("", {"training.steps=7", "model.n_layers=3"}, "t");
  ASSERT_TRUE(c.ok());
  const std::string shown = ConfigShowToml(*c, "effective");
  EXPECT_NE(shown.find("\nsteps = 7  # default 100\n"), std::string::npos) << shown;
  auto again = ParseConfig(shown, {}, "show");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(ConfigToToml(*again), ConfigToToml(*c));
}

TEST(Config, DidYouMeanForKeysSectionsAndValues) {
  auto c = ParseConfig(
      "[training]\nsetps = 7\nlr = 0.1\n[lr_scheduler]\nname = \"cosin\"\n"
      "[optimiser]\nlr = 1\n",
      {}, "t.toml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("t.toml:2: unknown key 'training.setps'; did you mean 'training.steps'?"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("t.toml:3: unknown key 'training.lr'; did you mean 'optimizer.lr'?"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("t.toml:5: lr_scheduler.name = \"cosin\" is invalid: expected one of: cosine, "
                   "wsd, constant; did you mean \"cosine\"?"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("unknown section [optimiser]; did you mean [optimizer]?"), std::string::npos)
      << m;
  // Nothing close: no guess.
  auto far = ParseConfig("[training]\nwidget = 1\n", {}, "t.toml");
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.status().message().find("did you mean"), std::string::npos)
      << far.status().message();
}

// A mistake in a --set is blamed on that --set, one in the file on its line.
TEST(Config, ErrorsNameTheSetOrTheFileLine) {
  auto c = ParseConfig("[training]\nsteps = 10\nseq_len = 0\n", {"training.steps=-1"}, "c.toml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("c.toml with --set has 2 problems"), std::string::npos) << m;
  EXPECT_NE(m.find("--set training.steps=-1: training.steps = -1 is invalid: must be > 0"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("c.toml:3: training.seq_len = 0 is invalid: must be > 0"), std::string::npos)
      << m;
  auto only_set = ParseConfig("[training]\nsteps = 10\n", {"optimizer.lr=5"}, "c.toml");
  ASSERT_FALSE(only_set.ok());
  EXPECT_EQ(only_set.status().message().rfind("--set has 1 problem:", 0), 0u)
      << only_set.status().message();
  auto bare = ParseConfig("", {"steps=3"}, "c.toml");
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("did you mean training.steps=3?"), std::string::npos)
      << bare.status().message();
}

// The docs' key list is produced from the table: docs/config.md carries it verbatim.
TEST(Config, DocsKeyListIsCurrent) {
  const char* src = std::getenv("TENAX_SOURCE_DIR");
  if (src == nullptr) src = TENAX_SOURCE_DIR_DEFAULT;
  std::ifstream in(std::string(src) + "/docs/config.md");
  ASSERT_TRUE(in.good()) << "docs/config.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- keys: generated by `tenax config keys --markdown` -->\n";
  const std::string end = "<!-- end of keys -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), ConfigKeysMarkdown())
      << "regenerate the list: build/tenax config keys --markdown, and paste it into "
         "docs/config.md";
}

}  // namespace
}  // namespace tenax
