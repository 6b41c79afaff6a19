// tenax-torch: the subcommands that need libtorch (train, eval, import-hf, export-hf, generate).
// Users run `tenax SUBCOMMAND`; the torch-free `tenax` executable replaces itself with this one
// (same pid, same arguments) for these subcommands, so `tenax launch`, `plan` and `simulate` never
// load libtorch. Thin on purpose: parse flags, call the library, map the result to an exit code
// (docs/exit_codes.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "tenax/config/config.h"
#include "tenax/config/train_command.h"
#include "tenax/core/format.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/model/hf.h"
#include "tenax/parallel/dist_env.h"
#include "tenax/protocol/exit_report.h"
#include "tenax/protocol/launcher_watch.h"
#include "tenax/protocol/rank_context.h"
#include "tenax/report/html_report.h"
#include "tenax/report/http_server.h"
#include "tenax/report/live.h"
#include "tenax/train/evaluate.h"
#include "tenax/train/export_hf.h"
#include "tenax/train/generate_text.h"
#include "tenax/train/trainer.h"

namespace tenax {
namespace {

void PrintSummary(const train::TrainSummary& s) {
  if (s.already_complete) {
    std::printf("\ntenax: %s is already complete at step %lld; nothing to do\n", s.run_dir.c_str(),
                static_cast<long long>(s.last_step));
    return;
  }
  std::string val = s.final_val_loss ? fmt::format("{:.4f}", *s.final_val_loss) : "n/a";
  std::string perf = s.mfu ? fmt::format("{:.1f}% MFU", 100 * *s.mfu)
                           : fmt::format("{}FLOP/s achieved", FormatCount(s.flops_per_s));
  std::printf("\ntenax: trained %s (%s parameters), steps %lld..%lld\n", s.model_name.c_str(),
              FormatParams(static_cast<double>(s.n_params)).c_str(),
              static_cast<long long>(s.first_step), static_cast<long long>(s.last_step));
  std::printf("  final train loss %.4f | validation loss %s", s.final_loss, val.c_str());
  if (s.entropy_rate_nats) {
    std::printf(" | best possible (entropy rate) %.4f", *s.entropy_rate_nats);
  }
  std::printf("\n  throughput %s tokens/s (%s)\n", FormatCount(s.tokens_per_s).c_str(),
              perf.c_str());
  if (!s.checkpoint_dir.empty()) std::printf("  checkpoint  %s\n", s.checkpoint_dir.c_str());
  std::printf("  metrics     %s\n", s.metrics_path.c_str());
  if (!s.tensorboard_dir.empty()) {
    std::printf("  tensorboard %s  (tensorboard --logdir %s)\n", s.tensorboard_dir.c_str(),
                s.tensorboard_dir.c_str());
  }
}

// One rank of a training job: the launcher's context is read once here and passed on.
Status RunTrain(const TrainCommand& command) {
  // `tenax launch` sends SIGUSR1 ("dump your flight record") to every rank on a hang; a rank
  // still setting up has no flight recorder to install the handler yet, and the default action
  // would kill it. Ignored until the recorder's watchdog takes the signal over.
  std::signal(SIGUSR1, SIG_IGN);
  // A standby (started in advance by tenax launch --spares) first sets up what needs no rank,
  // then waits for its assignment: as a replacement it then has that much less to do.
  std::shared_ptr<train::Prepared> prepared;
  if (const std::optional<int> slot = protocol::StandbySlot()) {
    log::SetStandby(*slot);
    if (Result<Config> early = LoadTrainConfig(command); early.ok()) {
      prepared = train::PrepareBeforeAssignment(*early);
    }
  }
  // Waits for the standby assignment first when the launcher started this process in advance.
  TENAX_ASSIGN_OR_RETURN(const protocol::RankContext ctx, protocol::ReadRankContext());
  TENAX_ASSIGN_OR_RETURN(const parallel::DistEnv env, parallel::ReadDistEnv());
  // Lives until the end of the process (static), since the terminate handler reads it from any
  // thread, including threads that outlive this function during shutdown.
  static const protocol::ExitReporter reporter(ctx.heartbeat_dir, env.rank, ctx.generation);
  protocol::InstallTerminateHandler(&reporter);
  const protocol::LauncherWatch watch(ctx);  // stops this rank when its launcher is gone
  Result<Config> config = LoadTrainConfig(command);
  if (!config.ok()) {
    reporter.Report(protocol::ToInt(protocol::FromStatus(config.status())),
                    protocol::FailureKind::kSetup, config.status().message());
    return config.status();
  }
  const std::string run_dir = RunPathsOf(*config).root();
  // --metrics-port: the live page and /metrics of this run, from its files (rank 0 writes
  // them); stopped when training ends.
  std::unique_ptr<report::HttpServer> live;
  if (command.metrics_port > 0 && env.rank == 0) {
    TENAX_ASSIGN_OR_RETURN(live, report::HttpServer::Start(
                                     command.metrics_addr, command.metrics_port,
                                     [run_dir, world = env.world](const std::string& path) {
                                       return report::ServeLive(
                                           path, report::TrainStatus(run_dir, world));
                                     },
                                     "--metrics-port"));
    log::Info("live page at http://{}:{}/ (Prometheus metrics at /metrics)", command.metrics_addr,
              live->port());
  }
  TENAX_ASSIGN_OR_RETURN(train::TrainSummary s,
                         train::Train(*config, ctx, env, reporter, std::move(prepared)));
  if (env.rank == 0) {
    PrintSummary(s);  // rank 0 speaks for the job
    // Under tenax launch the launcher writes it, with the goodput of the whole run.
    if (!ctx.supervised) report::WriteReportAtEnd(run_dir, "", "train");
  }
  return Status::Ok();
}

Status RunEval(const std::string& checkpoint, const std::string& data_spec, int64_t tokens,
               const std::string& device, int64_t seq_len, int64_t batch_size) {
  TrainingOptions device_options;
  device_options.device = device;
  TENAX_ASSIGN_OR_RETURN(train::EvalResult r,
                         train::EvaluateCheckpoint(checkpoint, data_spec, tokens, device_options,
                                                   seq_len, batch_size));
  std::printf("%s\n", nlohmann::json({{"loss", r.loss}, {"tokens", r.tokens}}).dump().c_str());
  return Status::Ok();
}

// Streams the text to stdout as it is generated; with `as_json`, one JSON line at the end instead.
Status RunGenerate(const train::GenerateRequest& request, const std::string& prompt_ids,
                   bool as_json) {
  train::GenerateRequest r = request;
  std::string rest = prompt_ids;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    try {
      size_t used = 0;
      r.prompt_ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return InvalidArgument("--prompt-ids " + prompt_ids +
                             ": expected comma-separated token ids, e.g. 128000,791,6864");
    }
  }
  std::function<void(const std::string&)> stream;
  if (!as_json) {
    stream = [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  TENAX_ASSIGN_OR_RETURN(train::GenerateResult g, train::GenerateText(r, stream));
  if (as_json) {
    nlohmann::json j = {{"prompt_ids", g.prompt_ids}, {"ids", g.ids}, {"text", g.text}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);  // before the log line on stderr
    log::Info("{} tokens, {:.1f} tokens/s", g.ids.size(), g.tokens_per_s);
  }
  return Status::Ok();
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
  CLI::App app{"tenax: fault-tolerant Llama 3 pretraining (libtorch subcommands)"};
  app.name("tenax");
  app.require_subcommand(1);

  TrainCommand train_command;
  auto* train = app.add_subcommand("train", "train a model from a TOML config");
  AddTrainOptions(*train, &train_command);

  std::string checkpoint, data_spec, device = "auto", out;
  int64_t tokens = 0;
  auto* eval = app.add_subcommand("eval", "validation loss of a checkpoint, as one JSON line");
  eval->add_option("--checkpoint", checkpoint, "step or checkpoint folder")->required();
  eval->add_option("--data", data_spec,
                   "brown[:val|:train] | synthetic[:val|:train] | DIR[:train] | FILE.bin")
      ->required();
  eval->add_option("--tokens", tokens, "at most this many tokens (default: eval_tokens)");
  eval->add_option("--device", device, "auto | cpu | cuda");
  int64_t eval_seq_len = 0, eval_batch = 0;
  eval->add_option("--seq-len", eval_seq_len,
                   "window length (default: the checkpoint's training.seq_len)");
  eval->add_option("--batch-size", eval_batch,
                   "windows per batch (default: the checkpoint's training.local_batch_size)");

  std::string hf_dir, dtype = "float32";
  auto* import_hf =
      app.add_subcommand("import-hf", "Hugging Face Llama folder -> tenax checkpoint");
  import_hf->add_option("hf_dir", hf_dir, "folder with config.json and safetensors")->required();
  import_hf->add_option("--out", out, "checkpoint folder to create")->required();
  model::HfReadOptions import_options;
  import_hf->add_flag("--allow-nonfinite", import_options.allow_nonfinite,
                      "import NaN or infinite weights instead of refusing the folder");
  auto* export_hf =
      app.add_subcommand("export-hf", "tenax checkpoint -> Hugging Face Llama folder");
  export_hf->add_option("checkpoint", checkpoint, "step or checkpoint folder")->required();
  export_hf->add_option("--out", out, "output folder")->required();
  export_hf->add_option("--dtype", dtype, "float32 | bfloat16");
  train::ExportHfRequest export_request;
  export_hf
      ->add_option("--max-shard-size", export_request.max_shard_size,
                   "split weights into model-0000K-of-0000N.safetensors files of at most "
                   "this size (e.g. 5GB, 500MB, 2GiB)")
      ->capture_default_str();
  export_hf->add_option("--tokenizer", export_request.tokenizer,
                        "tokenizer files to include: none | tiktoken:FILE | hf:FILE (default: the "
                        "tokenizer the run trained with)");

  train::GenerateRequest gen;
  std::string prompt_ids;
  bool gen_json = false, no_bos = false, ignore_eos = false, no_cache = false;
  auto* generate =
      app.add_subcommand("generate", "sample text from a checkpoint or a Hugging Face folder");
  generate->add_option("--checkpoint", gen.checkpoint, "tenax step or checkpoint folder");
  generate->add_option("--hf", gen.hf_dir, "Hugging Face model folder");
  generate->add_option("--prompt", gen.prompt, "prompt text (default: empty, after the BOS)");
  generate->add_option("--prompt-ids", prompt_ids,
                       "prompt as comma-separated token ids instead of text (nothing prepended)");
  generate->add_option("--max-new-tokens", gen.max_new_tokens, "tokens to generate")
      ->capture_default_str();
  generate->add_option("--temperature", gen.sampling.temperature, "0: greedy")
      ->capture_default_str();
  generate->add_option("--top-p", gen.sampling.top_p, "nucleus sampling mass; 1: off")
      ->capture_default_str();
  generate->add_option("--seed", gen.sampling.seed, "sampling seed")->capture_default_str();
  generate->add_option(
      "--tokenizer", gen.tokenizer,
      "tokenizer spec (default: the checkpoint's, or the folder's tokenizer.json)");
  generate->add_option("--device", gen.device, "auto | cpu | cuda");
  generate->add_flag("--no-bos", no_bos, "do not start the prompt with BOS (or EOS)");
  generate->add_flag("--ignore-eos", ignore_eos, "keep generating after the EOS");
  generate->add_flag("--json", gen_json,
                     "print one JSON line {prompt_ids, ids, text} at the end instead of streaming");
  generate->add_flag("--no-cache", no_cache,
                     "recompute the whole sequence for every token (slow; checks the KV cache)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : protocol::ToInt(protocol::ExitCode::kInvalidArgument);
  }

  Status st;
  try {
    if (train->parsed()) st = RunTrain(train_command);
    if (eval->parsed()) {
      st = RunEval(checkpoint, data_spec, tokens, device, eval_seq_len, eval_batch);
    }
    if (import_hf->parsed()) st = model::ImportHf(hf_dir, out, import_options);
    if (export_hf->parsed()) {
      export_request.checkpoint = checkpoint;
      export_request.out = out;
      export_request.dtype = dtype;
      st = train::ExportCheckpointToHf(export_request);
    }
    if (generate->parsed()) {
      gen.add_bos = !no_bos;
      gen.stop_at_eos = !ignore_eos;
      gen.use_cache = !no_cache;
      st = RunGenerate(gen, prompt_ids, gen_json);
    }
  } catch (const std::exception& e) {
    st = Internal(std::string("libtorch: ") + e.what());
  }
  return ExitCode(st);
}
