// tenax: the command-line entry point. Thin on purpose: parse flags, call the library, map the
// result to an exit code (docs/exit_codes.md). No training logic lives here.
// This executable does not link libtorch: `launch`, `plan`, `simulate`, `model` and `prepare`
// start in milliseconds. The libtorch subcommands (train, eval, import-hf, export-hf) live in
// tenax-torch beside it (apps/torch/); for those this process replaces itself with tenax-torch
// (same pid, same arguments, so a launcher's parent-death signal and pipes carry over).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tenax/config/config.h"
#include "tenax/config/keys.h"
#include "tenax/config/model_spec.h"
#include "tenax/config/model_spec_json.h"
#include "tenax/config/train_command.h"
#include "tenax/core/format.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/data/prepare.h"
#include "tenax/data/tokenize_command.h"
#include "tenax/launch/launcher.h"
#include "tenax/plan/cli.h"
#include "tenax/protocol/protocol.h"
#include "tenax/report/html_report.h"

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

Status RunReport(const std::string& run_dir, const std::string& goodput_file,
                 const std::string& out) {
  TENAX_ASSIGN_OR_RETURN(report::WrittenReport r, report::WriteReport(run_dir, goodput_file, out));
  std::printf("tenax report: wrote %s (%zu charts as SVG in %s)\n", r.html_path.c_str(),
              r.svg_paths.size(),
              ParentDir(r.svg_paths.empty() ? r.html_path : r.svg_paths[0]).c_str());
  TENAX_ASSIGN_OR_RETURN(report::RunData d, report::LoadRunData(run_dir, goodput_file));
  if (d.goodput.is_object()) {
    std::printf("  effective training time %.1f%% of %.1f s wall (%zu failure(s), %d restart(s))\n",
                100 * d.goodput.value("effective_training_ratio", 0.0),
                d.goodput.value("wall_s", 0.0),
                d.goodput.value("failures", nlohmann::json::array()).size(),
                d.goodput.value("restarts", 0));
  }
  if (!d.steps.empty()) {
    std::printf("  step %lld, train loss %.4f%s\n", static_cast<long long>(d.steps.back().step),
                d.steps.back().loss,
                d.evals.empty()
                    ? ""
                    : fmt::format(", validation loss {:.4f}", d.evals.back().val_loss).c_str());
  }
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

// The subcommands tenax-torch runs, with their one-line help.
constexpr std::pair<const char*, const char*> kTorchCommands[] = {
    {"train", "train a model from a TOML config"},
    {"eval", "validation loss of a checkpoint, as one JSON line"},
    {"import-hf", "Hugging Face Llama folder -> tenax checkpoint"},
    {"export-hf", "tenax checkpoint -> Hugging Face Llama folder"},
    {"generate", "sample text from a checkpoint or a Hugging Face folder"},
};

// Replaces this process with tenax-torch (beside this executable) running the same arguments.
int ExecTorch(char** argv) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string exe = "tenax-torch";
  if (n > 0) {
    self[n] = '\0';
    const std::string dir(self);
    exe = dir.substr(0, dir.rfind('/') + 1) + "tenax-torch";
  }
  ::execv(exe.c_str(), argv);
  log::Error("cannot run {} for `tenax {}`: {}; it is built beside tenax by scripts/build", exe,
             argv[1], std::strerror(errno));
  return protocol::ToInt(protocol::ExitCode::kNotFound);
}

int ExitCode(const Status& st) {
  if (st.ok()) return 0;
  log::Error("{}", st.message());
  return protocol::ToInt(protocol::FromStatus(st));
}

}  // namespace
}  // namespace tenax

