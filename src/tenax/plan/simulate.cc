#include "tenax/plan/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

#include "tenax/core/random.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

// Past this many expected failures per attempt a segment almost never completes: the run would
// not end in any useful time, so the configuration is refused up front.
constexpr double kMaxFailuresPerAttempt = 30.0;

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank: ceil(p n) >= 1 for p > 0.
  const double rank = std::max(1.0, std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), static_cast<size_t>(rank)) - 1];
}

}  // namespace

Summary Summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  const double n = static_cast<double>(v.size());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / n;
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(sq / (n - 1.0)) : 0.0;
  const double half = 1.96 * s.stddev / std::sqrt(n);
  s.ci_low = s.mean - half;
  s.ci_high = s.mean + half;
  std::sort(v.begin(), v.end());
  s.p05 = Percentile(v, 0.05);
  s.p50 = Percentile(v, 0.50);
  s.p95 = Percentile(v, 0.95);
  return s;
}

RunOutcome SimulateRun(const SimulationConfig& c, uint64_t run_index) {
  if (c.replica_groups > 0) return SimulateLiveRun(c, run_index);
  uint64_t mix = c.seed ^ (0x9e3779b97f4a7c15ULL * (run_index + 1));
  Rng rng(SplitMix64(&mix));
  const double rate = c.rate.per_node_hour * static_cast<double>(c.nodes()) / kHour;  // per s
  RunOutcome o;
  double t = 0, committed = 0;
  // The failure process: whether one strikes within the next `window` seconds at risk, and when.
  // Drawn afresh for each window (the exponential forgets), or the replay's next arrival.
  double at_risk = 0;
  size_t replayed = 0;
  const bool replay = !c.arrivals.empty();
  // `restart`: the window is a restart; else `work` seconds of computation and then a save.
  auto fails_within = [&](double window, bool restart, double work, double* when) {
    const double due = !replay ? rng.Exponential(rate)
                       : replayed < c.arrivals.size()
                           ? std::max(0.0, c.arrivals[replayed] - at_risk)
                           : INFINITY;
    // A replayed hang or NaN due where the launcher cannot strike it waits for the window's end,
    // and then strikes at once.
    const double f = ReplayedStrike(c, replayed, due, window, restart, work);
    if (f >= window) {
      at_risk += window;
      return false;
    }
    at_risk += f;
    replayed += replay ? 1 : 0;
    *when = f;
    return true;
  };
  int64_t pool = c.spares;
  std::priority_queue<double, std::vector<double>, std::greater<double>> repairs;

  // After a failure at time t: find a replacement node, then restart; a failure during the restart
  // starts the recovery over (and sends one more node to repair).
  auto recover = [&]() {
    for (;;) {
      // Until the failure is detected the job hangs (a collective times out); the node is
      // already broken, so its repair clock starts at the failure.
      repairs.push(t + c.repair_time);
      t += c.detect_time;
      o.restarting += c.detect_time;
      while (!repairs.empty() && repairs.top() <= t) {
        repairs.pop();
        ++pool;
      }
      // The swap and the restart run on allocated nodes, which can fail too.
      double window = c.restart_cost;
      if (pool > 0) {
        --pool;
        window += c.swap_time;
      } else {
        const double back = repairs.top();  // the first repaired node joins the job directly
        repairs.pop();
        o.waiting += back - t;
        t = back;
      }
      double f = 0;
      if (!fails_within(window, /*restart=*/true, 0, &f)) {
        t += window;
        o.restarting += window;
        return;
      }
      t += f;
      o.restarting += f;
      ++o.failures;
    }
  };

  while (committed < c.duration) {
    const double work = std::min(c.interval, c.duration - committed);
    // The job ends with its last computation; no checkpoint is needed after it.
    const double stall = committed + work < c.duration ? c.checkpoint_cost : 0.0;
    double f = 0;
    if (!fails_within(work + stall, /*restart=*/false, work, &f)) {
      t += work + stall;
      committed += work;
      o.checkpointing += stall;
      continue;
    }
    t += f;
    ++o.failures;
    o.lost += std::min(f, work);
    o.checkpointing += std::max(0.0, f - work);
    recover();
  }
  o.wall = t;
  return o;
}

