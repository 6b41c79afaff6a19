#include "tenax/train/reporter.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tenax/core/format.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/run_paths.h"

namespace tenax::train {
namespace {
double WallTime() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}
}  // namespace

Result<std::unique_ptr<Reporter>> Reporter::Open(const std::string& run_dir,
                                                 const MetricsOptions& options,
                                                 int64_t resume_step) {
  std::unique_ptr<Reporter> r(new Reporter());
  r->options_ = options;
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  r->live_ = options.progress == "always" || (options.progress == "auto" && tty);
  r->metrics_path_ = RunPaths(run_dir).metrics();
  if (LocalFs().Exists(r->metrics_path_)) {
    // A resumed run rewrites history from its checkpoint on; a fresh run starts the file anew.
    TENAX_RETURN_IF_ERROR(TruncateAfterStep(r->metrics_path_, resume_step));
  }
  TENAX_ASSIGN_OR_RETURN(r->jsonl_, JsonlWriter::Open(r->metrics_path_));
  if (options.tensorboard) {
    r->tb_dir_ = RunPaths(run_dir).tensorboard();
    TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(r->tb_dir_));
    TENAX_ASSIGN_OR_RETURN(r->tb_, TensorBoardWriter::Open(r->tb_dir_));
  }
  return r;
}

Reporter::~Reporter() { Finish(); }

void Reporter::ClearLine() {
  if (line_open_) {
    std::fputs("\r\033[K", stderr);
    line_open_ = false;
  }
}

void Reporter::Message(const std::string& text) {
  ClearLine();
  log::Info("{}", text);
}

void Reporter::Finish() {
  if (line_open_) {
    std::fputs("\n", stderr);
    std::fflush(stderr);
    line_open_ = false;
  }
}

