// Monte-Carlo simulation of a synchronous training job under node failures: failures arrive as a
// Poisson process (each node independently at the given rate); the job stalls to checkpoint every
// `interval` of computation; a failure loses the work since the last completed checkpoint, then
// the job pays the restart cost (detection, relaunch, loading the checkpoint) after a replacement
// node is found: from the spare pool (swap time) or, with none left, by waiting for a repair.
// Failed nodes return to the pool once repaired. Failures may also strike during a restart.
// Every run derives its own generator from (seed, run index): results depend only on the seed.
// Non-goals: failures while a failure goes undetected or while waiting for a repair (the job is
// stopped then), correlated failures, stragglers, checkpoint corruption.
#pragma once

#include <cstdint>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/plan/failure.h"

namespace tenax::plan {

// A replayed failure's kind (SimulationConfig::arrival_kinds).
enum class ArrivalKind { kCrash, kHang, kNan };

struct SimulationConfig {
  int64_t gpus = 0;
  int64_t gpus_per_node = 8;
  FailureRate rate;
  double checkpoint_cost = 0;  // seconds training stalls per checkpoint
  double detect_time = 0;      // seconds from a failure until the job notices it
  double restart_cost = 0;     // seconds from a replacement being ready to training again
  double interval = 0;         // seconds of computation between checkpoints
  double duration = 0;         // seconds of computation the job needs without failures
  int64_t spares = 0;          // spare nodes
  double swap_time = 0;        // seconds to bring a spare in
  double repair_time = 0;      // seconds until a failed node is back in service
  int64_t runs = 1000;
  uint64_t seed = 1;
  // Live recovery (issue 34's resilience.mode = "live"; 0: restart recovery only). The nodes form
  // `replica_groups` data-parallel replica groups. A failed node takes its group out of the
  // quorum: every group waits for the verdict (detect_time), then the others go on and do the
  // missing groups' share of each step (a step takes R / (R - k) as long with k of R groups out),
  // losing no work, until a replacement (a spare after swap_time, else the repaired node) has
  // healed from a live peer in heal_time and rejoined. Only when every group is out does the job
  // restart from its checkpoint (restart_cost, the work since it lost). Failures strike the
  // groups in the quorum only, during computation, checkpoint stalls and restarts, never during
  // detection or waiting.
  int64_t replica_groups = 0;
  double heal_time = 0;
  // Live recovery: the quorum's throughput with one group out, as a share of the full quorum's;
  // with k out it is 1 - k (1 - share). 0: compute-bound, (R - 1) / R. A measured run gives its
  // own (tenax plan --from-run): small steps lose less than their share.
  double short_handed_share = 0;
  // A replay (SimulateRun only): the failures strike at these exposure times instead of being
  // drawn at `rate`: seconds at risk (computation, checkpoint stalls, restarts and swaps; not
  // detection or waiting), ascending, as `tenax launch --inject poisson:...` records them.
  std::vector<double> arrivals;
  // What each arrival was, when known (else every one strikes where it falls): the launcher's
  // schedule strikes a hang only once the generation has run a step and a NaN loss at the next
  // step, so one of those due during a restart strikes when it ends (and a NaN due during a
  // checkpoint's save, when the save ends), where a crash cuts either short.
  std::vector<ArrivalKind> arrival_kinds;

  int64_t nodes() const { return (gpus + gpus_per_node - 1) / gpus_per_node; }
};

// When the replay's arrival `i`, due `f` seconds into a window of `window` seconds at risk,
// strikes: at `f`, or at the window's end where the launcher cannot strike its kind there. The
// window is a restart (`restart`) or `work` seconds of computation followed by a save. Arrivals of
// no recorded kind strike where they fall.
inline double ReplayedStrike(const SimulationConfig& c, size_t i, double f, double window,
                             bool restart, double work) {
  if (f >= window || i >= c.arrival_kinds.size()) return f;
  const ArrivalKind k = c.arrival_kinds[i];
  const bool strikes =
      k == ArrivalKind::kCrash || (!restart && (k == ArrivalKind::kHang || f < work));
  return strikes ? f : window;
}

// What happened in one simulated job. wall = duration + lost + checkpointing + restarting +
// waiting.
struct RunOutcome {
  double wall = 0;
  double lost = 0;           // computation redone after failures
  double checkpointing = 0;  // checkpoint stalls (including ones a failure cut short)
  double restarting = 0;     // detection, swaps and restarts (including ones cut short)
  double waiting = 0;        // waiting for a repaired node when no spare was left
  double short_handed = 0;   // live recovery: the work the missing groups did not do
  int64_t failures = 0;
};

// Mean with a 95% confidence interval of the mean (normal approximation) and percentiles.
struct Summary {
  double mean = 0, stddev = 0, ci_low = 0, ci_high = 0, p05 = 0, p50 = 0, p95 = 0;
};
Summary Summarize(std::vector<double> values);

struct SimulationResult {
  Summary wall, failures, lost, checkpointing, restarting, waiting, short_handed;
  Summary efficiency;        // duration / wall: the effective training time
  double mtbf = 0;           // the configured job MTBF (seconds)
  double observed_mtbf = 0;  // time at risk (not detecting or waiting) / failures, all runs
};

// Checks the configuration (positive sizes, an interval the job can finish with) and runs it.
Result<SimulationResult> Simulate(const SimulationConfig& config);
RunOutcome SimulateRun(const SimulationConfig& config, uint64_t run_index);
// One run with live recovery (SimulateRun calls it when replica_groups > 0); simulate_live.cc.
RunOutcome SimulateLiveRun(const SimulationConfig& config, uint64_t run_index);

}  // namespace tenax::plan
