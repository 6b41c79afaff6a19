// The supervisor's side of the poisson fault schedule (fault_schedule.h): moving its clock and
// striking the ranks; apart from supervisor.cc, which is the supervision loop itself.
#include <signal.h>

#include <algorithm>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/supervisor.h"
#include "tenax/protocol/heartbeat.h"

namespace tenax::launch {

void Supervisor::ScheduleTick(int gen) {
  // The lead rank's newest beat, read now: the exposure ends with the run's last step, and an
  // arrival after it must not strike (the heartbeat check runs only every kBeatCheckS).
  const std::optional<protocol::Beat> lead = CurrentBeat(gen, 0);
  ever_ready_ = ever_ready_ || lead.has_value();
  const bool over =
      std::max(goodput_.step(), lead ? lead->step : int64_t{-1}) >= job_.total_steps ||
      (lead && lead->phase == protocol::Phase::kFinish);
  schedule_->Tick(Elapsed(), ever_ready_ && !over);
  const std::optional<Arrival> a = schedule_->Due();
  if (!a || g_.stopping || over) return;
  const int local = a->local_rank;
  if (job_.live && !LiveInQuorum(Rank(local))) {
    // Its replica is out of the quorum (being replaced): the simulator draws no failure there.
    log::Info(
        "launch: fault schedule: failure {} would strike rank {}, which is being replaced; "
        "skipped",
        a->index, Rank(local));
    schedule_->Skipped(Elapsed(), Rank(local), "out of the live quorum: being replaced");
    return;
  }
  const pid_t pid = g_.pids[local];
  if (pid <= 0 || Done(local)) return;
  const std::optional<protocol::Beat> beat = CurrentBeat(gen, local);
  std::string how;
  switch (a->kind) {
    case ScheduledKind::kCrash:
      how = "SIGKILL";
      ::kill(pid, SIGKILL);
      break;
    case ScheduledKind::kHang:
      // Only once the generation has finished a step: before that the silence is judged by
      // --startup-timeout (a rank stopped between its ready beat and its first step left its
      // peer waiting in a collective for two minutes).
      if (!beat || !g_.any_step_done) return;
      how = "SIGSTOP";
      ::kill(pid, SIGSTOP);
      break;
    case ScheduledKind::kNan: {
      how = "NaN loss at its next step";
      const Status st =
          LocalFs().WriteFileAtomic(protocol::NanRequestPath(hb_dir_, Rank(local)), "nan\n");
      if (!st.ok()) {
        log::Warn("launch: fault schedule: could not request a NaN: {}", st.message());
        return;
      }
      break;
    }
  }
  const int64_t step = beat ? beat->step : -1;
  log::Warn(
      "launch: fault schedule: failure {} ({}) strikes rank {} (pid {}, step {}): {}; due at "
      "{:.2f}s of exposure",
      a->index, ScheduledKindName(a->kind), Rank(local), pid, step, how, a->exposure_s);
  schedule_->Applied(Elapsed(), gen, Rank(local), step, how);
}

}  // namespace tenax::launch
