#include "tenax/config/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "tenax/config/config.h"
#include "tenax/config/keys.h"
#include "tenax/config/model_spec.h"
#include "tenax/config/model_spec_json.h"
#include "tenax/config/train_command.h"
#include "tenax/core/format.h"

namespace tenax {
namespace {

Status RunModel(const std::string& preset, const std::vector<std::string>& overrides,
                int64_t seq_len, bool as_json) {
  std::vector<std::string> all = {"model.preset=\"" + preset + "\""};
  all.insert(all.end(), overrides.begin(), overrides.end());
  TENAX_ASSIGN_OR_RETURN(Config config, ParseConfig("", all, "tenax model"));
  TENAX_ASSIGN_OR_RETURN(ModelSpec spec, ResolveModelSpec(config.model, 256));
  if (seq_len <= 0) seq_len = std::min<int64_t>(spec.max_seq_len, 8192);
  const ParamCounts c = CountParams(spec);
  const FlopsPerToken f = TrainingFlopsPerToken(spec, seq_len);
  if (as_json) {
    nlohmann::json j = {
        {"spec", ModelSpecToJson(spec)},
        {"params",
         {{"total", c.total},
          {"embedding", c.embedding},
          {"attention", c.attention},
          {"feed_forward", c.feed_forward},
          {"norms", c.norms},
          {"output", c.output},
          {"router", c.router},
          {"experts", c.experts},
          {"shared_experts", c.shared_experts},
          {"active", c.active}}},
        {"seq_len", seq_len},
        {"training_flops_per_token",
         {{"total", f.total()}, {"dense_6n", f.dense}, {"attention", f.attention}}}};
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("%s: %s parameters (%lld)\n", spec.name.c_str(),
              FormatParams(static_cast<double>(c.total)).c_str(), static_cast<long long>(c.total));
  std::printf(
      "  dim %lld, %lld layers, %lld heads (%lld kv), head dim %lld, ffn %lld, vocab %lld, "
      "%s output\n",
      (long long)spec.dim, (long long)spec.n_layers, (long long)spec.n_heads,
      (long long)spec.n_kv_heads, (long long)spec.head_dim(), (long long)spec.ffn_hidden_dim,
      (long long)spec.vocab_size, spec.tie_embeddings ? "tied" : "untied");
  std::printf("  embedding %s | attention %s | feed-forward %s | norms %s | output %s\n",
              FormatParams(c.embedding).c_str(), FormatParams(c.attention).c_str(),
              FormatParams(c.feed_forward).c_str(), FormatParams(c.norms).c_str(),
              FormatParams(c.output).c_str());
  if (spec.moe.enabled()) {
    const MoeSpec& m = spec.moe;
    std::printf(
        "  mixture of experts: %lld of %lld layers, %lld experts (ffn %lld) + %lld shared, %lld "
        "per token, %s router, aux loss coef %g\n",
        (long long)spec.n_moe_layers(), (long long)spec.n_layers, (long long)m.n_experts,
        (long long)m.ffn_hidden_dim, (long long)m.n_shared, (long long)m.top_k, m.router.c_str(),
        m.aux_loss_coef);
    // One decimal, as MoE models are quoted ("46.7B total, 12.9B active").
    auto short_count = [](int64_t n) {
      return n >= 1000000000 ? fmt::format("{:.1f}B", static_cast<double>(n) / 1e9)
                             : FormatParams(static_cast<double>(n));
    };
    std::printf("  %s total, %s active per token (experts %s, router %s, shared %s)\n",
                short_count(c.total).c_str(), short_count(c.active).c_str(),
                FormatParams(c.experts).c_str(), FormatParams(c.router).c_str(),
                FormatParams(c.shared_experts).c_str());
  }
  std::printf("  training FLOPs/token at seq_len %lld%s: %s (6N %s + attention %s)\n",
              (long long)seq_len, spec.moe.enabled() ? ", N = active parameters" : "",
              FormatCount(f.total()).c_str(), FormatCount(f.dense).c_str(),
              FormatCount(f.attention).c_str());
  std::printf(
      "  rope theta %.0f%s, max_seq_len %lld\n", spec.rope_theta,
      spec.rope_scaling.enabled
          ? fmt::format(" with Llama 3.1 scaling (factor {})", spec.rope_scaling.factor).c_str()
          : "",
      (long long)spec.max_seq_len);
  return Status::Ok();
}

Status RunConfigShow(const TrainCommand& command, bool defaults) {
  if (defaults && (!command.config_path.empty() || !command.overrides.empty())) {
    return InvalidArgument("tenax config show --defaults takes no --config or --set");
  }
  if (command.config_path.empty() && !defaults) {
    return InvalidArgument("tenax config show needs --config FILE (with any --set) or --defaults");
  }
  TENAX_ASSIGN_OR_RETURN(Config config, LoadConfig(command.config_path, command.overrides));
  std::string title = defaults ? "tenax config: the defaults (tenax config show --defaults)"
                               : "tenax config: " + command.config_path;
  for (const auto& o : command.overrides) title += " --set " + o;
  std::printf("%s", ConfigShowToml(config, title).c_str());
  return Status::Ok();
}

Status RunConfigKeys(bool markdown) {
  if (markdown) {
    std::printf("%s", ConfigKeysMarkdown().c_str());
    return Status::Ok();
  }
  const Config defaults;
  for (const KeySpec& k : ConfigKeys()) {
    const auto v = k.get(defaults);
    std::printf("%-40s %-10s %s\n    %s\n", k.path.c_str(),
                v ? KeyValueToml(*v).c_str() : "(unset)", k.Expected().c_str(), k.help.c_str());
  }
  return Status::Ok();
}

}  // namespace

void AddCommands(CLI::App& app, cli::Commands& commands) {
  struct ModelFlags {
    std::vector<std::string> overrides;
    std::string preset;
    int64_t seq_len = 0;
    bool as_json = false;
  };
  auto m = std::make_shared<ModelFlags>();
  auto* model = app.add_subcommand("model", "print a model's parameter count and FLOPs/token");
  model->add_option("--preset", m->preset, "model preset")->required();
  model->add_option("--seq-len", m->seq_len, "sequence length for the attention FLOPs");
  model->add_option("--set", m->overrides, "override model.* keys, e.g. model.n_layers=8");
  model->add_flag("--json", m->as_json, "print JSON");
  commands.Add(model, cli::FromStatus([m] {
                 return RunModel(m->preset, m->overrides, m->seq_len, m->as_json);
               }));

  struct ConfigFlags {
    TrainCommand command;
    bool defaults = false;
    bool markdown = false;
  };
  auto c = std::make_shared<ConfigFlags>();
  auto* config = app.add_subcommand("config", "print config keys, defaults or a run's config");
  config->require_subcommand(1);
  auto* show = config->add_subcommand(
      "show", "the effective config of --config and --set as commented TOML (every key)");
  show->add_option("--config,-c", c->command.config_path, "TOML config");
  show->add_option("--set", c->command.overrides, "override: section.key=value (repeatable)");
  show->add_flag("--defaults", c->defaults, "the built-in defaults (no --config)");
  commands.Add(show, cli::FromStatus([c] { return RunConfigShow(c->command, c->defaults); }));
  auto* keys = config->add_subcommand("keys", "every config key: type, default, meaning");
  keys->add_flag("--markdown", c->markdown, "as the Markdown tables of docs/config.md");
  commands.Add(keys, cli::FromStatus([c] { return RunConfigKeys(c->markdown); }));
}

}  // namespace tenax
