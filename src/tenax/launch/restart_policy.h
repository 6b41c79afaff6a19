// When `tenax launch` starts a failed job again. A launcher whose purpose is to survive failures
// survives them by default: without --max-restarts it restarts after every failure a restart can
// help (protocol::Restartable) while the job restarted fewer than N times in the trailing window
// (--restart-budget N/h, default 10/h). 10 an hour is ~30 times the rate of Llama 3 405B's run
// on 16,384 GPUs (419 interruptions in 54 days: 0.32 an hour) and 5 times what ~100k GPUs would
// see at that per-GPU rate, so a healthy job at that scale is never stopped by it, while a job that
// fails again right after each restart (a bad node left in, a bug) stops within the hour instead
// of burning the cluster. A count (--max-restarts N, torchrun's convention; 0: stop at the first
// failure) replaces the budget, or adds to it when both are given. A job whose nodes meet at a
// fixed address (no etcd) cannot restart across nodes: no restarts there unless asked (refused).
// The budget counts restarts as this process saw them (several nodes: each agent judges from the
// failures it took part in); the count uses the job's generation, the same on every node.
// Thread safety: none; the supervision loop (or the node agent's) owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tenax/core/rate.h"
#include "tenax/core/status.h"
#include "tenax/launch/launcher.h"

namespace tenax::launch {

class RestartPolicy {
 public:
  // From the launch flags (invalid --restart-budget: InvalidArgument naming the grammar).
  static Result<RestartPolicy> FromOptions(const LaunchOptions& o);
  RestartPolicy(std::optional<int> max_restarts, std::optional<PerWindow> budget)
      : max_(max_restarts), budget_(budget) {}

  // Whether the job may leave `generation` (it failed at `now`, seconds on any steady clock) for
  // the next one: nullopt, and the restart is recorded (once per generation); or why not.
  std::optional<std::string> Take(int64_t generation, double now);
  // "restart 2 of 3", or "restart 4 (4 in the last 1h; --restart-budget 10/h)", for the log;
  // after a successful Take.
  std::string Describe(int64_t generation, double now) const;
  // The most generations the job can run (for the fault spec's checks): the count + 1, or
  // effectively unbounded.
  int max_generation() const;
  // Restarts per second the budget allows on average (0: no budget).
  double budget_per_second() const { return budget_ ? budget_->per_second() : 0; }

 private:
  int Recent(double now) const;  // restarts within the window before now

  std::optional<int> max_;
  std::optional<PerWindow> budget_;
  std::string none_;                 // why no restart is possible at all (fixed nodes), if so
  std::map<int64_t, double> taken_;  // generation left -> when
};

}  // namespace tenax::launch
