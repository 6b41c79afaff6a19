// Asynchronous checkpoints: the trainer blocks only while it copies its state into host memory
// (a CheckpointSnapshot: serialized file bytes); an owned background thread then writes the
// snapshot through CheckpointStore's commit protocol, verifies it by reading every file back,
// and only then counts it as committed (docs/checkpoint_format.md, "Asynchronous saves").
//
// Multi-rank commit without collectives. c10d requires every rank to issue a group's collectives
// in the same order from one thread, so the writer thread must not touch the training
// communicators. Instead each rank, after writing its files, writes a marker
// step_N/rankRRRRR.written (JSON: step, rank, attempt, its files with sizes and CRC-32s); rank 0's
// writer waits (polling the filesystem, bounded by AsyncWriterOptions::peer_timeout) until every
// rank's marker for this step and attempt exists and together they cover every expected file,
// then commits, verifies and prunes. Stale markers cannot mislead it: before the first save of a
// run, rank 0 calls RemoveUncommittedAfter(resume step) and every rank passes a barrier (on the
// main thread), so any marker for a later step was written by this run; `attempt` (the launch
// generation) guards against the rest.
//
// Non-goals: more than one write in flight (a second Submit waits for the first to finish, which
// bounds host memory to one snapshot); streaming snapshots larger than memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::ckpt {

// One rank's part of checkpoint `step`, already serialized into host memory.
struct CheckpointSnapshot {
  int64_t step = -1;
  int rank = 0;
  int world_size = 1;
  // This rank's files (name -> bytes); may be empty (e.g. a data-parallel replica).
  std::vector<std::pair<std::string, std::string>> files;
  // Every file of the checkpoint, over all ranks (rank 0 commits exactly these).
  std::vector<std::string> expected_files;
  nlohmann::json layout = nlohmann::json::object();  // recorded in the manifest by rank 0
  nlohmann::json extra = nlohmann::json::object();
  // Identifies the run attempt (e.g. the launcher's TENAX_RESTART_COUNT); rank 0 accepts only
  // markers with its own attempt.
  std::string attempt;
  // GPU snapshots: `files` are filled later, from state whose device-to-host copies are still in
  // flight. `materialize` waits for them and serializes into `files`; whoever writes the snapshot
  // calls it first, once (the async writer on its thread, so training goes on meanwhile).
  // `before_update` makes the device's compute stream wait for the copies; the trainer calls it
  // before the optimizer overwrites the state they read. Both null: `files` is complete.
  std::function<Status(CheckpointSnapshot&)> materialize;
  std::function<void()> before_update;
};

// Runs and clears `snap.materialize` if it is set; a no-op otherwise.
Status Materialize(CheckpointSnapshot& snap);

struct AsyncWriterOptions {
  int64_t keep_latest = 0;  // rank 0 prunes to this after each verified commit; 0 keeps all
  // How long rank 0 waits for the other ranks' markers before giving up on the step.
  std::chrono::milliseconds peer_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds poll_interval{20};
  // Runs on the writer thread before the snapshot's files are written, e.g. to keep memory
  // replicas (MemoryReplica::Put) off the training thread. An error fails the save.
  std::function<Status(const CheckpointSnapshot&)> before_write;
  // Run on the writer thread with the step folder: `after_files` once this rank's data files are
  // written (before its marker, or before the commit with one rank), `after_commit` on rank 0
  // once the step is committed and verified. An error fails the save. The trainer hangs fault
  // injection here (--inject ckpt-fail / kill-in-ckpt / ckpt-corrupt), as in synchronous saves.
  std::function<Status(const CheckpointSnapshot&, const std::string& step_dir)> after_files;
  std::function<Status(const CheckpointSnapshot&, const std::string& step_dir)> after_commit;
};

// A save that finished: on rank 0 committed and verified, elsewhere this rank's part written.
struct CompletedSave {
  int64_t step = -1;
  bool committed = false;  // true on the rank that committed (rank 0)
  double seconds = 0;      // from Submit to the end of the background work
};

// Thread safety: Submit, Wait, TakeCompleted and last_committed may be called from any one
// thread (the trainer's); the writer thread is internal. Errors are sticky: once a write fails,
// every later Submit and Wait returns that error, so a failure is never lost.
class AsyncCheckpointWriter {
 public:
  // `fs` must outlive the writer. `folder` is the checkpoint folder (CheckpointStore's).
  AsyncCheckpointWriter(FileSystem& fs, std::string folder, AsyncWriterOptions options = {});
  // Finishes a write in progress, except that rank 0 stops waiting for other ranks' markers
  // (that step stays uncommitted; older checkpoints are untouched), then joins the thread.
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Hands a snapshot to the writer thread. Blocks while the previous write is still running (at
  // most one write is in flight). Returns the error of any earlier failed write (and then does
  // not take the snapshot), or InvalidArgument for a malformed snapshot; Ok once queued.
  Status Submit(CheckpointSnapshot snapshot);
  // Blocks until no write is in flight; returns the first error of any write so far.
  Status Wait();
  // True while a write is queued or running.
  bool busy();
  // Saves finished since the last call, oldest first (for logging on the trainer's thread).
  std::vector<CompletedSave> TakeCompleted();
  // Newest step this writer committed and verified; nullopt before the first.
  std::optional<int64_t> last_committed();

 private:
  void Loop();
  Status Write(CheckpointSnapshot& s);  // materializes `s` first
  // Rank 0: waits until every rank's marker for `s` exists and covers the expected files.
  Status AwaitMarkers(const CheckpointSnapshot& s);

  // Constant after construction.
  FileSystem& fs_;
  const std::string folder_;
  const AsyncWriterOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::optional<CheckpointSnapshot> pending_;
  std::chrono::steady_clock::time_point pending_since_;
  bool running_ = false;  // the thread is writing a snapshot it took from pending_
  bool stop_ = false;
  Status error_;
  std::vector<CompletedSave> completed_;
  std::optional<int64_t> last_committed_;

  std::thread thread_;  // last: starts after every member above is initialized
};

// The marker a rank writes into the step folder once its files are durable.
std::string MarkerFileName(int rank);

// Removes uncommitted step folders newer than `step` (leftovers of saves interrupted by a crash),
// so markers found later belong to this run. Call on one rank, then barrier, before saving.
Status RemoveUncommittedAfter(FileSystem& fs, const std::string& folder, int64_t step);

}  // namespace tenax::ckpt
