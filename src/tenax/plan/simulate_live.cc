// Live recovery in the failure simulator (SimulationConfig::replica_groups, simulate.h): an
// event loop over failures, rejoining groups and checkpoint boundaries.
#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

#include "tenax/core/random.h"
#include "tenax/plan/simulate.h"
#include "tenax/plan/units.h"

namespace tenax::plan {

RunOutcome SimulateLiveRun(const SimulationConfig& c, uint64_t run_index) {
  // A stream of its own: restart recovery's numbers do not move when this model changes.
  uint64_t mix = c.seed ^ (0x9e3779b97f4a7c15ULL * (run_index + 1)) ^ 0x1ee7ULL;
  Rng rng(SplitMix64(&mix));
  const double groups = static_cast<double>(c.replica_groups);
  const double job_rate = c.rate.per_node_hour * static_cast<double>(c.nodes()) / kHour;
  using MinHeap = std::priority_queue<double, std::vector<double>, std::greater<double>>;
  MinHeap rejoin;   // when each group out of the quorum is back
  MinHeap repairs;  // when each failed node is back in service
  int64_t pool = c.spares;
  RunOutcome o;
  double t = 0, committed = 0, progress = 0;  // work at the last checkpoint, and since it
  // The replacement of a node that failed at `t`: a free spare after the swap, else the first
  // node back from repair (waiting is short-handed time, not a stop, while groups remain).
  auto replacement_ready = [&]() {
    while (!repairs.empty() && repairs.top() <= t) {
      repairs.pop();
      ++pool;
    }
    if (pool > 0) {
      --pool;
      return t + c.swap_time;
    }
    const double back = repairs.top();
    repairs.pop();
    return std::max(t, back);
  };

  while (committed + progress < c.duration) {
    const double out = static_cast<double>(rejoin.size());
    const double share = (groups - out) / groups;  // work done per second
    const double segment = std::min(c.interval, c.duration - committed);
    const double to_boundary = (segment - progress) / share;
    const double to_rejoin = rejoin.empty() ? INFINITY : rejoin.top() - t;
    const double to_failure = rng.Exponential(job_rate * share);  // healthy nodes only
    const double dt = std::min({to_boundary, to_rejoin, to_failure});
    t += dt;
    o.short_handed += dt * (1 - share);
    if (dt == to_failure && to_failure < to_boundary && to_failure < to_rejoin) {
      progress += dt * share;
      ++o.failures;
      repairs.push(t + c.repair_time);
      // Every group waits in the step's collective until the failure is found.
      t += c.detect_time;
      o.restarting += c.detect_time;
      if (out + 1 < groups) {
        rejoin.push(replacement_ready() + c.heal_time);
        continue;
      }
      // The last group is gone: the job restarts from its checkpoint on replacements.
      o.lost += progress;
      progress = 0;
      while (!rejoin.empty()) rejoin.pop();
      const double ready = replacement_ready();
      o.waiting += ready - t - std::min(ready - t, c.swap_time);
      o.restarting += std::min(ready - t, c.swap_time) + c.restart_cost;
      t = ready + c.restart_cost;
      continue;
    }
    if (dt == to_rejoin && to_rejoin < to_boundary) {
      progress += dt * share;
      rejoin.pop();
      continue;
    }
    committed += segment;
    progress = 0;
    if (committed < c.duration) {  // no checkpoint after the last computation
      t += c.checkpoint_cost;
      o.checkpointing += c.checkpoint_cost;
    }
  }
  o.wall = t;
  return o;
}

}  // namespace tenax::plan
