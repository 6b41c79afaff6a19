// tenax: the command-line entry point. Thin on purpose: parse flags, call the library, map the
// result to an exit code (docs/exit_codes.md). No training logic lives here.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tenax/config/config.h"
#include "tenax/config/model_spec.h"
#include "tenax/config/model_spec_json.h"
#include "tenax/core/log.h"
#include "tenax/data/prepare.h"
#include "tenax/data/tokenize_command.h"
#include "tenax/launch/launcher.h"
#include "tenax/model/hf.h"
#include "tenax/plan/cli.h"
#include "tenax/train/evaluate.h"
#include "tenax/train/reporter.h"
#include "tenax/train/trainer.h"

namespace tenax {
namespace {

Status RunTrain(const std::string& config_path, const std::vector<std::string>& overrides) {
  // `tenax launch` sends SIGUSR1 ("dump your flight record") to every rank on a hang; a rank
  // still setting up has no flight recorder to install the handler yet, and the default action
  // would kill it. Ignored until the recorder's watchdog takes the signal over.
  std::signal(SIGUSR1, SIG_IGN);
  TENAX_ASSIGN_OR_RETURN(Config config, LoadConfig(config_path, overrides));
  TENAX_ASSIGN_OR_RETURN(train::TrainSummary s, train::Train(config));
  if (log::Rank() > 0) return Status::Ok();  // rank 0 speaks for the job
  std::string val = s.final_val_loss ? fmt::format("{:.4f}", *s.final_val_loss) : "n/a";
  std::string perf = s.mfu ? fmt::format("{:.1f}% MFU", 100 * *s.mfu)
                           : fmt::format("{}FLOP/s achieved", train::FormatCount(s.flops_per_s));
  std::printf("\ntenax: trained %s (%s parameters), steps %lld..%lld\n", s.model_name.c_str(),
              train::FormatParams(static_cast<double>(s.n_params)).c_str(),
              static_cast<long long>(s.first_step), static_cast<long long>(s.last_step));
  std::printf("  final train loss %.4f | validation loss %s", s.final_loss, val.c_str());
  if (s.entropy_rate_nats) {
    std::printf(" | best possible (entropy rate) %.4f", *s.entropy_rate_nats);
  }
  std::printf("\n  throughput %s tokens/s (%s)\n", train::FormatCount(s.tokens_per_s).c_str(),
              perf.c_str());
  if (!s.checkpoint_dir.empty()) std::printf("  checkpoint  %s\n", s.checkpoint_dir.c_str());
  std::printf("  metrics     %s\n", s.metrics_path.c_str());
  if (!s.tensorboard_dir.empty()) {
    std::printf("  tensorboard %s  (tensorboard --logdir %s)\n", s.tensorboard_dir.c_str(),
                s.tensorboard_dir.c_str());
  }
  return Status::Ok();
}

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
    nlohmann::json j = {{"spec", ModelSpecToJson(spec)},
                        {"params",
                         {{"total", c.total},
                          {"embedding", c.embedding},
                          {"attention", c.attention},
                          {"feed_forward", c.feed_forward},
                          {"norms", c.norms},
                          {"output", c.output}}},
                        {"seq_len", seq_len},
                        {"training_flops_per_token",
                         {{"total", f.total()}, {"dense_6n", f.dense}, {"attention", f.attention}}}};
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  using train::FormatCount;
  std::printf("%s: %s parameters (%lld)\n", spec.name.c_str(),
              train::FormatParams(static_cast<double>(c.total)).c_str(), static_cast<long long>(c.total));
  std::printf("  dim %lld, %lld layers, %lld heads (%lld kv), head dim %lld, ffn %lld, vocab %lld, "
              "%s output\n",
              (long long)spec.dim, (long long)spec.n_layers, (long long)spec.n_heads,
              (long long)spec.n_kv_heads, (long long)spec.head_dim(), (long long)spec.ffn_hidden_dim,
              (long long)spec.vocab_size, spec.tie_embeddings ? "tied" : "untied");
  std::printf("  embedding %s | attention %s | feed-forward %s | norms %s | output %s\n",
              train::FormatParams(c.embedding).c_str(), train::FormatParams(c.attention).c_str(),
              train::FormatParams(c.feed_forward).c_str(), train::FormatParams(c.norms).c_str(),
              train::FormatParams(c.output).c_str());
  std::printf("  training FLOPs/token at seq_len %lld: %s (6N %s + attention %s)\n",
              (long long)seq_len, FormatCount(f.total()).c_str(), FormatCount(f.dense).c_str(),
              FormatCount(f.attention).c_str());
  std::printf("  rope theta %.0f%s, max_seq_len %lld\n", spec.rope_theta,
              spec.rope_scaling.enabled
                  ? fmt::format(" with Llama 3.1 scaling (factor {})", spec.rope_scaling.factor).c_str()
                  : "",
              (long long)spec.max_seq_len);
  return Status::Ok();
}

Status RunEval(const std::string& checkpoint, const std::string& data_spec, int64_t tokens,
               const std::string& device) {
  TrainingOptions device_options;
  device_options.device = device;
  TENAX_ASSIGN_OR_RETURN(train::EvalResult r,
                         train::EvaluateCheckpoint(checkpoint, data_spec, tokens, device_options));
  std::printf("%s\n", nlohmann::json({{"loss", r.loss}, {"tokens", r.tokens}}).dump().c_str());
  return Status::Ok();
}

int ExitCode(const Status& st) {
  if (st.ok()) return 0;
  log::Error("{}", st.message());
  return static_cast<int>(st.code());
}

}  // namespace
}  // namespace tenax

