// Flight recorder for collectives (docs/flight_recorder.md): each rank keeps a ring buffer of
// its last N collectives (op, process group, bytes, shape, per-group sequence number, state,
// timestamps) and where the trainer is in the step (step number and phase). On a hang every rank
// dumps it as JSON (to FlightRecordPath in the heartbeat folder); flight_analysis.h reads all
// ranks' dumps and names the rank or ranks the others are waiting for. A watchdog thread also
// turns a collective that runs longer than a timeout into a dump, an error naming op/group/seq,
// and exit code ExitCode::kCollectiveTimeout.
//
// Deliberately free of libtorch: the launcher can read and analyze dumps without it.
// Non-goals: recording tensor contents; aborting a stuck collective in place (Gloo cannot be
// cancelled; the process exits and the launcher restarts the job from the last checkpoint).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"
#include "tenax/protocol/protocol.h"

namespace tenax::protocol {

// kAbandoned: given up by the rank, which went on without it (live recovery: a collective of a
// group it left after a failure); it will never complete, and nothing waits for it.
enum class CollectiveState { kEnqueued, kStarted, kCompleted, kAbandoned };
const char* StateName(CollectiveState s);

struct CollectiveRecord {
  uint64_t id = 0;    // recorder-wide, increasing
  std::string op;     // "all_reduce", "all_gather", "broadcast", "send", ...
  std::string group;  // process-group name ("world", "dp_shard", "tp", ...)
  int64_t seq = 0;    // 1-based, per group: equal on every rank for the same collective
  int64_t bytes = 0;  // payload on this rank
  std::string shape;  // optional, e.g. "[4096, 4096] f32"
  CollectiveState state = CollectiveState::kEnqueued;
  double enqueued_unix = 0, started_unix = 0, completed_unix = 0;  // 0: not yet
  int64_t step = 0;  // the trainer's position when the collective was issued
  std::string phase;
};

// Thread safety: every method may be called from any thread (Gloo work can complete on its own
// threads). Cost per collective: one mutex and a few small strings.
class FlightRecorder {
 public:
  explicit FlightRecorder(int rank, size_t capacity = 512);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  int rank() const { return rank_; }
  // Global ranks of a group, recorded in dumps so the analysis knows who should participate.
  // Optional: without it a group's members are the ranks whose dumps mention it ("world" is
  // always every rank).
  void RegisterGroup(std::string_view group, std::vector<int> global_ranks);
  // A collective that starts now (blocking ops). Returns the id to pass to End.
  uint64_t Begin(std::string_view op, std::string_view group, int64_t bytes,
                 std::string shape = {});
  // Non-blocking ops: Enqueue when issued, Start when the backend begins it, End when done.
  uint64_t Enqueue(std::string_view op, std::string_view group, int64_t bytes,
                   std::string shape = {});
  void Start(uint64_t id);
  void End(uint64_t id);  // unknown ids (evicted from the ring) and ended ones are ignored
  // A collective whose completion the host learns by asking: `done` is called by Poll() until it
  // returns true, which ends the record. For backends where waiting does not mean finished
  // (NCCL: a wait orders the CUDA streams and returns; the GPU runs the collective later).
  // `done` must be cheap, thread-safe and must not call back into this recorder.
  void EndWhen(uint64_t id, std::function<bool()> done);
  // Asks every EndWhen probe and ends the records of those done (a probe whose record was ended
  // by End meanwhile, or evicted, is dropped unasked); returns how many are still waiting. Called
  // by the watchdog's thread, often while probes wait, and before each dump.
  size_t Poll();
  // Every collective still pending becomes abandoned (live recovery, once the rank left the
  // groups they were in): neither the timeout check nor a later dump's analysis counts it as
  // what the rank waits for. Returns how many.
  size_t AbandonPending();
  // Where the trainer is: "forward", "backward", "optimizer", "checkpoint", "eval", ...
  void SetPhase(int64_t step, std::string_view phase);

  // The oldest collective started (or enqueued) but neither completed nor abandoned, if any.
  std::optional<CollectiveRecord> OldestPending() const;
  std::vector<CollectiveRecord> Records() const;  // oldest first
  // The dump: {"format": "tenax-flight-record", "rank", "step", "phase", "collectives": [...],
  // "groups": {name: {"ranks", "last_started_seq", "last_completed_seq"}}, "reason", ...}.
  nlohmann::json ToJson(std::string_view reason) const;
  // Writes ToJson atomically (temp file + rename) to `path`.
  Status Dump(FileSystem& fs, const std::string& path, std::string_view reason) const;

