// Loss-spike detection (training.loss_spike_factor) and the run's record of spikes.
// A step's loss (the mean over ranks, so every rank decides the same) is a spike when it exceeds
// factor x the median of the losses of the previous `window` steps whose updates were applied.
// The window travels in checkpoints (train_state.json "loss_history"), so a resumed or restarted
// run judges each step exactly as the uninterrupted run would; that is what lets
// on_loss_spike = "restart" tell a transient fault (the rerun of the step is normal) from a batch
// that spikes every time (it spikes again after the rollback, and its update is then skipped).
// Every spike is appended to <run folder>/loss_spikes.json by rank 0 (atomic rewrite), which the
// restarted processes read and `tenax launch` copies into goodput.json.
// Non-goals: spikes in the gradient norm alone (clipping handles those), per-rank detection.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::train {

class LossSpikeDetector {
 public:
  // `factor` 0 disables detection; otherwise > 1. `window` >= 1.
  LossSpikeDetector(double factor, int64_t window);

  bool enabled() const { return factor_ > 0; }
  // The median it was compared against when `loss` is a spike, nullopt otherwise (also while
  // fewer than min(8, window) losses are known, and when disabled). Non-finite losses are the
  // nonfinite check's business: never a spike here.
  std::optional<double> Check(double loss) const;
  // A step whose update was applied: its loss joins the window.
  void Add(double loss);
  // The window, oldest first (saved in checkpoints), and its restore.
  const std::deque<double>& history() const { return history_; }
  void Restore(const std::vector<double>& losses);

 private:
  double factor_;
  size_t window_;
  std::deque<double> history_;
};

struct LossSpikeRecord {
  int64_t step = 0;
  double loss = 0;
  double median = 0;
  std::string action;  // warn | skip | restart | stop (what was done)
  int generation = 0;  // TENAX_RESTART_COUNT of the process that saw it
};

// <run_dir>/loss_spikes.json; an absent file is an empty list.
std::string LossSpikesPath(const std::string& run_dir);
Result<std::vector<LossSpikeRecord>> ReadLossSpikes(const std::string& run_dir);
// Rewrites the file atomically with `record` appended; nothing when the file already holds its
// step in its generation (the step ran again after a live recovery).
Status AppendLossSpike(const std::string& run_dir, const LossSpikeRecord& record);

}  // namespace tenax::train