int main(int argc, char** argv) {
  using namespace tenax;
  if (argc > 1) {
    for (const auto& [name, help] : kTorchCommands) {
      if (std::strcmp(argv[1], name) == 0) return ExecTorch(argv);
    }
  }
  CLI::App app{"tenax: fault-tolerant Llama 3 pretraining"};
  app.name("tenax");
  app.require_subcommand(1);
  app.set_version_flag("--version", "tenax 0.1.0");

  for (const auto& [name, help] : kTorchCommands) {
    app.add_subcommand(name, help)->allow_extras();  // listed in --help; run by tenax-torch
  }

  std::vector<std::string> overrides;
  std::string preset;
  int64_t seq_len = 0;
  bool as_json = false;
  auto* model = app.add_subcommand("model", "print a model's parameter count and FLOPs/token");
  model->add_option("--preset", preset, "model preset")->required();
  model->add_option("--seq-len", seq_len, "sequence length for the attention FLOPs");
  model->add_option("--set", overrides, "override model.* keys, e.g. model.n_layers=8");
  model->add_flag("--json", as_json, "print JSON");

  std::vector<std::string> inputs;
  std::string tokenizer = "byte", out;
  data::PrepareOptions prepare_options;
  bool quiet = false;
  auto* prepare = app.add_subcommand("prepare", "tokenize text or JSON Lines into token shards");
  prepare
      ->add_option("--input", inputs,
                   "input files: .txt (one document each) or .jsonl (one per line), "
                   "optionally .gz/.zst")
      ->required();
  prepare->add_option("--tokenizer", tokenizer,
                      "byte | tiktoken:FILE | hf:TOKENIZER_JSON | sentencepiece:MODEL");
  prepare->add_option("--out", out, "output folder")->required();
  prepare->add_option("--text-field", prepare_options.text_field,
                      "JSON Lines: the field holding the text (default text)");
  prepare->add_option("--threads", prepare_options.threads,
                      "tokenizing threads (default: one per core)");
  prepare->add_flag("--quiet", quiet, "no progress line");

  data::TokenizeOptions tokenize_options;
  auto* tokenize = app.add_subcommand("tokenize", "token ids of stdin lines, one JSON list each");
  tokenize
      ->add_option("--tokenizer", tokenizer,
                   "byte | tiktoken:FILE | hf:TOKENIZER_JSON | sentencepiece:MODEL")
      ->required();
  tokenize->add_flag("--json-input", tokenize_options.json_input,
                     "each line is a JSON string (texts with newlines)");
  tokenize->add_flag("--special", tokenize_options.special,
                     "special-token text (<|eot_id|>) becomes the special token");
  tokenize->add_flag("--bos-eos", tokenize_options.bos_eos, "frame each text with BOS/EOS");

  launch::LaunchOptions launch_options;
  auto* launch_cmd = app.add_subcommand(
      "launch", "start ranks on this node: tenax launch --nproc-per-node N -- train ARGS...");
  launch_cmd->add_option("--nproc-per-node", launch_options.nproc_per_node, "ranks on this node")
      ->required();
  launch_cmd->add_option("--nnodes", launch_options.nnodes, "nodes in the job");
  launch_cmd->add_option("--node-rank", launch_options.node_rank, "this node's index");
  launch_cmd->add_option("--rdzv", launch_options.rdzv,
                         "etcd://HOST:PORT[,HOST:PORT...]: node agents meet in etcd (restarts, "
                         "spare and lost nodes); or HOST:PORT of node 0's store (fixed nodes)");
  launch_cmd->add_option("--job-id", launch_options.job_id,
                         "with --rdzv etcd://: the job's name, the same on every node");
  launch_cmd->add_option("--rdzv-ca", launch_options.rdzv_ca, "etcd TLS: the CA certificate");
  launch_cmd->add_option("--rdzv-cert", launch_options.rdzv_cert,
                         "etcd TLS: this agent's client certificate");
  launch_cmd->add_option("--rdzv-key", launch_options.rdzv_key,
                         "etcd TLS: this agent's client key");
  launch_cmd->add_option("--rdzv-lease", launch_options.rdzv_lease_s,
                         "etcd lease TTL in seconds: a lost node is noticed within about this "
                         "long (default 5)");
  launch_cmd->add_option("--rdzv-address", launch_options.rdzv_address,
                         "this node's address for the other nodes (default: its first "
                         "non-loopback IPv4, GLOO_SOCKET_IFNAME's if set)");
  launch_cmd->add_option("--rdzv-timeout", launch_options.rdzv_timeout_s,
                         "seconds to wait for enough nodes before stopping (default 600)");
  launch_cmd->add_option("--max-restarts", launch_options.max_restarts,
                         "restart all ranks from the newest good checkpoint up to this many times");
  launch_cmd->add_option("--inject", launch_options.inject,
                         "fault injection for tests, e.g. crash:rank=R:step=S, "
                         "slow:rank=R:factor=F, nan:rank=R:step=S (docs/launcher_protocol.md)");
  launch_cmd->add_option("--hang-timeout", launch_options.hang_timeout_s,
                         "seconds without progress before a hang is declared (a floor; default "
                         "300, or 10x the median step time if longer)");
  launch_cmd->add_option("--exit-timeout", launch_options.exit_timeout_s,
                         "seconds a rank that finished training may take to exit before it is "
                         "named as stuck in its teardown and killed; the run still counts as "
                         "done (default 60)");
  launch_cmd->add_option("--goodput-file", launch_options.goodput_file,
                         "write the goodput report (time split, failures) here; default: "
                         "goodput.json in the run folder");
  launch_cmd->add_option("--spares", launch_options.spares,
                         "standby processes started in advance to take a failed slot's rank");
  launch_cmd->add_option("--quarantine-after", launch_options.quarantine_after,
                         "failures within --quarantine-window that quarantine a slot (default 2)");
  launch_cmd->add_option("--quarantine-window", launch_options.quarantine_window_s,
                         "seconds a slot's failure counts against it (default 3600)");
  launch_cmd->add_option("--kill-grace", launch_options.kill_grace_s,
                         "seconds between SIGTERM and SIGKILL when stopping ranks (default 5)");
  launch_cmd->add_option("--flight-dump-timeout", launch_options.flight_dump_s,
                         "after a hang, seconds the ranks get to dump flight records before "
                         "they are killed (default 3)");
  launch_cmd->add_option("--status-file", launch_options.status_file,
                         "rewrite the launch state as JSON here about once a second");
  launch_cmd->add_option("--metrics-port", launch_options.metrics_port,
                         "serve the live page at http://ADDR:PORT/ and Prometheus metrics at "
                         "/metrics");
  launch_cmd->add_option("--metrics-addr", launch_options.metrics_addr,
                         "address for --metrics-port (default 127.0.0.1: this machine only; "
                         "0.0.0.0 for every interface)");
  launch_cmd->add_option("--straggler-factor", launch_options.straggler_factor,
                         "a rank computing this many times the median of the others is slow "
                         "(default 1.5)");
  launch_cmd->add_option("--straggler-steps", launch_options.straggler_steps,
                         "slow for this many consecutive steps: a straggler (default 3)");
  launch_cmd->add_flag("--replace-stragglers", launch_options.replace_stragglers,
                       "treat a straggler as a failure: a spare slot takes its rank (one node), or "
                       "a spare node its node (several nodes)");
  launch_cmd->add_option("command", launch_options.args, "the tenax command to run, after --");

  auto run_plan = plan::AddCommands(app);

  std::string run_dir, goodput_file, html_out;
  auto* report_cmd = app.add_subcommand(
      "report", "write a run's HTML report (charts of loss, throughput, goodput, failures)");
  report_cmd->add_option("run_folder", run_dir, "the run folder, e.g. runs/demo")->required();
  report_cmd->add_option("--goodput-file", goodput_file,
                         "the launcher's goodput report (default: goodput.json in the run folder)");
  report_cmd->add_option("--out", html_out,
                         "the HTML file to write (default: report.html in the run folder; the "
                         "SVG charts go to a report/ folder beside it)");

  TrainCommand config_command;
  bool show_defaults = false, markdown = false;
  auto* config_cmd = app.add_subcommand("config", "print config keys, defaults or a run's config");
  config_cmd->require_subcommand(1);
  auto* show = config_cmd->add_subcommand(
      "show", "the effective config of --config and --set as commented TOML (every key)");
  show->add_option("--config,-c", config_command.config_path, "TOML config");
  show->add_option("--set", config_command.overrides, "override: section.key=value (repeatable)");
  show->add_flag("--defaults", show_defaults, "the built-in defaults (no --config)");
  auto* keys = config_cmd->add_subcommand("keys", "every config key: type, default, meaning");
  keys->add_flag("--markdown", markdown, "as the Markdown tables of docs/config.md");

  // A word where a subcommand belongs that is none: named, with the closest one (CLI11 would say
  // "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string close = ClosestMatch(argv[1], names);
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      log::Error("unknown command '{}'{}; the commands are: {} (tenax --help)", argv[1],
                 close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close), list);
      return protocol::ToInt(protocol::ExitCode::kInvalidArgument);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(StatusCode::kInvalidArgument);
  }

  Status st;
  try {
    if (model->parsed()) st = RunModel(preset, overrides, seq_len, as_json);
    if (prepare->parsed()) {
      prepare_options.progress = !quiet;
      st = data::PrepareCommand(inputs, tokenizer, out, prepare_options);
    }
    if (tokenize->parsed()) st = data::TokenizeCommand(tokenizer, tokenize_options);
    if (launch_cmd->parsed()) {
      auto rc = launch::Launch(launch_options);
      if (!rc.ok()) return ExitCode(rc.status());
      return *rc;
    }
    if (report_cmd->parsed()) st = RunReport(run_dir, goodput_file, html_out);
    if (show->parsed()) st = RunConfigShow(config_command, show_defaults);
    if (keys->parsed()) st = RunConfigKeys(markdown);
    bool plan_ran = false;
    Status plan_st = run_plan(&plan_ran);
    if (plan_ran) st = plan_st;
  } catch (const std::exception& e) {
    st = Internal(e.what());
  }
  return ExitCode(st);
}
