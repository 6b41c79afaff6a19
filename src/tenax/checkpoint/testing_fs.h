// Test-only FileSystem for fault injection: forwards to a real FileSystem but can fail the Nth
// write, "crash" (throw SimulatedCrash) at a chosen mutating operation, and corrupt a file after
// the fact. Crash tests run a save once to count its operations, then crash at every index in
// turn and check what a restarted process sees.
// Non-goals: simulating lost page cache (un-fsynced data vanishing); LocalFileSystem's
// fsync-before-rename is trusted for that, as leveldb's tests trust their Env.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tenax/core/fs.h"

namespace tenax::ckpt {

// Thrown in place of the operation at the crash index; nothing from that operation on happens.
struct SimulatedCrash : std::runtime_error {
  SimulatedCrash() : std::runtime_error("simulated crash") {}
};

// Thread safety: none; tests drive it from one thread.
class FaultyFileSystem final : public FileSystem {
 public:
  explicit FaultyFileSystem(FileSystem& base) : base_(base) {}

  // The n-th WriteFileAtomic (0-based, counted over this object's life) fails with IoError and
  // writes nothing. -1 disables.
  void FailWriteAt(int64_t n) { fail_write_at_ = n; }
  // The mutating operation with index `op` (0-based; WriteFileAtomic, CreateDirs, RemoveAll,
  // Rename, SyncDir) throws SimulatedCrash instead of running. A crashing WriteFileAtomic first
  // leaves a torn temp file beside its target, as a process killed mid-write would. -1 disables.
  void CrashAt(int64_t op) { crash_at_ = op; }
  // Mutating operations attempted so far, as "Kind path" lines (the crashing one included).
  const std::vector<std::string>& ops() const { return ops_; }

  // Flips every bit of the byte at `offset` of `path`, bypassing the fault schedule.
  static Status FlipByte(FileSystem& fs, const std::string& path, size_t offset) {
    Result<std::string> bytes = fs.ReadFile(path);
    if (!bytes.ok()) return bytes.status();
    if (offset >= bytes->size()) return InvalidArgument("FlipByte offset past end of " + path);
    (*bytes)[offset] = static_cast<char>(~(*bytes)[offset]);
    return fs.WriteFileAtomic(path, *bytes);
  }

  Status WriteFileAtomic(const std::string& path, std::string_view data) override {
    if (Step("WriteFileAtomic " + path)) {
      // Best effort: the parent may not exist, in which case there is no residue either.
      (void)base_.WriteFileAtomic(path + ".tmp.crash", data.substr(0, data.size() / 2));
      throw SimulatedCrash();
    }
    if (writes_++ == fail_write_at_) return IoError("injected write failure: " + path);
    return base_.WriteFileAtomic(path, data);
  }
  Result<std::string> ReadFile(const std::string& path) override { return base_.ReadFile(path); }
  Status CreateDirs(const std::string& path) override {
    if (Step("CreateDirs " + path)) throw SimulatedCrash();
    return base_.CreateDirs(path);
  }
  Status RemoveAll(const std::string& path) override {
    if (Step("RemoveAll " + path)) throw SimulatedCrash();
    return base_.RemoveAll(path);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (Step("Rename " + from + " -> " + to)) throw SimulatedCrash();
    return base_.Rename(from, to);
  }
  bool Exists(const std::string& path) override { return base_.Exists(path); }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_.ListDir(dir);
  }
  Status SyncDir(const std::string& dir) override {
    if (Step("SyncDir " + dir)) throw SimulatedCrash();
    return base_.SyncDir(dir);
  }

 private:
  // Records the operation; true if it is the one to crash at.
  bool Step(std::string what) {
    ops_.push_back(std::move(what));
    return static_cast<int64_t>(ops_.size()) - 1 == crash_at_;
  }

  FileSystem& base_;
  int64_t fail_write_at_ = -1;
  int64_t crash_at_ = -1;
  int64_t writes_ = 0;
  std::vector<std::string> ops_;
};

}  // namespace tenax::ckpt
