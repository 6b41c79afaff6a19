// What a run folder says about its run, read back for people: metrics.jsonl (one line per logged
// step and per evaluation, train/reporter.h), goodput.json (launch/goodput.h; schema in
// docs/launcher_protocol.md), loss_spikes.json, config.toml and the committed checkpoints.
// Everything is optional: a run that crashed at once has only config.toml, a plain `tenax train`
// has no goodput.json. Torch-free; readers only (the run's processes write these files).
// Non-goals: the TensorBoard files (the same numbers as metrics.jsonl).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::report {

// One logged training step (a metrics.jsonl line with "loss").
struct StepPoint {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double flops_per_s = 0;
  std::optional<double> mfu;  // fraction of the device's peak; none on CPU
  int64_t mem_peak_bytes = 0;
  int64_t mem_peak_reserved_bytes = 0;  // GPU runs: the caching allocator's peak; 0 otherwise
  double step_time_s = 0;
  int64_t tokens = 0;  // tokens trained so far in the run's trajectory
  double time = 0;     // unix seconds
};

// One evaluation (a metrics.jsonl line with "val_loss").
struct EvalPoint {
  int64_t step = 0;
  double val_loss = 0;
  int64_t tokens = 0;
  double time = 0;
};

struct CheckpointInfo {
  int64_t step = 0;
  double committed_unix = 0;  // when its COMMITTED marker was written
};

struct RunData {
  std::string run_dir;
  std::vector<StepPoint> steps;  // ascending step
  std::vector<EvalPoint> evals;
  nlohmann::json goodput;                                // null when the run has none
  nlohmann::json loss_spikes = nlohmann::json::array();  // loss_spikes.json "spikes"
  nlohmann::json sdc = nlohmann::json::array();          // sdc.json "detections"
  std::string config_toml;                               // empty when absent
  std::string checkpoint_dir;                            // from config.toml
  std::vector<CheckpointInfo> checkpoints;               // ascending step
};

// Reads `run_dir`. `goodput_path` empty: <run_dir>/goodput.json. Fails only when `run_dir` is not
// a folder, or when a file is there but unreadable (a line of metrics.jsonl that is cut off at
// the end, as a crash leaves it, is skipped).
Result<RunData> LoadRunData(const std::string& run_dir, const std::string& goodput_path = "");

// The newest part of a run for a live view, read cheaply (the tail of metrics.jsonl, the
// checkpoint folder's markers): a JSON object with step, loss, lr, grad_norm, tokens (trained so
// far), tokens_per_s, flops_per_s, mfu (when known), mem_peak_bytes, val_loss (when evaluated),
// last_checkpoint_step / last_checkpoint_unix (when one is committed), and `history` (the last
// up to 300 logged [step, loss] pairs). An empty object when nothing is logged yet.
nlohmann::json ReadLiveTraining(const std::string& run_dir);

// The trainer's loss-spike record (<run>/loss_spikes.json "spikes", train/loss_spike.h): none
// when the file is absent, an error when it is there but cannot be read, an empty array when it
// holds no such list.
Result<std::optional<nlohmann::json>> ReadLossSpikes(const std::string& run_dir);
// The trainer's silent-data-corruption record (<run>/sdc.json "detections", train/sdc_check.h),
// read the same way.
Result<std::optional<nlohmann::json>> ReadSdcDetections(const std::string& run_dir);

// The committed checkpoints of `folder` with their commit times, ascending.
std::vector<CheckpointInfo> ListCheckpoints(const std::string& folder);

}  // namespace tenax::report