int main(int argc, char** argv) {
  using namespace tenax;
  CLI::App app{"tenax: fault-tolerant Llama 3 pretraining"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tenax 0.1.0");

  std::string config_path;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "train a model from a TOML config");
  train->add_option("--config,-c", config_path, "TOML config (see configs/)");
  train->add_option("--set", overrides, "override a config value: section.key=value (repeatable)");

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
  prepare->add_option("--input", inputs,
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
  tokenize->add_option("--tokenizer", tokenizer,
                       "byte | tiktoken:FILE | hf:TOKENIZER_JSON | sentencepiece:MODEL")
      ->required();
  tokenize->add_flag("--json-input", tokenize_options.json_input,
                     "each line is a JSON string (texts with newlines)");
  tokenize->add_flag("--special", tokenize_options.special,
                     "special-token text (<|eot_id|>) becomes the special token");
  tokenize->add_flag("--bos-eos", tokenize_options.bos_eos, "frame each text with BOS/EOS");

  std::string checkpoint, data_spec, device = "auto";
  int64_t tokens = 0;
  auto* eval = app.add_subcommand("eval", "validation loss of a checkpoint, as one JSON line");
  eval->add_option("--checkpoint", checkpoint, "step or checkpoint folder")->required();
  eval->add_option("--data", data_spec,
                   "brown[:val|:train] | synthetic[:val|:train] | DIR[:train] | FILE.bin")
      ->required();
  eval->add_option("--tokens", tokens, "at most this many tokens (default: eval_tokens)");
  eval->add_option("--device", device, "auto | cpu | cuda");

  std::string hf_dir, dtype = "float32";
  auto* import_hf = app.add_subcommand("import-hf", "Hugging Face Llama folder -> tenax checkpoint");
  import_hf->add_option("hf_dir", hf_dir, "folder with config.json and safetensors")->required();
  import_hf->add_option("--out", out, "checkpoint folder to create")->required();
  auto* export_hf = app.add_subcommand("export-hf", "tenax checkpoint -> Hugging Face Llama folder");
  export_hf->add_option("checkpoint", checkpoint, "step or checkpoint folder")->required();
  export_hf->add_option("--out", out, "output folder")->required();
  export_hf->add_option("--dtype", dtype, "float32 | bfloat16");

  launch::LaunchOptions launch_options;
  auto* launch_cmd = app.add_subcommand(
      "launch", "start ranks on this node: tenax launch --nproc-per-node N -- train ARGS...");
  launch_cmd->add_option("--nproc-per-node", launch_options.nproc_per_node, "ranks on this node")
      ->required();
  launch_cmd->add_option("--nnodes", launch_options.nnodes, "nodes in the job");
  launch_cmd->add_option("--node-rank", launch_options.node_rank, "this node's index");
  launch_cmd->add_option("--rdzv", launch_options.rdzv, "HOST:PORT of node 0's store");
  launch_cmd->add_option("--max-restarts", launch_options.max_restarts,
                         "restart all ranks from the newest good checkpoint up to this many times");
  launch_cmd->add_option("--inject", launch_options.inject,
                         "fault injection for tests, e.g. crash:rank=R:step=S, "
                         "slow:rank=R:factor=F, nan:rank=R:step=S (docs/launcher_protocol.md)");
  launch_cmd->add_option("--hang-timeout", launch_options.hang_timeout_s,
                         "seconds without progress before a hang is declared (a floor; default "
                         "300, or 10x the median step time if longer)");
  launch_cmd->add_option("--goodput-file", launch_options.goodput_file,
                         "write the goodput report (time split, failures) here; default: "
                         "goodput.json in the run folder");
  launch_cmd->add_option("--spares", launch_options.spares,
                         "standby processes started in advance to take a failed slot's rank");
  launch_cmd->add_option("--quarantine-after", launch_options.quarantine_after,
                         "failures of one slot before it is quarantined (default 2)");
  launch_cmd->add_option("--status-file", launch_options.status_file,
                         "rewrite the launch state as JSON here about once a second");
  launch_cmd->add_option("--metrics-port", launch_options.metrics_port,
                         "serve Prometheus metrics at http://HOST:PORT/metrics");
  launch_cmd->add_option("--straggler-factor", launch_options.straggler_factor,
                         "a rank computing this many times the median of the others is slow "
                         "(default 1.5)");
  launch_cmd->add_option("--straggler-steps", launch_options.straggler_steps,
                         "slow for this many consecutive steps: a straggler (default 3)");
  launch_cmd->add_flag("--replace-stragglers", launch_options.replace_stragglers,
                       "treat a straggler as a failed slot (restart, spare takes over)");
  launch_cmd->add_option("command", launch_options.args, "the tenax command to run, after --");

  auto run_plan = plan::AddCommands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(StatusCode::kInvalidArgument);
  }

  Status st;
  try {
    if (train->parsed()) st = RunTrain(config_path, overrides);
    if (model->parsed()) st = RunModel(preset, overrides, seq_len, as_json);
    if (prepare->parsed()) {
      prepare_options.progress = !quiet;
      st = data::PrepareCommand(inputs, tokenizer, out, prepare_options);
    }
    if (tokenize->parsed()) st = data::TokenizeCommand(tokenizer, tokenize_options);
    if (eval->parsed()) st = RunEval(checkpoint, data_spec, tokens, device);
    if (import_hf->parsed()) st = model::ImportHf(hf_dir, out);
    if (export_hf->parsed()) st = model::ExportHf(checkpoint, out, dtype);
    if (launch_cmd->parsed()) {
      auto rc = launch::Launch(launch_options);
      if (!rc.ok()) return ExitCode(rc.status());
      return *rc;
    }
    bool plan_ran = false;
    Status plan_st = run_plan(&plan_ran);
    if (plan_ran) st = plan_st;
  } catch (const c10::Error& e) {
    st = Internal(std::string("libtorch: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    st = Internal(e.what());
  }
  return ExitCode(st);
}
