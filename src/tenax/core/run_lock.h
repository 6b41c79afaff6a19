// A run folder has one owner at a time. The owner holds an exclusive flock on <run>/.tenax.lock
// and describes itself in <run>/.tenax.owner (pid, host, command, since), which a second process
// reads to say who has the folder. The kernel releases a flock when the last descriptor of its
// open file is closed, so a lock is never stale: when its owner dies, the folder is free. A
// launcher passes its lock on to the processes it starts (an inheritable duplicate): the folder
// then stays owned while any process of the job is alive, so a second launch cannot start until
// the first one's ranks are gone too.
// Non-goals: locking across machines on network filesystems without flock support.
#pragma once

#include <string>

#include "tenax/core/status.h"

namespace tenax {

class RunLock {
 public:
  // Creates `run_dir` if needed and takes its lock; `command` is how the owner describes itself
  // ("tenax launch ...", "tenax train ..."). Busy, naming the owner, when another process holds
  // it. When the recorded owner is already dead but the lock is still held (its children are
  // exiting), waits up to `dying_owner_wait_s` for them before giving up.
  static Result<RunLock> Acquire(const std::string& run_dir, const std::string& command,
                                 double dying_owner_wait_s = 10);
  // Whether `fd` (inherited from a launcher) is the lock of `run_dir`: OK, or an error saying
  // what does not match.
  static Status VerifyInherited(int fd, const std::string& run_dir);
  static std::string LockPath(const std::string& run_dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();  // closes this descriptor (the folder is free once children holding it exit)

  // A duplicate without close-on-exec, for a child process to inherit; the caller closes it after
  // starting the child.
  Result<int> InheritableFd() const;
  const std::string& run_dir() const { return run_dir_; }

 private:
  RunLock(int fd, std::string run_dir) : fd_(fd), run_dir_(std::move(run_dir)) {}

  int fd_ = -1;
  std::string run_dir_;
};

}  // namespace tenax
