// Deliberate failures for testing recovery (`tenax launch --inject SPEC`, documented in
// docs/launcher_protocol.md). The launcher parses SPEC, checks that every fault can fire in this
// job (ValidateFaults: ranks inside the world, steps inside the run, generations within
// --max-restarts) and passes it to the ranks (RankContext::inject). Each rank builds a
// FaultInjector with the faults of its rank and generation; the trainer calls its hooks at fixed
// points, and crashes by time fire from a timer thread wherever the rank is. Every fault that
// fires is first recorded in the heartbeat folder (FiredFaultsPath), and a crash first writes
// its exit report, so the launcher knows what happened and can say at the end which faults
// never fired (UnfiredFaults: an error, the test asked for something that did not happen).
// A fault fires only in the launch generation it names (default 0, the first), so the restarted
// job runs clean and reaches the same weights as an uninterrupted run; gen=all fires in every
// generation (a fault that a restart does not cure, like a bad batch).
// Grammar: FAULT[,FAULT...] where
//   FAULT = crash:rank=R:(step=S|time=T)[:how=kill|exit][:code=N][:gen=G]
//                                                  step=0: in its setup, before it joins
//                                                  its groups (FaultInjector::OnSetup)
//         | hang:rank=R:step=S[:gen=G]            blocks right before the gradient all-reduce
//         | stop:rank=R:step=S[:gen=G]            stops itself (SIGSTOP) at the same point: no
//                                                  signal handler runs until SIGCONT
//         | slow:rank=R:factor=F[:from=S][:gen=G] step compute takes F times longer from step S
//         | nan:rank=R:step=S[:gen=G]              the step's loss becomes NaN
//         | ckpt-fail:step=S[:rank=R][:gen=G]      writing checkpoint S fails with an I/O error
//         | ckpt-corrupt:step=S[:gen=G]            committed checkpoint S gets a flipped byte
//         | kill-in-ckpt:rank=R:step=S[:at=written|fenced][:gen=G]
//                                                  SIGKILL after writing S's files, before the
//                                                  commit (at=written), or (several nodes) once
//                                                  the fence recorded the commit in etcd, before
//                                                  the committing rank's folder has it (at=fenced)
//         | spike:rank=R:step=S[:factor=F][:gen=G] rank R's loss at step S is reported F times
//                                                  larger (default 100; the gradients are not)
//         | push-loss:rank=R[:gen=G]               several nodes: the node agent of rank R's node
//                                                  drops its replica pushes (they never reach the
//                                                  next node's RAM), like a node lost before any
//                                                  push landed; fired by the agent, not the rank
//         | exit-hang:rank=R[:gen=G]               blocks forever once its work is done (last
//                                                  step, final checkpoint, `finish` beat), like a
//                                                  teardown that never returns
//         | exit-crash:rank=R[:code=N][:gen=G]     exits with code N (default 1) at that point
//         | await-join:rank=R:step=S[:gen=G]      resilience.mode = "live": holds rank R at the
//                                                  start of step S until every rank is back in
//                                                  the group (a replacement announced), so a
//                                                  short test run sees it join
//         | heal-fail:rank=R[:at=warmup|form|transfer][:how=kill|stop][:gen=G]
//                                                  resilience.mode = "live": the first
//                                                  replacement of rank R dies (kill: SIGKILL) or
//                                                  stops itself (stop: SIGSTOP) while it heals:
//                                                  in its warm-up step (warmup), before it
//                                                  connects to the group that takes it
//                                                  in (form), or once the first tensor of the
//                                                  state has reached it (transfer, the default);
//                                                  the replacement started after it heals
//         | sdc:rank=R:step=S[:where=grad|activation|weight][:gen=G]
//                                                  silent data corruption: from step S on,
//                                                  rank R's device miscomputes one bit, like a
//                                                  defective unit that keeps failing: a bit of
//                                                  its first gradient bucket before reduction
//                                                  (grad, the default), of block 0's output
//                                                  (activation), or of a block-0 weight it
//                                                  computes with (weight: its own parameters
//                                                  once, for good; a gathered copy on every
//                                                  gather); its replays too (sdc_check.h)
//         | poisson:KIND=RATE[:KIND=RATE...][:seed=S]
//                                                  failures at random: the launcher draws them
//                                                  as a Poisson process per KIND (crash: SIGKILL,
//                                                  hang: SIGSTOP, nan: the next step's loss is
//                                                  NaN) at RATE (N/h, N/min or N/s) over the
//                                                  job's exposed time, on a rank drawn at random
//                                                  (launch/fault_schedule.h); every generation
// Non-goals: faults in data loading or the network itself (a dead peer is a crash here).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/protocol/exit_report.h"
#include "tenax/protocol/rank_context.h"

