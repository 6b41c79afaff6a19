// The launcher's side of `--inject poisson:...` (protocol/fault_injection.h): failures at random,
// drawn as the planner's failure simulator assumes them (plan/simulate.h), so that a run's
// measured goodput can be set against the planner's prediction for the same failures
// (`tenax plan --from-run`, docs/planner.md).
//
// Failures arrive as a Poisson process at the sum of the kinds' rates; each is of a kind drawn in
// proportion to its rate and strikes a local rank drawn uniformly. The process runs on an
// *exposure clock*: launch time while the job is exposed (from the first generation ready to
// train until the run's last step), except between an injected failure and the launcher's
// verdict on it, as the simulator draws no failure while one goes undetected. The arrivals, in
// exposed seconds, are a function of the seed alone; what each one hits depends on the run.
// Thread safety: none; the supervision loop owns it.
// Non-goals: several nodes (each node's agent would need its share of the rate), failures while
// no launcher runs, correlated failures.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/random.h"
#include "tenax/protocol/fault_injection.h"

namespace tenax::launch {

enum class ScheduledKind { kCrash, kHang, kNan };
const char* ScheduledKindName(ScheduledKind k);  // crash | hang | nan

// One failure of the schedule.
struct Arrival {
  int index = 0;  // 0, 1, ... in order of arrival
  ScheduledKind kind = ScheduledKind::kCrash;
  int local_rank = 0;
  double exposure_s = 0;  // when it is due, on the exposure clock
};

class FaultSchedule {
 public:
  // `poisson`: a parsed poisson item; `ranks`: the local ranks a failure may strike.
  FaultSchedule(const protocol::Fault& poisson, int ranks);
  FaultSchedule(const FaultSchedule&) = delete;
  FaultSchedule& operator=(const FaultSchedule&) = delete;

  // Moves the clock to `now` (launch seconds). The time since the previous call counts when the
  // previous call said `exposed` and no injected failure awaits its verdict.
  void Tick(double now, bool exposed);
  // The arrival due at the clock's current reading and not yet applied, if any.
  std::optional<Arrival> Due() const;
  // Launch seconds from `now` until the next arrival is due if the clock runs on (a bound for the
  // supervision loop's wait); infinity while the clock stands.
  double SecondsUntilDue(double now) const;
  // The due arrival struck rank `rank` of `generation` at launch time `now`, its newest step
  // being `step`; `how` says what was done. The clock stands until Resolved.
  void Applied(double now, int generation, int rank, int64_t step, const std::string& how);
  // The due arrival fell on rank `rank`, which is out of the live quorum (resilience.mode =
  // "live": its replica is being replaced): it is consumed without striking and recorded as
  // skipped, and the clock runs on. The simulator draws failures on the groups in the quorum only,
  // at the job's rate times their share; with ranks drawn uniformly, skipping the others is that
  // thinning of the process.
  void Skipped(double now, int rank, const std::string& why);
  // The index of the applied arrival whose verdict is awaited, or -1.
  int awaiting() const { return awaiting_; }
  // The launcher acted at `now` (a verdict, or the generation ended without one): the clock runs
  // again from then.
  void Resolved(double now);

  double exposure_s() const { return exposure_; }
  // goodput.json `fault_schedule`: the spec, the rates (per hour), the seed, the exposure and one
  // entry per applied arrival ({index, kind, rank, generation, step, exposure_s, time_s (launch
  // seconds), how}) under `injected`, and the skipped ones ({index, kind, rank, exposure_s,
  // time_s, why}) under `skipped`.
  nlohmann::json Report() const;

 private:
  void Draw();  // the next arrival after next_

  // Constant after construction.
  const protocol::Fault spec_;
  const int ranks_;

  Rng rng_;
  Arrival next_;
  double exposure_ = 0;   // exposed seconds so far, at last_tick_
  double last_tick_ = 0;  // launch seconds
  bool exposed_ = false;  // whether the time since last_tick_ counts
  int awaiting_ = -1;     // the applied arrival whose verdict is awaited
  nlohmann::json applied_ = nlohmann::json::array();
  nlohmann::json skipped_ = nlohmann::json::array();
};

}  // namespace tenax::launch
