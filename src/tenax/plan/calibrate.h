// Calibration: fits a hardware profile's efficiencies to measured throughput, so that the planner
// predicts the machine at hand. Measurements come from tenax itself (a run folder: its config.toml
// says what ran, its metrics.jsonl how fast) or from a JSON-lines file of measured runs, each
// naming the model, GPUs, batch, layout and measured tokens/s (or TFLOP/s) per GPU.
// The fit minimises the squared log error of predicted vs measured throughput over the chosen
// efficiencies by coordinate descent with golden-section line searches (deterministic; a handful
// of parameters at most). The result is written as a profile that inherits the base and
// overrides only the fitted values.
// Non-goals: fitting link bandwidths or memory sizes (those are specifications, not efficiencies);
// measurements of fp32 runs (the planner models bf16 and fp8 training).
#pragma once

#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/plan/hardware.h"
#include "tenax/plan/layout.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

struct Measurement {
  std::string name;
  Workload workload;
  int64_t gpus = 1;
  LayoutConstraints layout;  // what is known of the layout; the planner picks the rest
  double tokens_per_s_per_gpu = 0;
};

// `path` is a tenax run folder (config.toml + metrics.jsonl) or a JSON-lines file. In a file,
// each line is an object with: name, model (preset or config path), gpus, seq_len,
// global_batch_tokens, layout ("tp=8,pp=16,..."), kernels ("eager" | "fused", default eager) and
// either tokens_per_s_per_gpu or tflops_per_gpu.
Result<std::vector<Measurement>> LoadMeasurements(const std::string& path);

// The planner's prediction for one measurement: the fastest layout the constraints allow.
Result<double> PredictTokensPerSecond(const Measurement& m, const HardwareProfile& hw);

struct CalibrationRow {
  std::string name;
  double measured = 0, before = 0, after = 0;  // tokens/s per GPU
};
struct CalibrationResult {
  HardwareProfile fitted;
  std::vector<std::string> parameters;  // the [efficiency] keys that were fitted
  std::vector<CalibrationRow> rows;
  double rms_log_error_before = 0, rms_log_error_after = 0;
};

// Names accepted in `parameters` (the [efficiency] keys): matmul, attention, memory_bound,
// fp8_matmul, collective_nvlink, allreduce_nvlink, collective_network, comm_interference. Needs at
// least as many measurements as parameters.
Result<CalibrationResult> Calibrate(const std::vector<Measurement>& measurements,
                                    const HardwareProfile& base,
                                    const std::vector<std::string>& parameters);

// A profile file inheriting `base_ref` (a name or path) with the fitted values, and comments
// recording the command, the measurements and the errors before and after.
std::string CalibratedProfileToml(const CalibrationResult& r, const std::string& base_ref,
                                  const std::string& new_name, const std::string& command);

}  // namespace tenax::plan
