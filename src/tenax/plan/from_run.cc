#include "tenax/plan/from_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "tenax/config/config.h"
#include "tenax/core/fs.h"
#include "tenax/core/random.h"
#include "tenax/core/run_paths.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

// Checkpoints a generation wrote: every multiple of `every` after the step it resumed from, up
// to its last step, and the final step's save when the interval does not land on it.
int64_t CheckpointsWritten(int64_t resume, int64_t last, int64_t every, int64_t total) {
  if (last <= resume) return 0;
  int64_t n = last / every - resume / every;
  if (last == total && total % every != 0) ++n;
  return n;
}

// The effective training time of one simulated run: the run's productive seconds over its
// predicted wall time (the fixed start-up and shut-down plus the simulated job).
double Effective(const RunCosts& c, const RunOutcome& o) {
  return c.productive_s / (c.fixed_s + o.wall);
}

// Arrivals (seconds at risk, kind) into `at` and `kinds`, by time: the order a replay wants
// (SimulationConfig::arrivals, arrival_kinds).
void AppendByTime(std::vector<std::pair<double, ArrivalKind>> arrivals, std::vector<double>* at,
                  std::vector<ArrivalKind>* kinds) {
  std::sort(arrivals.begin(), arrivals.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [when, kind] : arrivals) {
    at->push_back(when);
    kinds->push_back(kind);
  }
}

// `wall` (when given): the simulated runs' wall times, as `tenax simulate` summarizes them.
Summary EffectiveOver(const RunCosts& costs, const SimulationConfig& config,
                      Summary* wall = nullptr) {
  std::vector<double> v, walls;
  v.reserve(static_cast<size_t>(config.runs));
  for (int64_t i = 0; i < config.runs; ++i) {
    const RunOutcome o = SimulateRun(config, static_cast<uint64_t>(i));
    v.push_back(Effective(costs, o));
    walls.push_back(o.wall);
  }
  if (wall != nullptr) *wall = Summarize(std::move(walls));
  return Summarize(std::move(v));
}

