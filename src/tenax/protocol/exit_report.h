// Exit reports: a rank that is about to exit with a failure says why first, so the launcher can
// tell the first failure from its consequences. When one rank dies, its peers' collectives lose
// their partner a few milliseconds later and they die too; each of them reports itself as
// secondary (kind peer-lost, exit code kPeerLost), and the launcher never blames a secondary
// (launch/attribution.h). A process killed from outside (SIGKILL, an OOM kill) cannot report:
// it is then the only failed rank that did not call itself secondary.
//
// File: <heartbeat folder>/exit-rank-R.json, one JSON object written with temp file + rename
// (no fsync: it only matters while the machine is up):
//   {"generation", "rank", "pid", "code", "kind", "secondary", "cause", "wall_s", "mono_s"}
// Thread safety: Report and the terminate handler may run on any thread; each writes one file.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

#include "tenax/protocol/protocol.h"

namespace tenax::protocol {

struct ExitReport {
  int generation = 0;
  int rank = -1;
  int pid = 0;
  int code = 0;  // the exit code the process is about to end with (128 + N for a signal)
  FailureKind kind = FailureKind::kCrash;
  bool secondary = false;  // a consequence of another rank's failure (kPeerLost, and others)
  std::string cause;       // one line
  // The rank knows where it failed (an injected crash at a step's start, outside any checkpoint
  // code): the launcher keeps `kind` as it is instead of refining it from the last heartbeat's
  // phase, which may be a moment old.
  bool exact = false;
  double wall_s = 0;  // WallNow() when written
  double mono_s = 0;  // MonotonicNow() when written (comparable on one machine)
};

std::optional<ExitReport> ReadExitReport(const std::string& dir, int rank);

// Whether an error message from a collective or the rendezvous store means the other side went
// away (Gloo: "Connection closed by peer", "Connection reset by peer", a broken pipe, a timed-out
// pair; a live group's collective abandoned because the launcher dropped a member it waited on;
// the c10d store: a failed recv; NCCL: ncclRemoteError, "remote process exited or there was
// a network error", a socket closed by the remote peer, a communicator aborted after a peer's
// failure). Such a failure is secondary.
bool IsPeerLostError(std::string_view message);
// The status of a rank whose collective failed with such a `message` (kPeerLost, exit code 10):
// one wording for every place that turns one into a status.
Status PeerLostError(const std::string& message);

// The rank side: writes this process's report. Disabled (no-op) without a heartbeat folder.
class ExitReporter {
 public:
  ExitReporter() = default;
  ExitReporter(std::string dir, int rank, int generation)
      : dir_(std::move(dir)), rank_(rank), generation_(generation) {}
  ExitReporter(const ExitReporter& o) : dir_(o.dir_), rank_(o.rank_), generation_(o.generation_) {}
  ExitReporter& operator=(const ExitReporter& o) {
    dir_ = o.dir_;
    rank_ = o.rank_;
    generation_ = o.generation_;
    reported_code_ = o.reported_code_.load();
    return *this;
  }

  bool enabled() const { return !dir_.empty(); }
  int rank() const { return rank_; }
  // The code of the first report this process wrote (0: none yet). A process that reported keeps
  // its word: the terminate handler then exits with this code instead of reporting a crash of
  // the teardown that follows a failure.
  int reported_code() const { return reported_code_.load(); }
  // `secondary`: this rank fails because another one did (always so for kPeerLost), e.g. every
  // rank sees the NaN that one rank's loss brought into the all-reduce.
  void Report(int code, FailureKind kind, std::string_view cause, bool secondary = false,
              bool exact = false) const;

 private:
  std::string dir_;
  int rank_ = -1;
  int generation_ = 0;
  mutable std::atomic<int> reported_code_{0};
};

// Makes std::terminate (an exception escaping any thread, e.g. Gloo's transport thread throwing
// "Connection closed by peer") end the process with a report: a peer-lost error exits with
// kPeerLost as secondary; anything else reports a crash naming the exception and aborts (134).
// `reporter` must outlive the process's threads (it is read by the handler); null: no report.
void InstallTerminateHandler(const ExitReporter* reporter);

}  // namespace tenax::protocol