Status Reporter::LogStep(const StepMetrics& m) {
  const double now = WallTime();
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"tokens_per_s", m.tokens_per_s},
                      {"flops_per_s", m.flops_per_s},
                      {"mfu", m.mfu ? nlohmann::json(*m.mfu) : nlohmann::json(nullptr)},
                      {"mem_peak_bytes", m.mem_peak_bytes},
                      {"step_time_s", m.step_time_s},
                      {"tokens", m.tokens_seen},
                      {"time", now}};
  if (m.gpu_memory) {
    j["mem_allocated_bytes"] = m.gpu_memory->allocated;
    j["mem_reserved_bytes"] = m.gpu_memory->reserved;
    j["mem_peak_reserved_bytes"] = m.gpu_memory->peak_reserved;
  }
  if (m.moe) {
    // Per MoE layer (keyed by layer index): tokens per expert, max / mean imbalance, aux loss.
    nlohmann::json load = nlohmann::json::object(), imbalance = nlohmann::json::object(),
                   aux = nlohmann::json::object(), remote = nlohmann::json::object();
    for (const auto& l : m.moe->layers) {
      const std::string key = std::to_string(l.layer);
      load[key] = l.tokens;
      imbalance[key] = l.imbalance;
      aux[key] = l.aux_loss;
      remote[key] = l.remote_rows;
    }
    j["moe_aux_loss"] = m.moe->aux_loss;
    j["moe_max_imbalance"] = m.moe->max_imbalance;
    j["moe_expert_tokens"] = load;
    j["moe_imbalance"] = imbalance;
    j["moe_layer_aux_loss"] = aux;
    j["moe_remote_rows"] = remote;
  }
  TENAX_RETURN_IF_ERROR(jsonl_->Write(j));
  if (tb_) {
    TENAX_RETURN_IF_ERROR(tb_->AddScalar("train/loss", m.step, float(m.loss), now));
    TENAX_RETURN_IF_ERROR(tb_->AddScalar("train/lr", m.step, float(m.lr), now));
    TENAX_RETURN_IF_ERROR(tb_->AddScalar("train/grad_norm", m.step, float(m.grad_norm), now));
    TENAX_RETURN_IF_ERROR(tb_->AddScalar("perf/tokens_per_s", m.step, float(m.tokens_per_s), now));
    TENAX_RETURN_IF_ERROR(tb_->AddScalar("perf/tflops", m.step, float(m.flops_per_s / 1e12), now));
    if (m.mfu) TENAX_RETURN_IF_ERROR(tb_->AddScalar("perf/mfu", m.step, float(*m.mfu), now));
    TENAX_RETURN_IF_ERROR(
        tb_->AddScalar("memory/peak_gib", m.step, float(m.mem_peak_bytes / 1073741824.0), now));
    if (m.gpu_memory) {
      const double gib = 1073741824.0;
      TENAX_RETURN_IF_ERROR(tb_->AddScalar("memory/allocated_gib", m.step,
                                           float(m.gpu_memory->allocated / gib), now));
      TENAX_RETURN_IF_ERROR(
          tb_->AddScalar("memory/reserved_gib", m.step, float(m.gpu_memory->reserved / gib), now));
      TENAX_RETURN_IF_ERROR(tb_->AddScalar("memory/peak_reserved_gib", m.step,
                                           float(m.gpu_memory->peak_reserved / gib), now));
    }
    if (m.moe) {
      TENAX_RETURN_IF_ERROR(tb_->AddScalar("moe/aux_loss", m.step, float(m.moe->aux_loss), now));
      TENAX_RETURN_IF_ERROR(
          tb_->AddScalar("moe/max_imbalance", m.step, float(m.moe->max_imbalance), now));
      for (const auto& l : m.moe->layers) {
        const std::string layer = fmt::format("moe/layer_{}/", l.layer);
        TENAX_RETURN_IF_ERROR(tb_->AddScalar(layer + "imbalance", m.step, float(l.imbalance), now));
        TENAX_RETURN_IF_ERROR(tb_->AddScalar(layer + "aux_loss", m.step, float(l.aux_loss), now));
        for (size_t e = 0; e < l.tokens.size(); ++e) {
          TENAX_RETURN_IF_ERROR(tb_->AddScalar(fmt::format("{}expert_{}_tokens", layer, e), m.step,
                                               float(l.tokens[e]), now));
        }
      }
    }
    TENAX_RETURN_IF_ERROR(tb_->Flush());
  }
  const std::string perf = m.mfu ? fmt::format("mfu {:.1f}%", 100 * *m.mfu)
                                 : fmt::format("{}FLOP/s", FormatCount(m.flops_per_s));
  const std::string moe =
      m.moe ? fmt::format(" | aux {:.3f} | imbalance {:.2f}", m.moe->aux_loss, m.moe->max_imbalance)
            : "";
  const std::string line = fmt::format(
      "step {}/{} | loss {:.4f}{} | lr {:.2e} | grad_norm {:.3f} | {} tok/s | {} | mem {} | eta {}",
      m.step, m.total_steps, m.loss, moe, m.lr, m.grad_norm, FormatCount(m.tokens_per_s), perf,
      FormatGiB(static_cast<double>(m.mem_peak_bytes)), FormatDuration(m.eta_s));
  if (live_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    line_open_ = true;
  } else {
    log::Info("{}", line);
  }
  return Status::Ok();
}

Status Reporter::LogEval(int64_t step, double val_loss, int64_t tokens) {
  const double now = WallTime();
  TENAX_RETURN_IF_ERROR(jsonl_->Write(
      {{"step", step}, {"val_loss", val_loss}, {"val_tokens", tokens}, {"time", now}}));
  if (tb_) {
    TENAX_RETURN_IF_ERROR(tb_->AddScalar("val/loss", step, float(val_loss), now));
    TENAX_RETURN_IF_ERROR(tb_->Flush());
  }
  Message(fmt::format("step {}: validation loss {:.4f} ({} tokens)", step, val_loss, tokens));
  return Status::Ok();
}

}  // namespace tenax::train