// Live recovery's records (goodput.json live_recoveries) in the simulator's terms: the failures
// the others trained through, their detection and healing, and the stretches the quorum ran
// short-handed (from a failure until its replacement healed or was discarded, overlapping ones
// merged), whose seconds (less the checkpoint stalls in them) and steps, set in
// c->short_handed_s and c->short_handed_steps, are no full quorum's. `spans`: each generation's
// steps and the time of its last, where a replacement discarded with its generation stopped
// counting. Returns the steps per second of the lone recoveries that healed (0: none), which
// ReadRunCosts turns into the share of a full quorum's speed once it knows the step time.
struct GenerationSpan {
  double last_step_at = 0;
  int64_t resume_step = 0, last_step = 0;
};
double ReadLiveRecoveries(const nlohmann::json& g, const std::map<int64_t, GenerationSpan>& spans,
                          RunCosts* c, double* detect_sum) {
  struct Window {
    double begin = 0, end = 0;
    int64_t first = 0, last = 0;
    int recoveries = 1;
    double heal = -1;  // verdict until healed; -1: not healed
  };
  std::vector<Window> w;
  double heal_sum = 0;
  for (const auto& r : g.value("live_recoveries", nlohmann::json::array())) {
    if (r.value("kind", std::string()) == "peer-lost") continue;  // killed with its replica
    ++c->live_failures;
    ++c->failures_by_kind[r.value("kind", std::string("?"))];
    const double detection = r.value("detection_s", 0.0);
    *detect_sum += detection;
    Window x;
    const double verdict = r.value("time_s", 0.0);
    x.begin = verdict - detection;
    const double healed = r.value("healed_at_s", -1.0);
    x.end = healed >= 0 ? healed : r.value("discarded_at_s", -1.0);
    const auto span = spans.find(r.value("generation", int64_t{-1}));
    if (span == spans.end()) continue;  // a generation goodput.json does not list
    if (x.end < 0 || x.end > span->second.last_step_at) x.end = span->second.last_step_at;
    if (x.end < x.begin) continue;  // unfinished record: nothing measurable
    // Within the steps its generation trained (a record's step is its rank's last beat).
    x.first =
        std::clamp(r.value("step", int64_t{0}), span->second.resume_step, span->second.last_step);
    x.last = std::clamp(x.first + std::max<int64_t>(0, r.value("steps_short_handed", int64_t{0})),
                        x.first, span->second.last_step);
    if (healed >= 0) {
      x.heal = healed - verdict;
      ++c->heals;
      heal_sum += x.heal;
    }
    w.push_back(x);
  }
  c->heal_s = c->heals > 0 ? heal_sum / static_cast<double>(c->heals) : 0.0;
  std::sort(w.begin(), w.end(), [](const Window& a, const Window& b) { return a.begin < b.begin; });
  std::vector<Window> merged;
  for (const Window& x : w) {
    if (!merged.empty() && x.begin < merged.back().end) {
      Window& m = merged.back();
      m.end = std::max(m.end, x.end);
      m.first = std::min(m.first, x.first);
      m.last = std::max(m.last, x.last);
      ++m.recoveries;
    } else {
      merged.push_back(x);
    }
  }
  const double stall_per_step =
      c->checkpoint_every > 0 ? c->checkpoint_s / static_cast<double>(c->checkpoint_every) : 0.0;
  c->short_handed_s = 0;
  c->short_handed_steps = 0;
  for (const Window& m : merged) {
    const int64_t steps = m.last - m.first;
    c->short_handed_s +=
        std::max(0.0, m.end - m.begin - static_cast<double>(steps) * stall_per_step);
    c->short_handed_steps += steps;
  }
  double steps = 0, seconds = 0;
  for (const Window& m : merged) {
    if (m.recoveries != 1 || m.heal <= 0) continue;
    const double n = static_cast<double>(m.last - m.first);
    steps += n;
    seconds += std::max(1e-9, m.heal - n * stall_per_step);
  }
  return seconds > 0 ? steps / seconds : 0.0;
}

}  // namespace

double RestartCost(std::vector<RestartSeen> seen) {
  // Kaplan-Meier: the share of restarts still running after t steps down at each whole restart's
  // end; a restart cut short leaves those at risk without a step. Its integral is the mean.
  std::sort(seen.begin(), seen.end(), [](const RestartSeen& a, const RestartSeen& b) {
    return a.seconds < b.seconds || (a.seconds == b.seconds && a.whole && !b.whole);
  });
  double running = 1, mean = 0, last = 0;
  size_t at_risk = seen.size();
  for (const RestartSeen& r : seen) {
    mean += running * (r.seconds - last);
    last = r.seconds;
    if (r.whole) running *= 1 - 1.0 / static_cast<double>(at_risk);
    --at_risk;
  }
  return mean;
}

