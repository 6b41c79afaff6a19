#include "tenax/checkpoint/async_writer.h"

#include <fmt/format.h>

#include <exception>
#include <map>
#include <set>

#include "tenax/checkpoint/manifest.h"
#include "tenax/checkpoint/store.h"
#include "tenax/core/crc32.h"
#include "tenax/core/log.h"

namespace tenax::ckpt {
namespace {

using Clock = std::chrono::steady_clock;

Status ValidateSnapshot(const CheckpointSnapshot& s) {
  if (s.step < 0) return InvalidArgument(fmt::format("checkpoint snapshot step {} < 0", s.step));
  if (s.world_size < 1 || s.rank < 0 || s.rank >= s.world_size) {
    return InvalidArgument(
        fmt::format("checkpoint snapshot: rank {} is outside world size {}", s.rank, s.world_size));
  }
  std::set<std::string> expected(s.expected_files.begin(), s.expected_files.end());
  for (const auto& [name, bytes] : s.files) {
    TENAX_RETURN_IF_ERROR(ValidateDataFileName(name));
    if (expected.count(name) == 0) {
      return InvalidArgument(fmt::format(
          "checkpoint snapshot of step {}: rank {} writes {}, which expected_files does not list",
          s.step, s.rank, name));
    }
  }
  if (s.rank == 0) {
    if (s.expected_files.empty()) {
      return InvalidArgument("checkpoint snapshot: rank 0 needs the expected file names");
    }
    for (const auto& name : s.expected_files) TENAX_RETURN_IF_ERROR(ValidateDataFileName(name));
  }
  return Status::Ok();
}

std::string MarkerText(const CheckpointSnapshot& s) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, bytes] : s.files) {
    files[name] = {{"bytes", bytes.size()}, {"crc32", CrcHex(Crc32(bytes))}};
  }
  return nlohmann::json{
      {"step", s.step}, {"rank", s.rank}, {"attempt", s.attempt}, {"files", files}}
      .dump(1);
}

}  // namespace

std::string MarkerFileName(int rank) { return fmt::format("rank{:05d}.written", rank); }

Status RemoveUncommittedAfter(FileSystem& fs, const std::string& folder, int64_t step) {
  Result<std::vector<std::string>> names = fs.ListDir(folder);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return Status::Ok();
    return names.status();
  }
  for (const auto& name : *names) {
    std::optional<int64_t> s = ParseStepDirName(name);
    if (!s || *s <= step) continue;
    const std::string dir = JoinPath(folder, name);
    if (fs.Exists(JoinPath(dir, kCommitFile))) continue;  // SetAsideNewerThan's business
    log::Warn("removing {}: an uncommitted checkpoint left by an interrupted save", dir);
    TENAX_RETURN_IF_ERROR(fs.RemoveAll(dir));
  }
  return Status::Ok();
}

AsyncCheckpointWriter::AsyncCheckpointWriter(FileSystem& fs, std::string folder,
                                             AsyncWriterOptions options)
    : fs_(fs), folder_(std::move(folder)), options_(options), thread_([this] { Loop(); }) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status AsyncCheckpointWriter::Submit(CheckpointSnapshot snapshot) {
  TENAX_RETURN_IF_ERROR(ValidateSnapshot(snapshot));
  std::unique_lock<std::mutex> lock(mu_);
  // At most one write in flight: the second request waits here for the first.
  cv_.wait(lock, [this] { return !pending_ && !running_; });
  if (!error_.ok()) return error_;
  pending_ = std::move(snapshot);
  pending_since_ = Clock::now();
  cv_.notify_all();
  return Status::Ok();
}

Status AsyncCheckpointWriter::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_ && !running_; });
  return error_;
}

bool AsyncCheckpointWriter::busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.has_value() || running_;
}

std::vector<CompletedSave> AsyncCheckpointWriter::TakeCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CompletedSave> out;
  out.swap(completed_);
  return out;
}

std::optional<int64_t> AsyncCheckpointWriter::last_committed() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_committed_;
}

void AsyncCheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || pending_.has_value(); });
    if (!pending_) return;  // stop_ with nothing left to write
    CheckpointSnapshot s = std::move(*pending_);
    pending_.reset();
    const auto since = pending_since_;
    running_ = true;
    lock.unlock();
    Status st;
    // An exception must not kill the process from a background thread (std::terminate) nor
    // leave Wait() hanging: it becomes this write's error.
    try {
      st = Write(s);
    } catch (const std::exception& e) {
      st = Internal(fmt::format("checkpoint writer for step {} failed: {}", s.step, e.what()));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - since).count();
    lock.lock();
    running_ = false;
    if (st.ok()) {
      completed_.push_back({s.step, s.rank == 0, seconds});
      if (s.rank == 0) last_committed_ = s.step;
    } else if (error_.ok()) {
      error_ = st.WithContext(fmt::format("asynchronous checkpoint of step {}", s.step));
    }
    cv_.notify_all();
  }
}

