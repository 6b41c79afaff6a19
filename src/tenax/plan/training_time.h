// From a step time to a training run: days and cost for a token budget, and, given a failure
// rate, the expected wall-clock time with checkpoints and restarts (Daly's formula at Daly's
// interval), which is how `tenax plan --failure-rate` composes with the simulator's model.
// Non-goals: learning-rate schedules or batch ramps that change the speed during a run.
#pragma once

#include <cstdint>
#include <optional>

#include "tenax/plan/failure.h"

namespace tenax::plan {

struct FailureCosts {
  FailureRate rate;
  int64_t gpus_per_node = 8;
  double checkpoint_cost = 0;  // seconds of stall per checkpoint
  double restart_cost = 0;     // seconds from a failure to training again
};

struct TrainingEstimate {
  double tokens = 0;
  double seconds = 0;  // without failures: tokens / cluster tokens/s
  double gpu_hours = 0;
  double cost = 0;  // gpu_hours x price (0 without a price)
  // With failures (when FailureCosts were given):
  bool with_failures = false;
  double mtbf = 0;          // of the whole job, seconds
  double interval = 0;      // Daly's checkpoint interval, seconds of computation
  double wall_seconds = 0;  // expected, Daly (2006)
  double effective = 0;     // seconds / wall_seconds
  double wall_cost = 0;
};

// The failure arithmetic alone, for any amount of work: the job's MTBF, Young's and Daly's
// intervals and the effective training time at Daly's interval (T_s / T_w does not depend on T_s).
struct FailureSummary {
  double mtbf = 0;            // seconds, of the whole job
  double young_interval = 0;  // seconds of computation between checkpoints
  double daly_interval = 0;
  double effective = 0;  // computation / expected wall-clock time
};
FailureSummary SummarizeFailures(const FailureCosts& f, int64_t gpus);

TrainingEstimate EstimateTraining(double tokens, double tokens_per_s_per_gpu, int64_t gpus,
                                  double price_per_gpu_hour,
                                  const std::optional<FailureCosts>& failures);

}  // namespace tenax::plan