Result<RunCosts> ReadRunCosts(const std::string& run_dir) {
  const RunPaths paths(run_dir);
  auto text = LocalFs().ReadFile(paths.goodput());
  if (!text.ok()) {
    return NotFound(
        fmt::format("--from-run {}: no {} ({}); give the folder of a run started with tenax launch",
                    run_dir, paths.goodput(), text.status().message()));
  }
  const nlohmann::json g = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!g.is_object() || g.value("format", "") != "tenax-goodput") {
    return DataError(fmt::format("--from-run: {} is not a tenax goodput report", paths.goodput()));
  }
  for (const char* key : {"time_s", "generations", "failures", "wall_s"}) {
    const bool ok = g.contains(key) && (std::string(key) == "wall_s"   ? g[key].is_number()
                                        : std::string(key) == "time_s" ? g[key].is_object()
                                                                       : g[key].is_array());
    if (!ok) {
      return DataError(fmt::format("--from-run: {} has no usable \"{}\"; is it complete?",
                                   paths.goodput(), key));
    }
  }
  if (g.value("launches", 1) != 1) {
    return InvalidArgument(fmt::format(
        "--from-run {}: the run took {} launches; the time between launches is not modelled, so "
        "give a run of one launch",
        run_dir, g.value("launches", 1)));
  }
  if (g.value("exit_code", 0) != 0) {
    return InvalidArgument(fmt::format(
        "--from-run {}: the run did not finish (exit code {}); its costs would be incomplete",
        run_dir, g.value("exit_code", 0)));
  }
  TENAX_ASSIGN_OR_RETURN(Config config, LoadConfig(paths.config(), {}));
  if (!config.checkpoint.enable || config.checkpoint.interval_auto) {
    return InvalidArgument(fmt::format(
        "--from-run {}: the run {}; the model needs checkpoints at a fixed checkpoint.interval",
        run_dir,
        config.checkpoint.enable ? "chose its checkpoint interval as it went (\"auto\")"
                                 : "took no checkpoints"));
  }
  RunCosts c;
  c.run_dir = run_dir;
  c.steps = config.training.steps;
  c.checkpoint_every = config.checkpoint.interval;
  c.wall_s = g.value("wall_s", 0.0);
  c.measured_effective = g.value("effective_training_ratio", 0.0);
  c.productive_s = g["time_s"].value("productive", 0.0);

  const nlohmann::json& gens = g["generations"];
  if (!gens.is_array() || gens.empty()) {
    return DataError(fmt::format("--from-run: {} has no generations", paths.goodput()));
  }
  double training = 0, stalls = 0;
  int64_t stepped = 0, last_at_end = -1;
  double last_step_at = 0;
  std::map<int64_t, GenerationSpan> spans;
  for (const auto& x : gens) {
    spans[x.value("generation", int64_t{-1})] = {
        x.value("last_step_at", x.value("ready_s", 0.0)),
        std::max<int64_t>(0, x.value("resume_step", int64_t{0})), x.value("last_step", int64_t{0})};
    const double ready = x.value("ready_s", -1.0);
    const int64_t resume = std::max<int64_t>(0, x.value("resume_step", int64_t{0}));
    const int64_t last = x.value("last_step", int64_t{-1});
    stalls += x.value("checkpoint_s", 0.0);
    if (ready < 0 || last <= resume) continue;
    training += x.value("last_step_at", ready) - ready;
    stepped += last - resume;
    c.checkpoints += CheckpointsWritten(resume, last, c.checkpoint_every, c.steps);
    last_at_end = last;
    last_step_at = x.value("last_step_at", ready);
  }
  if (stepped <= 0 || last_at_end != c.steps) {
    return DataError(fmt::format("--from-run {}: {} does not show the run reaching its last step",
                                 run_dir, paths.goodput()));
  }
  c.checkpoint_s = c.checkpoints > 0 ? stalls / static_cast<double>(c.checkpoints) : 0.0;
  c.live = config.resilience.mode == "live";
  double live_detect = 0, short_handed_steps_per_s = 0;
  if (c.live) {
    const int64_t world = g.contains("fault_schedule") && g["fault_schedule"].is_object()
                              ? g["fault_schedule"].value("ranks", int64_t{0})
                              : int64_t{0};
    const int64_t shard = std::max<int64_t>(1, config.parallelism.data_parallel_shard);
    c.replica_groups = config.parallelism.data_parallel_replicate > 0
                           ? config.parallelism.data_parallel_replicate
                           : world / shard;
    if (c.replica_groups < 2) {
      return DataError(fmt::format(
          "--from-run {}: a live run needs at least 2 data-parallel replicas; {} gives {}", run_dir,
          paths.config(), c.replica_groups));
    }
    short_handed_steps_per_s = ReadLiveRecoveries(g, spans, &c, &live_detect);
    if (c.short_handed_steps >= stepped) {
      return DataError(fmt::format(
          "--from-run {}: the run never trained with every replica in; the model needs a full "
          "quorum's step time",
          run_dir));
    }
  }
  // The final save's stall came after the last step; the others within the steps' span. Live:
  // the short-handed stretches are left out (their speed is measured apart).
  c.step_s = std::max(0.0, training - (stalls - c.checkpoint_s) - c.short_handed_s) /
             static_cast<double>(stepped - c.short_handed_steps);
  // Steps per second short-handed over a full quorum's: the share of its throughput.
  c.short_handed_share = short_handed_steps_per_s * c.step_s;
  c.fixed_s =
      std::max(0.0, gens.front().value("ready_s", 0.0) - gens.front().value("start_s", 0.0)) +
      std::max(0.0, c.wall_s - last_step_at);
  // Each restart runs from its verdict until the next generation is ready. A failure during it
  // (in a rank's setup) starts it over, and the restart it cut short ends at the same ready: its
  // recovery_s holds the next one's whole restart too. The model charges a restart cut short its
  // time until the failure and then a whole restart again, so the cost it needs is a whole
  // restart's: a restart cut short is seen for as long as it ran (RestartCost).
  struct Restart {
    double failed_at, verdict_at, ready_at;
  };
  std::vector<Restart> restarts;
  for (const auto& f : g["failures"]) {
    const double recovery = f.value("recovery_s", -1.0);
    if (recovery < 0) continue;  // not restarted from (found at a resume, or the last)
    ++c.failures;
    ++c.failures_by_kind[f.value("kind", std::string("?"))];
    const double verdict = f.value("time_s", 0.0), detect = f.value("detection_s", 0.0);
    c.detect_s += detect;
    restarts.push_back({verdict - detect, verdict, verdict + recovery});
  }
  std::sort(restarts.begin(), restarts.end(),
            [](const Restart& a, const Restart& b) { return a.failed_at < b.failed_at; });
  std::vector<RestartSeen> seen;
  for (size_t i = 0; i < restarts.size(); ++i) {
    const Restart& r = restarts[i];
    // Cut short: the next failure's restart ended at the same ready (no generation became ready
    // between them). A NaN requested during a restart strikes at the first step after it, with
    // a ready of its own.
    if (i + 1 < restarts.size() && std::abs(restarts[i + 1].ready_at - r.ready_at) < 1e-3) {
      ++c.restarts_cut_short;
      seen.push_back({std::max(0.0, restarts[i + 1].failed_at - r.verdict_at), false});
    } else {
      seen.push_back({r.ready_at - r.verdict_at, true});
    }
  }
  c.restart_s = RestartCost(seen);
  c.detect_s += live_detect;
  if (c.failures + c.live_failures > 0) {
    c.detect_s /= static_cast<double>(c.failures + c.live_failures);
  }
  const nlohmann::json schedule = g.value("fault_schedule", nlohmann::json());
  if (schedule.is_object() && schedule.contains("rates_per_hour") &&
      schedule.contains("injected")) {
    c.schedule = schedule.value("spec", std::string());
    for (const auto& [kind, rate] : schedule["rates_per_hour"].items()) {
      c.schedule_rate_per_hour += rate.get<double>();
    }
    c.exposure_s = schedule.value("exposure_s", 0.0);
    std::vector<std::pair<double, ArrivalKind>> arrivals;
    for (const auto& a : schedule["injected"]) {
      const std::string kind = a.value("kind", std::string("crash"));
      arrivals.emplace_back(a.value("applied_exposure_s", a.value("exposure_s", 0.0)),
                            kind == "nan"    ? ArrivalKind::kNan
                            : kind == "hang" ? ArrivalKind::kHang
                                             : ArrivalKind::kCrash);
    }
    AppendByTime(std::move(arrivals), &c.arrivals, &c.arrival_kinds);
  }
  c.ranks = schedule.is_object() ? schedule.value("ranks", int64_t{1}) : int64_t{1};
  return c;
}