Result<SimulationResult> Simulate(const SimulationConfig& c) {
  if (c.gpus < 1 || c.gpus_per_node < 1) {
    return InvalidArgument(
        fmt::format("--gpus ({}) and --gpus-per-node ({}) must be >= 1", c.gpus, c.gpus_per_node));
  }
  if (!(c.duration > 0)) return InvalidArgument("--duration must be > 0");
  if (!(c.interval > 0)) return InvalidArgument("--interval must be > 0");
  if (c.runs < 1) return InvalidArgument(fmt::format("--runs = {} must be >= 1", c.runs));
  if (c.spares < 0) return InvalidArgument(fmt::format("--spares = {} must be >= 0", c.spares));
  if (c.replica_groups < 0 || c.replica_groups > c.nodes() || !(c.heal_time >= 0)) {
    return InvalidArgument(fmt::format(
        "--replica-groups {} must be 0 (restart recovery) or 1..{} (the job's nodes), and "
        "--heal-time >= 0",
        c.replica_groups, c.nodes()));
  }
  if (!(c.short_handed_share >= 0)) {
    return InvalidArgument(
        fmt::format("--short-handed-share {} must be >= 0 (0: the groups' share, compute-bound)",
                    c.short_handed_share));
  }
  if (c.checkpoint_cost < 0 || c.restart_cost < 0 || c.swap_time < 0 || c.repair_time < 0 ||
      c.detect_time < 0) {
    return InvalidArgument("checkpoint, detection, restart, swap and repair times must be >= 0");
  }
  const double mtbf = JobMtbfSeconds(c.rate, c.nodes());
  const double attempt = std::min(c.interval, c.duration) + c.checkpoint_cost;
  // A recovery is exposed for the restart plus, when the replacement comes from the pool, the
  // swap (with --spares 0 a repaired node waits in the pool too).
  const double recovery = c.restart_cost + c.swap_time;
  if (attempt / mtbf > kMaxFailuresPerAttempt || recovery / mtbf > kMaxFailuresPerAttempt) {
    return InvalidArgument(fmt::format(
        "with a job MTBF of {} a {} checkpoint interval (+{} stall) or a {} restart (+{} swap) "
        "would almost never complete; shorten --interval (try auto) or the costs",
        FormatDuration(mtbf), FormatDuration(c.interval), FormatDuration(c.checkpoint_cost),
        FormatDuration(c.restart_cost), FormatDuration(c.swap_time)));
  }
  std::vector<double> wall, failures, lost, ckpt, restart, waiting, short_handed, efficiency;
  double total_at_risk = 0, total_failures = 0;
  for (int64_t i = 0; i < c.runs; ++i) {
    const RunOutcome o = SimulateRun(c, static_cast<uint64_t>(i));
    wall.push_back(o.wall);
    failures.push_back(static_cast<double>(o.failures));
    lost.push_back(o.lost);
    ckpt.push_back(o.checkpointing);
    restart.push_back(o.restarting);
    waiting.push_back(o.waiting);
    short_handed.push_back(o.short_handed);
    efficiency.push_back(c.duration / o.wall);
    // No failures are drawn while detecting a failure or waiting for a repair.
    total_at_risk += o.wall - o.waiting - static_cast<double>(o.failures) * c.detect_time;
    total_failures += static_cast<double>(o.failures);
  }
  SimulationResult r;
  r.wall = Summarize(wall);
  r.failures = Summarize(failures);
  r.lost = Summarize(lost);
  r.checkpointing = Summarize(ckpt);
  r.restarting = Summarize(restart);
  r.waiting = Summarize(waiting);
  r.short_handed = Summarize(short_handed);
  r.efficiency = Summarize(efficiency);
  r.mtbf = mtbf;
  r.observed_mtbf = total_failures > 0 ? total_at_risk / total_failures : INFINITY;
  return r;
}

}  // namespace tenax::plan