 private:
  struct GroupInfo {
    std::vector<int> ranks;  // empty: not registered
    int64_t next_seq = 1;
    int64_t last_started_seq = 0;
    int64_t last_completed_seq = 0;
  };
  uint64_t Add(std::string_view op, std::string_view group, int64_t bytes, std::string shape,
               CollectiveState state);
  CollectiveRecord* Find(uint64_t id);  // requires mu_

  // Constant after construction.
  const int rank_;
  const size_t capacity_;

  // The probes of EndWhen, guarded by their own mutex: Poll calls them without holding mu_.
  std::mutex probes_mu_;
  std::vector<std::pair<uint64_t, std::function<bool()>>> probes_;

  mutable std::mutex mu_;
  // Guarded by mu_.
  std::deque<CollectiveRecord> ring_;
  std::map<std::string, GroupInfo, std::less<>> groups_;
  uint64_t next_id_ = 1;
  int64_t step_ = 0;
  std::string phase_ = "setup";
  double phase_since_unix_ = 0;
};

// Records one blocking collective for the lifetime of the scope: Begin on construction, End on
// destruction, except when an exception is unwinding (a collective that threw did not complete,
// and the record must say so). A null recorder records nothing. Lets a communicator method
// record itself with one line:  CollectiveScope rec(recorder_, "all_reduce", name_, t.nbytes());
class CollectiveScope {
 public:
  CollectiveScope(FlightRecorder* recorder, std::string_view op, std::string_view group,
                  int64_t bytes)
      : recorder_(recorder),
        id_(recorder ? recorder->Begin(op, group, bytes) : 0),
        exceptions_(std::uncaught_exceptions()) {}
  ~CollectiveScope() {
    if (recorder_ != nullptr && std::uncaught_exceptions() == exceptions_) recorder_->End(id_);
  }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  FlightRecorder* const recorder_;
  const uint64_t id_;
  const int exceptions_;
};

struct WatchdogOptions {
  std::string dump_path;  // where dumps go (FlightRecordPath)
  // A collective pending longer than this is a timeout; zero disables the check.
  std::chrono::milliseconds collective_timeout{0};
  std::chrono::milliseconds poll_interval{std::chrono::seconds(1)};
  // Install a SIGUSR1 handler that requests a dump (the launcher's "dump now").
  bool handle_sigusr1 = true;
  // Runs on the watchdog thread after the timeout dump. Default: log::Error naming the
  // collective, then std::_Exit(kCollectiveTimeoutExitCode) (the one documented exit in library
  // code: other threads are stuck inside the collective, so nothing can unwind normally).
  std::function<void(const CollectiveRecord&)> on_timeout;
};

// Owns the thread that dumps on SIGUSR1 and watches for collective timeouts. The signal handler
// only writes a byte to a self-pipe (async-signal-safe); the thread does the dump. At most one
// watchdog with handle_sigusr1 may exist per process (the handler's pipe is process-global,
// which a signal handler forces); the destructor restores the previous handler.
class FlightRecorderWatchdog {
 public:
  FlightRecorderWatchdog(FlightRecorder& recorder, FileSystem& fs, WatchdogOptions options);
  ~FlightRecorderWatchdog();
  FlightRecorderWatchdog(const FlightRecorderWatchdog&) = delete;
  FlightRecorderWatchdog& operator=(const FlightRecorderWatchdog&) = delete;

  int dumps() const { return dumps_.load(); }  // dumps written so far

 private:
  void Loop();
  void DumpNow(std::string_view reason);

  // Constant after construction.
  FlightRecorder& recorder_;
  FileSystem& fs_;
  const WatchdogOptions options_;
  int pipe_[2] = {-1, -1};  // [0] read by the thread; [1] written by the handler and destructor

  std::atomic<int> dumps_{0};
  uint64_t timed_out_id_ = 0;  // thread-only: the collective already reported
  std::thread thread_;         // last: starts after everything above is ready
};

}  // namespace tenax::protocol
