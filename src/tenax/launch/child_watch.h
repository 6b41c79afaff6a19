// Waiting for children the precise way: every child is a pidfd in one epoll set, next to a
// self-pipe that the launcher's SIGINT/SIGTERM handler writes to. The supervisor sleeps until a
// child ends, a signal arrives or its timeout passes, and each death is stamped with the
// monotonic time the kernel reported it (not the time a polling loop happened to look), which is
// what first-failure attribution compares (attribution.h).
// Kernels without pidfd_open (before 5.3) fall back to polling waitpid every 10 ms.
// Thread safety: one thread (the supervisor's).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::launch {

struct ChildEnd {
  pid_t pid = 0;
  int code = 0;           // exit code, or 128 + signal
  bool signaled = false;  // killed by a signal
  double mono_s = 0;      // protocol::MonotonicNow() when the kernel reported it
};

class ChildWatcher {
 public:
  // Installs the SIGINT/SIGTERM handler (the launcher is told to stop; see signal()).
  static Result<std::unique_ptr<ChildWatcher>> Create();
  ~ChildWatcher();
  ChildWatcher(const ChildWatcher&) = delete;
  ChildWatcher& operator=(const ChildWatcher&) = delete;

  // Starts watching a child of this process.
  Status Watch(pid_t pid);
  // Waits up to `timeout_s` (0: just look) and returns the children that ended, reaped, oldest
  // first. Also returns early when a signal arrived (signal() != 0).
  std::vector<ChildEnd> Wait(double timeout_s);
  // The SIGINT/SIGTERM the launcher received (0: none).
  int signal() const;
  // Ends a Wait in progress (or the next one) early; safe from any thread. The node agent calls
  // it when etcd says the generation must stop.
  void Wake();

 private:
  ChildWatcher() = default;
  std::vector<ChildEnd> ReapPolling();

  int epoll_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  bool use_pidfd_ = true;
  std::map<int, pid_t> pidfds_;  // pidfd -> pid
  std::vector<pid_t> polled_;    // fallback: pids reaped with waitpid
};

}  // namespace tenax::launch
