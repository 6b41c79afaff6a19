// `tenax plan --from-run RUN`: the planner's failure model set against a finished run, and a
// re-plan from what the run measured. The run folder's goodput.json (launch/goodput.h) and
// config.toml give the model's inputs as measured: the time per step, the checkpoint interval and
// stall, each failure's detection and restart times, the start-up and shut-down. The failure rate
// is the run's poisson schedule's (`tenax launch --inject poisson:...`), or the one given, or the
// one observed. The failure simulator (simulate.h) then predicts the effective training time
//   - over many runs at that rate: a distribution, what a plan can promise, and
//   - for the run's own failure times (a replay of its schedule): the model's error without the
//     luck of the draw, which is what must stay within 2 percentage points (docs/planner.md).
// With resilience.mode = "live" the simulator's live model (SimulateLiveRun) is fed the replica
// groups, the healing time and the short-handed quorum's speed as measured.
// Non-goals: runs of several launches (the time between them is not modelled), runs whose
// checkpoint interval changed as they went (checkpoint.interval = "auto").
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/plan/failure.h"
#include "tenax/plan/simulate.h"

namespace tenax::plan {

// What a finished run measured, in the simulator's terms.
struct RunCosts {
  std::string run_dir;
  int64_t ranks = 1;             // the processes of the job (one node)
  int64_t steps = 0;             // training.steps
  int64_t checkpoint_every = 0;  // checkpoint.interval, in steps
  // Launch seconds per step while training (live: with every replica in), overheads between
  // steps included.
  double step_s = 0;
  double productive_s = 0;  // goodput.json productive: the steps' own time
  double checkpoint_s = 0;  // stall per checkpoint
  int64_t checkpoints = 0;  // checkpoints written, redone ones included
  double detect_s = 0;      // mean over the failures restarted or (live) recovered from
  // Mean, from the verdict to the next generation ready to train, of a restart no failure during
  // it (in a rank's setup) cut short and started over (RestartCost).
  double restart_s = 0;
  int64_t restarts_cut_short = 0;
  double fixed_s = 0;    // the first start-up, and the shut-down after the last step
  int64_t failures = 0;  // failures that were restarted from (live: and recovered from)
  std::map<std::string, int> failures_by_kind;
  double wall_s = 0;
  double measured_effective = 0;  // goodput.json effective_training_ratio
  // resilience.mode = "live": the failures the others trained through (live_recoveries with a
  // culprit of their own, HSDP partners killed with them left out) and what they cost.
  bool live = false;
  int64_t replica_groups = 0;  // data-parallel replicas
  int64_t live_failures = 0;
  int64_t heals = 0;  // of them, replacements that healed
  double heal_s = 0;  // mean, from the verdict until the replacement healed
  // The steps the quorum ran short-handed over the seconds it took (from the verdicts until the
  // replacements healed, checkpoint stalls left out), as a share of a full quorum's steps in that
  // time; measured over the recoveries that did not overlap another.
  double short_handed_share = 0;
  double short_handed_s = 0;  // seconds from failures until heals (or discards), merged
  int64_t short_handed_steps = 0;
  // The run's poisson schedule, if it had one.
  std::string schedule;  // its spec; empty: none
  double schedule_rate_per_hour = 0;
  double exposure_s = 0;
  std::vector<double> arrivals;  // exposure seconds at which its failures struck, ascending
  std::vector<ArrivalKind> arrival_kinds;  // and what each was
};

// A restart as a run saw it: `whole`, from its verdict until the next generation was ready;
// else cut short by a failure during it after `seconds` (how long it would have taken is unseen).
struct RestartSeen {
  double seconds = 0;
  bool whole = true;
};

// The mean time of a whole restart from restarts some of which were cut short: the Kaplan-Meier
// estimate (failures strike at random, whatever a restart's length, so a cut-short restart tells
// only that it would have taken longer than it ran). The mean over the whole ones alone would be
// short: the longer a restart, the likelier a failure cuts it. Restricted to the longest seen
// (0 for none).
double RestartCost(std::vector<RestartSeen> seen);

// Reads RUN/goodput.json and RUN/config.toml. Errors name the file and what is missing.
Result<RunCosts> ReadRunCosts(const std::string& run_dir);

struct RunPrediction {
  FailureRate rate;
  std::string rate_source;           // "the run's poisson schedule", "--failure-rate", "observed"
  SimulationConfig config;           // what was simulated (duration = steps x step_s)
  Summary effective;                 // over config.runs simulated runs at the rate
  Summary wall;                      // their wall times (the run's start-up and shut-down apart)
  double daly_effective_closed = 0;  // Daly's closed form at the rate (what `plan` prints)
  std::optional<double> replay_effective;  // the run's own failure times
  RunOutcome replay;                       // the replays' mean time split (failures: rounded mean)
  double daly_interval_s = 0;
  int64_t daly_interval_steps = 0;
  Summary daly_effective;  // at Daly's interval for the measured costs
};

// `rate`: overrides the schedule's (or the observed) rate; `runs` and `seed` as `tenax simulate`.
Result<RunPrediction> PredictRun(const RunCosts& costs, const std::optional<FailureRate>& rate,
                                 int64_t runs, uint64_t seed);

// The report `tenax plan --from-run` prints, and its JSON.
std::string FromRunText(const RunCosts& costs, const RunPrediction& p);
nlohmann::json FromRunJson(const RunCosts& costs, const RunPrediction& p);

}  // namespace tenax::plan
