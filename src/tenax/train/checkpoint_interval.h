// checkpoint.interval = "auto": how many steps between checkpoints, from the Young/Daly optimum
// (plan/failure.h) for the measured checkpoint cost and the job's failure rate.
//
// The failure rate is a Gamma-Poisson estimate: the configured rate lambda0 (failures per hour)
// acts as a prior worth `prior_failures` pseudo-failures observed over prior_failures / lambda0
// hours (Gamma(shape a0 = prior_failures, rate b0 = a0 / lambda0)); the run adds the failures the
// launcher observed (TENAX_RESTART_COUNT: each restart followed a failure) over the run's
// elapsed time T (TENAX_RUN_ELAPSED_S at start, plus this process's own time). The estimate is
// the posterior mean (a0 + n) / (b0 + T): the prior dominates early, observed failures later.
//
// The checkpoint cost C is the time a save blocks training (with checkpoint.async, only the
// snapshot into host memory). Interval in steps = round(Daly(C, MTBF) / step time), clamped to
// [1, total steps].
// Non-goals: restart cost (Daly's optimum does not depend on it); per-node failure rates (the
// rate here is the whole job's, as observed).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace tenax::train {

// Posterior mean failure rate (per hour) of the Gamma-Poisson model above.
double PosteriorFailureRatePerHour(double prior_rate_per_hour, double prior_failures,
                                   int64_t observed_failures, double observed_hours);

// round(DalyInterval(checkpoint_cost_s, 3600 / rate) / step_time_s), clamped to [1, max_steps].
int64_t OptimalIntervalSteps(double checkpoint_cost_s, double step_time_s,
                             double failure_rate_per_hour, int64_t max_steps);

// What the launcher has seen so far (protocol::RankContext: generation, run_elapsed_s).
struct ObservedFailures {
  int64_t restarts = 0;      // the launch generation: each restart followed a failure
  double run_elapsed_s = 0;  // seconds since the launcher started the job
};

struct IntervalPolicyOptions {
  bool automatic = false;             // checkpoint.interval = "auto"
  int64_t interval = 100;             // fixed interval, or the interval until the first measurement
  int64_t total_steps = 1;            // training.steps: the upper clamp
  double prior_rate_per_hour = 0.05;  // checkpoint.failure_rate_per_hour
  double prior_failures = 1;          // weight of the prior, in pseudo-failures
  ObservedFailures observed;
};

// Asked by the trainer after every step whether to save. Not thread-safe (the trainer's thread).
class CheckpointIntervalPolicy {
 public:
  // `resume_step`: the step training restarts from (counts as the last save).
  CheckpointIntervalPolicy(IntervalPolicyOptions options, int64_t resume_step);

  // Fixed: step % interval == 0. Automatic: at least interval() steps since the last save.
  // (The trainer saves the final step regardless.)
  bool ShouldSave(int64_t step) const;
  // Seconds one training step took (checkpoint time excluded); the median of the recent ones is
  // used.
  void RecordStepTime(double seconds);
  // After each save at `step`: the seconds it blocked training, and the seconds since this
  // process started (extends the observed run time). Recomputes the interval (automatic mode)
  // Returns true when it changed (the caller logs it: TrainCheckpointer::Save).
  bool RecordSave(int64_t step, double blocking_seconds, double process_elapsed_s);

  // Multi-rank runs: every rank must save at the same steps (saving is collective), so ranks
  // other than 0 adopt rank 0's interval (broadcast by the trainer after each RecordSave).
  void AdoptInterval(int64_t steps);

  int64_t interval() const { return interval_; }
  double failure_rate_per_hour() const { return rate_per_hour_; }
  // The inputs of the current interval: "checkpoint cost 1.200 s, step 0.350 s, 0.061
  // failures/hour (prior 0.05/hour, 1 failure(s) in 3.20 h observed)".
  std::string Explain() const;

 private:
  double MedianStepTime() const;

  // Constant after construction.
  const IntervalPolicyOptions options_;

  int64_t interval_;
  int64_t last_save_step_;
  std::deque<double> step_times_;  // the most recent, oldest first
  std::optional<double> cost_s_;   // mean blocking cost of the saves so far
  int64_t saves_ = 0;
  double rate_per_hour_;
  double observed_hours_;
};

}  // namespace tenax::train