Result<RunPrediction> PredictRun(const RunCosts& costs, const std::optional<FailureRate>& rate,
                                 int64_t runs, uint64_t seed) {
  RunPrediction p;
  if (rate) {
    p.rate = *rate;
    p.rate_source = "--failure-rate";
  } else if (!costs.schedule.empty()) {
    p.rate.per_node_hour = costs.schedule_rate_per_hour;
    p.rate.text = fmt::format("{:g}/node-hour", costs.schedule_rate_per_hour);
    p.rate_source = "the run's poisson schedule";
  } else {
    // Observed: the failures over the time the job was exposed to them.
    const int64_t failures = costs.failures + costs.live_failures;
    const double exposed =
        costs.wall_s - costs.fixed_s - costs.detect_s * static_cast<double>(failures);
    if (failures == 0 || exposed <= 0) {
      return InvalidArgument(fmt::format(
          "--from-run {}: the run had no failures to measure a rate from; give --failure-rate",
          costs.run_dir));
    }
    p.rate.per_node_hour = static_cast<double>(failures) / exposed * kHour;
    p.rate.text = fmt::format("{:.3g}/node-hour", p.rate.per_node_hour);
    p.rate_source = "observed";
  }
  SimulationConfig& c = p.config;
  // One node: the rate is the job's. Live: one simulated node per replica group, sharing it.
  const int64_t nodes = costs.live ? costs.replica_groups : 1;
  c.gpus = nodes;
  c.gpus_per_node = 1;
  c.rate = p.rate;
  if (nodes > 1 && !rate) {
    c.rate.per_node_hour /= static_cast<double>(nodes);
    c.rate.text = fmt::format("{:.4g}/node-hour", c.rate.per_node_hour);
  }
  if (costs.live) {
    c.replica_groups = costs.replica_groups;
    c.heal_time = costs.heal_s;
    c.short_handed_share = costs.short_handed_share;
  }
  c.checkpoint_cost = costs.checkpoint_s;
  c.detect_time = costs.detect_s;
  c.restart_cost = costs.restart_s;
  c.interval = static_cast<double>(costs.checkpoint_every) * costs.step_s;
  c.duration = static_cast<double>(costs.steps) * costs.step_s;
  c.spares = 0;  // the launcher restarts in place: no swap, no repair to wait for
  c.swap_time = c.repair_time = 0;
  c.runs = runs;
  c.seed = seed;
  TENAX_RETURN_IF_ERROR(Simulate(c).status());  // refuses what could never finish
  p.effective = EffectiveOver(costs, c, &p.wall);
  if (!costs.schedule.empty() && !rate) {
    // The run's failures at their own times. Where each fell inside its checkpoint interval
    // decides the work it lost, and the two clocks (the launcher's exposure, the simulator's
    // time at risk) agree to a fraction of an interval only: each replay moves every failure by
    // a uniform draw within half an interval either way, and the work lost is averaged over
    // kReplays of them.
    constexpr int kReplays = 200;
    Rng rng(DeriveSeed(seed, 1));
    std::vector<double> effective;
    RunOutcome sum;
    for (int i = 0; i < kReplays; ++i) {
      SimulationConfig replay = c;
      std::vector<std::pair<double, ArrivalKind>> moved;
      for (size_t k = 0; k < costs.arrivals.size(); ++k) {
        moved.emplace_back(std::max(0.0, costs.arrivals[k] + (rng.Uniform() - 0.5) * c.interval),
                           costs.arrival_kinds[k]);
      }
      AppendByTime(std::move(moved), &replay.arrivals, &replay.arrival_kinds);
      replay.arrivals.push_back(INFINITY);  // none after the run's own
      const RunOutcome o = SimulateRun(replay, 0);
      effective.push_back(Effective(costs, o));
      sum.wall += o.wall / kReplays;
      sum.lost += o.lost / kReplays;
      sum.checkpointing += o.checkpointing / kReplays;
      sum.restarting += o.restarting / kReplays;
      sum.failures += o.failures;
    }
    sum.failures = (sum.failures + kReplays / 2) / kReplays;
    p.replay = sum;
    p.replay_effective = Summarize(effective).mean;
  }
  const double mtbf = JobMtbfSeconds(c.rate, nodes);
  // Daly folds detection into the restart; the fixed start-up and shut-down are added as above.
  p.daly_effective_closed =
      costs.productive_s /
      (costs.fixed_s + DalyExpectedWallTime(c.duration, c.interval, c.checkpoint_cost,
                                            c.detect_time + c.restart_cost, mtbf));
  p.daly_interval_s = std::min(DalyInterval(c.checkpoint_cost, mtbf), c.duration);
  p.daly_interval_steps =
      std::max<int64_t>(1, std::llround(p.daly_interval_s / std::max(costs.step_s, 1e-9)));
  SimulationConfig daly = c;
  daly.interval = static_cast<double>(p.daly_interval_steps) * costs.step_s;
  TENAX_RETURN_IF_ERROR(Simulate(daly).status());
  p.daly_effective = EffectiveOver(costs, daly);
  return p;
}

