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
  // The work a group out of the quorum costs per second (compute-bound: its share of the groups).
  const double slow_per_group = c.short_handed_share > 0 ? 1 - c.short_handed_share : 1 / groups;
  using MinHeap = std::priority_queue<double, std::vector<double>, std::greater<double>>;
  MinHeap rejoin;   // when each group out of the quorum is back
  MinHeap repairs;  // when each failed node is back in service
  int64_t pool = c.spares;
  RunOutcome o;
  double t = 0, committed = 0, progress = 0;  // work at the last checkpoint, and since it
  // The failure process on the clock of seconds at risk (not detection or waiting): the seconds
  // at risk until the next failure, drawn on the groups in the quorum (`in` of them, as a share),
  // or the replay's next arrival, which strikes whatever is in.
  double at_risk = 0;
  size_t replayed = 0;
  const bool replay = !c.arrivals.empty();
  auto next_failure = [&](double in) {
    if (!replay) return rng.Exponential(job_rate * in);
    return replayed < c.arrivals.size() ? std::max(0.0, c.arrivals[replayed] - at_risk) : INFINITY;
  };
  auto failed = [&](double dt) {  // a failure after dt seconds at risk
    t += dt;
    at_risk += dt;
    ++o.failures;
    replayed += replay ? 1 : 0;
    repairs.push(t + c.repair_time);
    // Every group waits in the step's collective until the failure is found.
    t += c.detect_time;
    o.restarting += c.detect_time;
  };
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
  // Every group is out (or a save failed): the job restarts from its checkpoint on replacements,
  // as restart recovery does; a failure during the restart starts it over.
  auto restart = [&]() {
    o.lost += progress;
    progress = 0;
    while (!rejoin.empty()) rejoin.pop();
    for (;;) {
      const double ready = replacement_ready();
      const double swap = std::min(ready - t, c.swap_time);
      o.waiting += ready - t - swap;
      t = ready - swap;
      const double window = swap + c.restart_cost;
      // A replayed hang or NaN due in the restart strikes as it ends.
      const double f = ReplayedStrike(c, replayed, next_failure(1), window, /*restart=*/true, 0);
      if (f >= window) {
        t += window;
        at_risk += window;
        o.restarting += window;
        return;
      }
      o.restarting += f;
      failed(f);
    }
  };
  // A group of the quorum fails after dt seconds at risk, `out` groups being out already: it
  // leaves until its replacement healed, or it was the last and the job restarts.
  auto group_fails = [&](double dt, double out) {
    failed(dt);
    if (out + 1 < groups) {
      rejoin.push(replacement_ready() + c.heal_time);
    } else {
      restart();
    }
  };

  while (committed + progress < c.duration) {
    const double out = static_cast<double>(rejoin.size());
    const double in = (groups - out) / groups;                     // groups at risk, as a share
    const double speed = std::max(0.0, 1 - out * slow_per_group);  // work done per second
    const double segment = std::min(c.interval, c.duration - committed);
    const double to_boundary = speed > 0 ? (segment - progress) / speed : INFINITY;
    const double to_rejoin = rejoin.empty() ? INFINITY : rejoin.top() - t;
    const double to_failure = next_failure(in);
    const double dt = std::min({to_boundary, to_rejoin, to_failure});
    o.short_handed += dt * (1 - speed);
    progress += dt * speed;
    if (dt == to_failure && to_failure < to_boundary && to_failure < to_rejoin) {
      group_fails(dt, out);
      continue;
    }
    t += dt;
    at_risk += dt;
    if (dt == to_rejoin && to_rejoin < to_boundary) {
      rejoin.pop();
      continue;
    }
    progress = 0;
    if (committed + segment >= c.duration) {  // no checkpoint after the last computation
      committed += segment;
      break;
    }
    // The checkpoint's stall, at risk: a failure during it takes its group out as any other (the
    // others finish the save; a rank that dies while saving leaves the others past their part of
    // it), the rest of the stall left out.
    // A replayed NaN due in the stall strikes once the save is done.
    const double f =
        ReplayedStrike(c, replayed, next_failure(in), c.checkpoint_cost, /*restart=*/false, 0);
    if (f < c.checkpoint_cost) {
      o.checkpointing += f;
      committed += segment;
      group_fails(f, out);
      continue;
    }
    committed += segment;
    t += c.checkpoint_cost;
    at_risk += c.checkpoint_cost;
    o.checkpointing += c.checkpoint_cost;
  }
  o.wall = t;
  return o;
}

}  // namespace tenax::plan