Status Materialize(CheckpointSnapshot& snap) {
  if (!snap.materialize) return Status::Ok();
  auto fill = std::move(snap.materialize);
  snap.materialize = nullptr;
  return fill(snap);
}

Status AsyncCheckpointWriter::Write(CheckpointSnapshot& s) {
  // Device-to-host copies finish here, on this thread, while training goes on.
  TENAX_RETURN_IF_ERROR(Materialize(s));
  // The writer thread's own store: CheckpointStore is not thread-safe.
  CheckpointStore store(fs_, folder_);
  if (options_.before_write) TENAX_RETURN_IF_ERROR(options_.before_write(s));
  const std::string dir = store.StepDir(s.step);
  if (s.world_size == 1) {
    TENAX_RETURN_IF_ERROR(store.Prepare(s.step));
    TENAX_RETURN_IF_ERROR(store.WriteFiles(s.step, s.files));
    if (options_.after_files) TENAX_RETURN_IF_ERROR(options_.after_files(s, dir));
  } else {
    // No Prepare: another rank may already be writing this step; RemoveUncommittedAfter did its
    // cleaning before the run's first save.
    if (!s.files.empty()) TENAX_RETURN_IF_ERROR(store.WriteFiles(s.step, s.files));
    TENAX_RETURN_IF_ERROR(fs_.CreateDirs(dir));
    if (options_.after_files) TENAX_RETURN_IF_ERROR(options_.after_files(s, dir));
    // After the data files: the marker promises they are durable.
    TENAX_RETURN_IF_ERROR(fs_.WriteFileAtomic(
        JoinPath(store.StepDir(s.step), MarkerFileName(s.rank)), MarkerText(s)));
    if (s.rank != 0) return Status::Ok();
    TENAX_RETURN_IF_ERROR(AwaitMarkers(s));
  }
  TENAX_RETURN_IF_ERROR(store.Commit(s.step, s.layout, s.extra, s.expected_files, s.world_size));
  // Counts only once it verifies: every file read back against the manifest just written.
  TENAX_RETURN_IF_ERROR(store.Verify(s.step));
  if (options_.after_commit) TENAX_RETURN_IF_ERROR(options_.after_commit(s, dir));
  if (options_.keep_latest > 0) TENAX_RETURN_IF_ERROR(store.Prune(options_.keep_latest));
  return Status::Ok();
}

Status AsyncCheckpointWriter::AwaitMarkers(const CheckpointSnapshot& s) {
  const std::string dir = JoinPath(folder_, StepDirName(s.step));
  const auto deadline = Clock::now() + options_.peer_timeout;
  std::map<int, nlohmann::json> seen;  // rank -> its marker
  while (true) {
    for (int r = 0; r < s.world_size; ++r) {
      if (seen.count(r)) continue;
      const std::string path = JoinPath(dir, MarkerFileName(r));
      if (!fs_.Exists(path)) continue;
      TENAX_ASSIGN_OR_RETURN(std::string text, fs_.ReadFile(path));
      nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (m.is_discarded() || !m.is_object()) return DataError(path + " is not valid JSON");
      if (m.value("step", int64_t{-1}) != s.step || m.value("rank", -1) != r ||
          m.value("attempt", std::string()) != s.attempt) {
        return DataError(fmt::format(
            "{} belongs to another save (step {}, rank {}, attempt '{}'; expected step {}, rank "
            "{}, attempt '{}'); was RemoveUncommittedAfter called before the first save?",
            path, m.value("step", int64_t{-1}), m.value("rank", -1),
            m.value("attempt", std::string()), s.step, r, s.attempt));
      }
      seen[r] = std::move(m);
    }
    if (static_cast<int>(seen.size()) == s.world_size) break;
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) {
      return Unavailable(
          fmt::format("shutting down while waiting for other ranks to write "
                      "checkpoint step {}; it was not committed",
                      s.step));
    }
    if (Clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < s.world_size; ++r) {
        if (!seen.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return Unavailable(fmt::format(
          "checkpoint step {} not committed: rank(s) {} did not finish writing within {} s (no "
          "rankRRRRR.written marker in {}); check those ranks' logs",
          s.step, missing, options_.peer_timeout.count() / 1000.0, dir));
    }
    cv_.wait_for(lock, options_.poll_interval, [this] { return stop_; });
  }
  // Together the markers must cover the checkpoint: otherwise ranks disagree on the layout.
  std::set<std::string> covered;
  for (const auto& [r, m] : seen) {
    const nlohmann::json files = m.value("files", nlohmann::json::object());
    for (const auto& [name, entry] : files.items()) covered.insert(name);
  }
  for (const auto& name : s.expected_files) {
    if (!covered.count(name)) {
      return DataError(fmt::format(
          "checkpoint step {}: no rank reports writing {} (ranks disagree on the layout?); the "
          "checkpoint was not committed",
          s.step, name));
    }
  }
  return Status::Ok();
}

}  // namespace tenax::ckpt