std::string FromRunText(const RunCosts& k, const RunPrediction& p) {
  std::string kinds;
  for (const auto& [kind, n] : k.failures_by_kind) {
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", kind, n);
  }
  std::string out = fmt::format(
      "tenax plan --from-run {}\n"
      "measured (goodput.json, config.toml):\n"
      "  {} steps at {:.4f} s (overheads between steps included): {} of computation\n"
      "  checkpoint every {} steps ({}), stall {:.4f} s ({} saves)\n"
      "  {} failure(s){}{}; detection {:.3f} s and restart {:.3f} s on average{}\n"
      "  start-up and shut-down {:.2f} s; wall {:.2f} s\n"
      "  failure rate {} ({})\n\n",
      k.run_dir, k.steps, k.step_s, FormatDuration(p.config.duration), k.checkpoint_every,
      FormatDuration(p.config.interval), k.checkpoint_s, k.checkpoints,
      k.failures + k.live_failures, kinds.empty() ? "" : " (", kinds.empty() ? "" : kinds + ")",
      k.detect_s, k.restart_s,
      k.restarts_cut_short > 0
          ? fmt::format(" (a whole one; {} cut short by a failure during {})", k.restarts_cut_short,
                        k.restarts_cut_short == 1 ? "it" : "them")
          : std::string(),
      k.fixed_s, k.wall_s, p.rate.text, p.rate_source);
  if (k.live) {
    // The line above counts the restarts; these the failures the others trained through.
    out.insert(
        out.size() - 1,
        fmt::format(
            "  live recovery over {} replica groups: {} failure(s) trained through, {} healed "
            "{:.3f} s after the verdict on average; {} step(s) short-handed in {:.2f} s, at {:.2f} "
            "of a full quorum's speed\n",
            k.replica_groups, k.live_failures, k.heals, k.heal_s, k.short_handed_steps,
            k.short_handed_s, k.short_handed_share));
  }
  out += fmt::format("effective training time (productive / wall):\n  measured   {:6.2f} %\n",
                     100 * k.measured_effective);
  if (p.replay_effective) {
    out +=
        fmt::format("  predicted  {:6.2f} % for this run's own failure times ({:+.2f} pp)\n",
                    100 * *p.replay_effective, 100 * (k.measured_effective - *p.replay_effective));
  }
  out += fmt::format(
      "  predicted  {:6.2f} % at the rate, over {} simulated runs (5th-95th percentile "
      "{:.2f} - {:.2f} %)\n",
      100 * p.effective.mean, p.config.runs, 100 * p.effective.p05, 100 * p.effective.p95);
  out += fmt::format("  predicted  {:6.2f} % at the rate, by Daly's closed form{}\n",
                     100 * p.daly_effective_closed, k.live ? " (restart recovery)" : "");
  out += fmt::format(
      "\nre-plan: Daly's interval for these costs at this rate is {} steps ({}): predicted "
      "{:.2f} % (now {} steps: {:.2f} %)\n",
      p.daly_interval_steps, FormatDuration(p.daly_interval_s), 100 * p.daly_effective.mean,
      k.checkpoint_every, 100 * p.effective.mean);
  const std::string live =
      k.live ? fmt::format(" --replica-groups {} --heal-time {:g}s --short-handed-share {:g}",
                           p.config.replica_groups, p.config.heal_time, p.config.short_handed_share)
             : "";
  out += fmt::format(
      "the same with tenax simulate: tenax simulate --gpus {} --gpus-per-node 1 --failure-rate "
      "{:g}/node-hour --checkpoint-cost {:g}s --detect-time {:g}s --restart-cost {:g}s "
      "--interval {:g}s --duration {:g}s --swap-time 0s --repair-time 0s{} --runs {} --seed {}\n"
      "  (its effective % leaves out the run's {:.2f} s of start-up and shut-down)\n",
      p.config.gpus, p.config.rate.per_node_hour, p.config.checkpoint_cost, p.config.detect_time,
      p.config.restart_cost, p.config.interval, p.config.duration, live, p.config.runs,
      p.config.seed, k.fixed_s);
  return out;
}

