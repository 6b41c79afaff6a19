// Filesystem seam. Everything tenax persists (checkpoints, shards, metrics) goes through a
// FileSystem so tests can drop or corrupt writes and prove that a crash never harms committed
// data. LocalFileSystem is the real one: writes are temp file + fsync + rename + fsync(dir).
// Thread safety: LocalFileSystem is stateless and safe to share across threads.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tenax/core/status.h"

namespace tenax {

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Writes `data` to `path` so that a crash leaves either the old file or the complete new one.
  virtual Status WriteFileAtomic(const std::string& path, std::string_view data) = 0;
  virtual Result<std::string> ReadFile(const std::string& path) = 0;
  virtual Status CreateDirs(const std::string& path) = 0;
  virtual Status RemoveAll(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // Names (not paths) of the entries of `dir`, sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual Status SyncDir(const std::string& dir) = 0;
};

class LocalFileSystem final : public FileSystem {
 public:
  Status WriteFileAtomic(const std::string& path, std::string_view data) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Status CreateDirs(const std::string& path) override;
  Status RemoveAll(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  bool Exists(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  Status SyncDir(const std::string& dir) override;
};

// The process-wide local filesystem (stateless, so sharing it is safe).
FileSystem& LocalFs();

// A read-only memory map of a whole file. Movable, not copyable; unmaps on destruction.
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string JoinPath(const std::string& a, const std::string& b);
std::string ParentDir(const std::string& path);
bool IsDirectory(const std::string& path);  // false when absent or unreadable
// Whether `path` ends with `suffix` (a file extension: ".zst", ".jsonl"; a source's ":train").
bool HasSuffix(const std::string& path, const std::string& suffix);
// strerror(err), for the message of a failed system call (err: errno where the call is made).
std::string ErrnoText(int err = errno);

}  // namespace tenax
