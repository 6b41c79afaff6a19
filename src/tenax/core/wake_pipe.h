// WakePipe: a self-pipe that wakes a thread blocked in poll(). The thread polls read_fd() beside
// its own descriptors and returns once it is readable; the owner's destructor calls
// StopAndJoin(pipe, thread). Declare the pipe before the thread, so that the thread is joined
// before the pipe closes.
// Thread safety: Signal() may be called from any thread (a write(2) of one byte).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <thread>

namespace tenax {

class WakePipe {
 public:
  WakePipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~WakePipe() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;

  bool ok() const { return fds_[0] >= 0; }  // false: pipe2 failed (out of descriptors)
  int read_fd() const { return fds_[0]; }
  void Signal() const {
    const char c = 's';
    (void)!::write(fds_[1], &c, 1);
  }

 private:
  int fds_[2] = {-1, -1};
};

// Wakes `thread` through `pipe` and joins it, when it runs.
inline void StopAndJoin(const WakePipe& pipe, std::thread& thread) {
  if (!thread.joinable()) return;
  pipe.Signal();
  thread.join();
}

}  // namespace tenax