nlohmann::json FromRunJson(const RunCosts& k, const RunPrediction& p) {
  auto summary = [](const Summary& s) {
    return nlohmann::json{
        {"mean", s.mean}, {"stddev", s.stddev}, {"p05", s.p05}, {"p50", s.p50}, {"p95", s.p95}};
  };
  return {
      {"run_dir", k.run_dir},
      {"measured",
       {{"steps", k.steps},
        {"step_s", k.step_s},
        {"productive_s", k.productive_s},
        {"checkpoint_every", k.checkpoint_every},
        {"checkpoint_s", k.checkpoint_s},
        {"checkpoints", k.checkpoints},
        {"failures", k.failures},
        {"failures_by_kind", k.failures_by_kind},
        {"detect_s", k.detect_s},
        {"restart_s", k.restart_s},
        {"restarts_cut_short", k.restarts_cut_short},
        {"fixed_s", k.fixed_s},
        {"wall_s", k.wall_s},
        {"effective", k.measured_effective},
        {"schedule", k.schedule},
        {"exposure_s", k.exposure_s},
        {"arrivals", k.arrivals},
        {"live", k.live ? nlohmann::json{{"replica_groups", k.replica_groups},
                                         {"failures", k.live_failures},
                                         {"heals", k.heals},
                                         {"heal_s", k.heal_s},
                                         {"short_handed_share", k.short_handed_share},
                                         {"short_handed_s", k.short_handed_s},
                                         {"short_handed_steps", k.short_handed_steps}}
                        : nlohmann::json()}}},
      {"failure_rate_per_hour", p.rate.per_node_hour},
      {"rate_source", p.rate_source},
      {"runs", p.config.runs},
      {"seed", p.config.seed},
      {"predicted", summary(p.effective)},
      {"predicted_wall_s", summary(p.wall)},
      {"daly_closed_form", p.daly_effective_closed},
      {"replay", p.replay_effective ? nlohmann::json(*p.replay_effective) : nlohmann::json()},
      {"replay_split", p.replay_effective ? nlohmann::json{{"wall_s", k.fixed_s + p.replay.wall},
                                                           {"lost_s", p.replay.lost},
                                                           {"checkpoint_s", p.replay.checkpointing},
                                                           {"restarting_s", p.replay.restarting},
                                                           {"failures", p.replay.failures}}
                                          : nlohmann::json()},
      {"daly_interval_steps", p.daly_interval_steps},
      {"daly_predicted", summary(p.daly_effective)}};
}

}  // namespace tenax::plan
