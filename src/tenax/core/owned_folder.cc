#include "tenax/core/owned_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "tenax/core/fs.h"

namespace tenax {
namespace {

constexpr char kOwnerSuffix[] = ".owner";

std::string OwnerPath(const std::string& folder) { return folder + kOwnerSuffix; }

// Whether `fd` is still the file at `path` (not unlinked, nor replaced, by a sweeper).
bool StillAt(int fd, const std::string& path) {
  struct stat held {
  }, here{};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &here) == 0 &&
         held.st_dev == here.st_dev && held.st_ino == here.st_ino;
}

// Removes <parent>/<prefix>* whose .owner lock nobody holds; returns how many.
Result<int> SweepOwnerless(const std::string& parent, const std::string& prefix) {
  Result<std::vector<std::string>> names = LocalFs().ListDir(parent);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return 0;
    return names.status();
  }
  const size_t suffix = std::strlen(kOwnerSuffix);
  int swept = 0;
  for (const std::string& n : *names) {
    if (n.rfind(prefix, 0) != 0 || n.size() <= prefix.size() + suffix ||
        n.compare(n.size() - suffix, suffix, kOwnerSuffix) != 0) {
      continue;
    }
    const std::string lock = JoinPath(parent, n);
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;  // swept by another process just now
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && StillAt(fd, lock)) {
      // Its owner is gone: the folder first, so that a .owner file is never missing while
      // its folder is there (a folder without one is never swept again).
      const std::string folder = lock.substr(0, lock.size() - suffix);
      Status removed = LocalFs().RemoveAll(folder);
      if (removed.ok()) {
        ::unlink(lock.c_str());
        ++swept;
      }
    }
    ::close(fd);
  }
  return swept;
}

}  // namespace

Result<OwnedFolder> OwnedFolder::Claim(const std::string& parent, const std::string& prefix,
                                       const std::string& name) {
  if (name.rfind(prefix, 0) != 0 || name.find('/') != std::string::npos) {
    return InvalidArgument(fmt::format(
        "owned folder: the name {} must start with {} and name no subfolder", name, prefix));
  }
  TENAX_ASSIGN_OR_RETURN(int swept, SweepOwnerless(parent, prefix));
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(parent));
  const std::string path = JoinPath(parent, name);
  const std::string lock = OwnerPath(path);
  // A sweeper may hold the lock of a file of this name for a moment (when an earlier owner of
  // it died) and then unlink it: retry until ours is the file at the path.
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      return IoError(fmt::format("cannot create {}: {}; make {} writable", lock,
                                 std::strerror(errno), parent));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (StillAt(fd, lock)) {
        Status made = LocalFs().CreateDirs(path);
        if (!made.ok()) {
          ::unlink(lock.c_str());
          ::close(fd);
          return made;
        }
        return OwnedFolder(fd, path, swept);
      }
    } else if (errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      ::close(fd);
      return IoError(fmt::format("cannot lock {}: {} (the filesystem must support flock)", lock,
                                 std::strerror(err)));
    }
    ::close(fd);
    if (attempt == 200) {
      return Busy(
          fmt::format("the folder {} is owned by another live process; choose another "
                      "name",
                      path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

OwnedFolder::OwnedFolder(OwnedFolder&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), swept_(other.swept_) {
  other.fd_ = -1;
}

OwnedFolder& OwnedFolder::operator=(OwnedFolder&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    swept_ = other.swept_;
    other.fd_ = -1;
  }
  return *this;
}

OwnedFolder::~OwnedFolder() { Release(); }

void OwnedFolder::Release() {
  if (fd_ < 0) return;
  // Best effort: what cannot be removed now is swept by the next Claim beside it (unless the
  // folder outlives its .owner file, which only a failed removal here can cause).
  if (LocalFs().RemoveAll(path_).ok()) ::unlink(OwnerPath(path_).c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace tenax
