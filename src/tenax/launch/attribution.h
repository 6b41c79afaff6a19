// Which rank failed first, decided from evidence rather than from the order a loop happened to
// reap children in. When one rank dies, its peers' collectives lose their partner within
// milliseconds and they die too; a naive supervisor that blames "the first child it reaped" (or
// the oldest one, on a tie) blames a healthy rank and takes a healthy slot out of service.
//
// The evidence of one generation's failure, gathered in a short window after the first death
// (the supervisor waits for it; supervisor.h):
//   - every rank that ended, with its exit code and the time the kernel reported its death;
//   - its exit report, if it wrote one (protocol/exit_report.h): the code, the kind, whether it
//     is secondary (a peer was lost: exit code kPeerLost) and when it wrote it;
//   - its last heartbeat's phase (a death inside a checkpoint is a different kind).
// The rules, in order:
//   1. A secondary end (exit code kPeerLost, or a report saying so) is never the cause.
//   2. Of the rest (primaries), the one with the earliest evidence wins: its report's time if it
//      reported (a rank reports before it exits), else its death time.
//   3. Two primaries whose evidence lies within kTieS of each other and that did not report
//      cannot be ordered: the verdict is rank -1 (undetermined) and no slot is blamed.
//   4. Only secondaries (every failed rank lost a peer, none failed on its own, e.g. the network
//      broke): rank -1.
// Pure functions on plain data: unit-tested with synthetic evidence (attribution_test.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tenax/protocol/exit_report.h"
#include "tenax/protocol/protocol.h"

namespace tenax::launch {

// Evidence times closer than this cannot be ordered (clock reads and scheduling on a loaded
// machine jitter by about a millisecond).
inline constexpr double kTieS = 0.002;

struct RankEnd {
  int rank = -1;
  int code = 0;       // exit code or 128 + signal
  double mono_s = 0;  // when the kernel reported the death (protocol::MonotonicNow)
  std::optional<protocol::ExitReport> report;       // what it said before exiting, if anything
  protocol::Phase phase = protocol::Phase::kSetup;  // its last heartbeat (kSetup: none)
  bool writing_checkpoint = false;  // its last beat said an async save was being written
  std::string host;
};

struct Verdict {
  int rank = -1;  // -1: undetermined
  int code = 0;   // the job's exit code for this failure
  protocol::FailureKind kind = protocol::FailureKind::kCrash;
  std::string cause;      // one line: "rank 1 was killed by signal 9 (Killed)"
  std::string reasoning;  // why this rank (for the log)
  std::string host;
  double mono_s = 0;  // the evidence time of the cause
};

bool IsSecondary(const RankEnd& e);
// The kind of a failed rank's end, from its report, its code and its last phase.
protocol::FailureKind ClassifyEnd(const RankEnd& e);
// `ends`: ranks that ended with a non-zero code while the generation was running (ends the
// launcher caused by stopping ranks are not evidence). Must not be empty.
Verdict AttributeFailure(const std::vector<RankEnd>& ends);

// A hang, before the flight records are read (they name the rank the others wait for and take
// precedence): the only rank at the lowest step, else the only rank that has not finished (the
// others beat `finish`: their work is done and they wait for nobody), else -1. Indices are local
// ranks; `finished` counts ranks that finished or exited 0.
int HangSuspect(const std::vector<int64_t>& last_step, const std::vector<bool>& finished);

}  // namespace tenax::launch
