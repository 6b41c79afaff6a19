// Deliberate failures for testing recovery (`tenax launch --inject SPEC`, documented in
// docs/launcher_protocol.md). The launcher validates SPEC and passes it to the ranks in
// TENAX_INJECT together with TENAX_RESTART_COUNT and TENAX_LAUNCH_TIME; the trainer and the
// checkpoint writer call the hooks below at fixed points. A fault fires only in the launch
// generation it names (default 0, the first), so the restarted job runs clean and reaches the
// same weights as an uninterrupted run; gen=all fires in every generation (a fault that a restart
// does not cure, like a bad batch).
// Grammar: FAULT[,FAULT...] where
//   FAULT = crash:rank=R:(step=S|time=T)[:how=kill|exit][:code=N][:gen=G]
//         | hang:rank=R:step=S[:gen=G]            blocks right before the gradient all-reduce
//         | slow:rank=R:factor=F[:from=S][:gen=G] step compute takes F times longer from step S
//         | nan:rank=R:step=S[:gen=G]              the step's loss becomes NaN
//         | ckpt-fail:step=S[:rank=R][:gen=G]      writing checkpoint S fails with an I/O error
//         | ckpt-corrupt:step=S[:gen=G]            committed checkpoint S gets a flipped byte
//         | kill-in-ckpt:rank=R:step=S[:gen=G]     SIGKILL after writing S's files, before commit
//         | spike:rank=R:step=S[:factor=F][:gen=G] rank R's loss at step S is reported F times
//                                                  larger (default 100; the gradients are not)
// Every hook is a no-op, one getenv, when TENAX_INJECT is unset.
// Non-goals: faults in data loading or the network itself (a dead peer is a crash here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax {

struct Fault {
  // crash | hang | slow | nan | ckpt-fail | ckpt-corrupt | kill-in-ckpt | spike
  std::string kind = "crash";
  int rank = 0;
  int64_t step = 0;     // 0 with time > 0: a crash at a wall time
  double time_s = 0;    // seconds since the launch started (TENAX_LAUNCH_TIME)
  double factor = 1;    // slow; spike (default 100)
  std::string how = "kill";
  int code = 1;
  int generation = 0;  // kEveryGeneration: all of them
  static constexpr int kEveryGeneration = -1;
};

Result<std::vector<Fault>> ParseFaults(const std::string& spec);

// Start of every step: crash faults (by step or by time). A bad spec here is a bug (the launcher
// validated it): it aborts.
void MaybeInjectFault(int rank, int64_t step);
// Whether MaybeInjectFault(rank, step) would crash now. The trainer then first lets an
// asynchronous checkpoint save finish, so that an injected crash is never mistaken for a crash
// in a checkpoint (the launcher cannot tell which thread was running).
bool CrashDue(int rank, int64_t step);

// Right before the gradient all-reduce of `step`, after `compute_s` seconds of this step's
// forward/backward: `slow` sleeps (factor - 1) x compute_s, `hang` blocks forever (the peers then
// wait inside the all-reduce, like a stuck kernel).
void BeforeGradientReduce(int rank, int64_t step, double compute_s);

// True when `nan` asks this rank's loss at `step` to become NaN.
bool PoisonLoss(int rank, int64_t step);

// The factor `spike` multiplies this rank's reported loss at `step` by (1 when none).
double LossFactor(int rank, int64_t step);

// Checkpoint faults. kWritten: after this rank wrote its files of `step`, before the commit
// (`ckpt-fail` returns an I/O error, `kill-in-ckpt` SIGKILLs the rank). kCommitted: after rank 0
// committed `step` in `step_dir` (`ckpt-corrupt` flips one byte of its largest file, so a later
// resume must detect the damage and fall back).
enum class CheckpointPhase { kWritten, kCommitted };
Status CheckpointFault(int rank, int64_t step, CheckpointPhase phase, const std::string& step_dir);

}  // namespace tenax
