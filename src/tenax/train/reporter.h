// Everything a run tells the outside world about its progress: the terminal (a live progress
// line when stderr is a TTY, plain lines otherwise), metrics.jsonl (one object per logged step)
// and TensorBoard scalars. One reporter per process; only the logging rank creates one.
// Thread safety: none (the training thread owns it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tenax/config/options.h"
#include "tenax/core/metrics_writer.h"
#include "tenax/core/status.h"
#include "tenax/core/tensorboard.h"
#include "tenax/train/device.h"
#include "tenax/train/moe_metrics.h"

namespace tenax::train {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double flops_per_s = 0;     // achieved training FLOP/s (model FLOPs, not hardware)
  std::optional<double> mfu;  // fraction of the device's bf16 peak; none on CPU
  int64_t mem_peak_bytes = 0;
  std::optional<GpuMemory> gpu_memory;  // GPU: the caching allocator's counters (device.h)
  double step_time_s = 0;
  int64_t tokens_seen = 0;
  double eta_s = 0;
  std::optional<MoeMetrics> moe;  // mixture-of-experts models
};

class Reporter {
 public:
  // Opens run_dir/metrics.jsonl (truncated to `resume_step` when resuming) and, if enabled,
  // a TensorBoard event file in run_dir/tb.
  static Result<std::unique_ptr<Reporter>> Open(const std::string& run_dir,
                                                const MetricsOptions& options, int64_t resume_step);
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;
  ~Reporter();

  Status LogStep(const StepMetrics& m);
  Status LogEval(int64_t step, double val_loss, int64_t tokens);
  // A line of text (checkpoint saved, ...) that must not be overwritten by the progress line.
  void Message(const std::string& text);
  void Finish();  // ends the live line

  const std::string& metrics_path() const { return metrics_path_; }
  std::string tensorboard_dir() const { return tb_dir_; }

 private:
  Reporter() = default;
  void ClearLine();

  MetricsOptions options_;
  bool live_ = false;       // redraw one line with \r (stderr is a TTY)
  bool line_open_ = false;  // a live line is on screen
  std::string metrics_path_;
  std::string tb_dir_;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace tenax::train