namespace tenax::protocol {

enum class FaultKind {
  kCrash,
  kHang,
  kStop,
  kSlow,
  kNan,
  kCkptFail,
  kCkptCorrupt,
  kKillInCkpt,
  kSpike,
  kPushLoss,
  kExitHang,
  kExitCrash,
  kAwaitJoin,
  kSdc,
  kHealFail,
  kPoisson,
};

// Where a `heal-fail` fault strikes a replacement: once it said it is ready, in its warm-up step
// (Trainer::LiveWarmUp; where it runs none, at that point), before it connects to the group that
// takes it in, or inside the state transfer (after its first tensor arrived).
enum class HealPoint { kWarmUp, kForm, kTransfer };

// Where an `sdc` fault corrupts the rank's computation.
enum class SdcSite { kGrad, kActivation, kWeight };
const char* SdcSiteName(SdcSite s);
const char* FaultKindName(FaultKind k);

// Where a checkpoint fault may strike. kWritten: after this rank wrote its files of a step,
// before the commit. kFenced (several nodes): on the committing rank, once the fence (its node
// agent) recorded the commit in etcd, before its folder has manifest.json and COMMITTED.
// kCommitted: after rank 0 committed the step.
enum class CheckpointPhase { kWritten, kFenced, kCommitted };

struct Fault {
  FaultKind kind = FaultKind::kCrash;
  int rank = 0;
  int64_t step = 0;   // 0 with time_s > 0: a crash at a time; 0 without: in the setup
  double time_s = 0;  // seconds since the launch started (RankContext::launch_time_unix)
  double factor = 1;  // slow; spike (default 100)
  bool kill = true;   // crash: SIGKILL (how=kill) or exit with `code` (how=exit)
  // crash: where in step S it strikes: its start (at=start), its gradient reduction, once its
  // forward/backward is done and before its first reduction (at=reduce), its loss-spike record
  // (at=spike), or its evaluation, once this rank's windows are done and before the ranks combine
  // them (at=eval)
  enum class At { kStart, kReduce, kSpike, kEval } at = At::kStart;
  CheckpointPhase ckpt_at = CheckpointPhase::kWritten;  // kill-in-ckpt: kWritten or kFenced
  int code = 1;
  int generation = 0;  // kEveryGeneration: all of them
  int index = 0;       // position in the spec
  std::string text;    // the item as written
  // poisson: failures per second of exposure by kind, and the schedule's seed.
  struct Rates {
    double crash = 0, hang = 0, nan = 0;
    double total() const { return crash + hang + nan; }
  };
  Rates rates;
  uint64_t seed = 1;
  SdcSite site = SdcSite::kGrad;             // sdc
  HealPoint heal_at = HealPoint::kTransfer;  // heal-fail
  bool stop = false;                         // heal-fail: SIGSTOP (how=stop) instead of SIGKILL
  static constexpr int kEveryGeneration = -1;
};

Result<std::vector<Fault>> ParseFaults(const std::string& spec);

// What the launcher knows about the job, to refuse faults that could never fire.
struct JobShape {
  int world = 1;
  int64_t total_steps = 0;  // 0: unknown (not a `train` command)
  int max_restarts = 0;
  int nnodes = 1;                   // several: node agents with etcd (push-loss needs them)
  bool nan_restarts = false;        // training.on_nonfinite = "restart" (a poisson nan needs it)
  double restart_budget_per_s = 0;  // --restart-budget's average rate; 0: none
  bool live = false;  // resilience.mode = "live" (await-join needs it; poisson takes no nan)
  // Live: the ranks of a data-parallel replica (consecutive), lost and replaced together, so a
  // heal-fail may name any rank of a replica that loses one.
  int live_replica_ranks = 1;
};
Status ValidateFaults(const std::vector<Fault>& faults, const JobShape& job);

// One line of FiredFaultsPath.
struct FiredFault {
  int index = 0;
  int rank = 0;
  int generation = 0;
  int64_t step = 0;
};
std::vector<FiredFault> ReadFiredFaults(const std::string& heartbeat_dir);
// The faults that never fired in their generation (gen=all: in none). A poisson schedule is the
// launcher's and may rightly draw nothing in a short run: never listed.
std::vector<Fault> UnfiredFaults(const std::vector<Fault>& faults,
                                 const std::vector<FiredFault>& fired);

// The rank side. Thread safety: the hooks are called from the trainer's thread (CheckpointHook
// also from the async checkpoint writer's thread); the timer thread only fires crashes.
class FaultInjector {
 public:
  // The faults of `rank` in ctx's generation (ckpt-corrupt: rank 0's). Null when none apply
  // (including no spec). A malformed spec is InvalidArgument (the launcher validated it, so this
  // means the process was started by hand with a bad TENAX_INJECT). `reporter` writes the exit
  // report of an injected crash; it must outlive the injector.
  static Result<std::unique_ptr<FaultInjector>> Create(const RankContext& ctx, int rank,
                                                       const ExitReporter* reporter);
  ~FaultInjector();  // stops the timer
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Whether a crash is due at the start of `step` (the trainer then lets an asynchronous save
  // finish first, so that the crash is a crash and not one inside a checkpoint).
  bool CrashDue(int64_t step) const;
  // Start of every step: crash faults by step.
  void OnStepBegin(int64_t step);
  // A loss spike found at `step`, after its record is written and before the ranks meet to
  // confirm it: crash faults with at=spike (a live replacement skips one already fired in this
  // generation).
  void OnLossSpike(int64_t step);
  // An evaluation after `step`, once this rank evaluated its windows and before the ranks combine
  // them (the others then wait in that collective): crash faults with at=eval (a live replacement
  // skips one already fired in this generation).
  void OnEvaluated(int64_t step);
  // In the setup, before the rank joins its process groups (the others then wait for it to
  // join): crash faults at step 0.
  void OnSetup();
  // Right before the gradient reduction of `step`, after `compute_s` seconds of this step's
  // forward/backward: crash faults with at=reduce (a live replacement skips one already fired in
  // this generation), `slow` sleeps (factor - 1) x compute_s, `hang` blocks forever (the peers
  // then wait inside the reduction, like a stuck kernel), `stop` raises SIGSTOP (the same, and
  // the rank cannot even dump its flight record).
  void BeforeGradientReduce(int64_t step, double compute_s);
  // After the rank's `finish` beat (its work is done, `step` the last): `exit-hang` blocks forever,
  // `exit-crash` exits with its code.
  void AfterFinish(int64_t step);
  // `nan`, or the launcher's request (NanRequestPath, a poisson schedule): this step's loss
  // becomes NaN.
  bool PoisonLoss(int64_t step);
  // `await-join` at the start of `step`: true once (recorded as fired); the trainer then waits
  // for the group to be whole again (train/trainer_live.cc).
  bool AwaitJoinDue(int64_t step);
  // `sdc`: where this rank's computation is corrupted at `step` (from the fault's step on;
  // recorded as fired the first time), or none.
  std::optional<SdcSite> SdcAt(int64_t step);
  // `heal-fail` at `at`, in a replacement process (RankContext::live_join) whose fault has not
  // fired in an earlier replacement of this generation (the fired-faults file says): SIGKILL, or
  // SIGSTOP.
  void DuringHeal(HealPoint at);
  double LossFactor(int64_t step);  // `spike`: the factor this step's reported loss is scaled by
  // Checkpoint faults: `ckpt-fail` returns an I/O error (kWritten), `kill-in-ckpt` SIGKILLs the
  // rank (kWritten, or kFenced with at=fenced); `ckpt-corrupt` flips a byte of the largest file
  // in `step_dir` (kCommitted).
  Status CheckpointHook(int64_t step, CheckpointPhase phase, const std::string& step_dir);

 private:
  FaultInjector(const RankContext& ctx, int rank, const ExitReporter* reporter,
                std::vector<Fault> faults);
  void Record(const Fault& f, int64_t step);  // appends to the fired-faults file
  [[noreturn]] void Crash(const Fault& f, int64_t step, const std::string& where);
  // Crash faults of `step` at `at` (not at its start), unless a live replacement's first
  // incarnation fired it already.
  void CrashWithinStep(Fault::At at, int64_t step, const std::string& where);
  void TimerLoop(double deadline_unix, Fault f);

  // Constant after construction.
  const RankContext ctx_;
  const int rank_;
  const ExitReporter* const reporter_;
  const std::vector<Fault> faults_;

  std::mutex mu_;
  // Guarded by mu_.
  std::set<int> recorded_;  // faults already recorded (slow and spike fire repeatedly)
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread timer_;  // last: starts after everything above is ready
};

}  // namespace tenax::protocol
