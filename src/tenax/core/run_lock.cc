#include "tenax/core/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "tenax/core/fs.h"
#include "tenax/core/run_paths.h"

namespace tenax {
namespace {

std::string HostName() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? host : "?";
}

// The recorded owner, as one phrase, and whether it is a live process on this host.
std::string DescribeOwner(const std::string& run_dir, bool* owner_alive) {
  *owner_alive = true;  // unknown owners count as alive: never wait on a guess
  auto text = LocalFs().ReadFile(RunPaths(run_dir).owner());
  if (!text.ok()) return "another process (no owner record)";
  const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "another process (unreadable owner record)";
  const int pid = j.value("pid", 0);
  const std::string host = j.value("host", std::string("?"));
  if (host == HostName() && pid > 0) *owner_alive = ::kill(pid, 0) == 0 || errno == EPERM;
  return fmt::format("pid {} on {} ({}, since {})", pid, host, j.value("command", std::string()),
                     j.value("since", std::string("?")));
}

}  // namespace

std::string RunLock::LockPath(const std::string& run_dir) { return RunPaths(run_dir).lock(); }

Result<RunLock> RunLock::Acquire(const std::string& run_dir, const std::string& command,
                                 double dying_owner_wait_s) {
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(run_dir));
  const std::string path = LockPath(run_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError(fmt::format("cannot open the run folder's lock {}: {}; make {} writable", path,
                               std::strerror(errno), run_dir));
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(std::max(0.0, dying_owner_wait_s));
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      const int err = errno;
      ::close(fd);
      return IoError(fmt::format("cannot lock {}: {} (the filesystem must support flock)", path,
                                 std::strerror(err)));
    }
    bool alive = true;
    const std::string owner = DescribeOwner(run_dir, &alive);
    if (alive || std::chrono::steady_clock::now() > deadline) {
      ::close(fd);
      return Busy(fmt::format(
          "the run folder {} is in use by {}{}; wait for that job to end or stop it, or choose "
          "another job.name / job.dump_folder (nothing was changed)",
          run_dir, owner, alive ? "" : " whose processes are still exiting"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  char since[32] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%S", std::localtime(&now));
  const nlohmann::json owner = {{"pid", static_cast<int>(::getpid())},
                                {"host", HostName()},
                                {"command", command},
                                {"since", since}};
  Status wrote = LocalFs().WriteFileAtomic(RunPaths(run_dir).owner(), owner.dump() + "\n");
  if (!wrote.ok()) {
    ::close(fd);
    return wrote;
  }
  return RunLock(fd, run_dir);
}

Status RunLock::VerifyInherited(int fd, const std::string& run_dir) {
  struct stat held {
  }, here{};
  if (::fstat(fd, &held) != 0) {
    return InvalidArgument(
        fmt::format("the inherited run-folder lock (descriptor {}) is not open", fd));
  }
  const std::string path = LockPath(run_dir);
  if (::stat(path.c_str(), &here) != 0 || held.st_dev != here.st_dev ||
      held.st_ino != here.st_ino) {
    return InvalidArgument(fmt::format(
        "the launcher locked another run folder than {} (the config's job.dump_folder/job.name "
        "changed between the launcher and this rank?)",
        run_dir));
  }
  return Status::Ok();
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_), run_dir_(std::move(other.run_dir_)) {
  other.fd_ = -1;
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    run_dir_ = std::move(other.run_dir_);
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

Result<int> RunLock::InheritableFd() const {
  const int dup = ::dup(fd_);  // dup() never sets close-on-exec
  if (dup < 0) return IoError(std::string("dup of the run lock: ") + std::strerror(errno));
  return dup;
}

}  // namespace tenax
