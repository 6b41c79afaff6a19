// ScopedBlockSigpipe: blocks SIGPIPE in the calling thread for its lifetime and swallows any
// SIGPIPE raised meanwhile, so that a write to a peer or child that is gone returns EPIPE instead
// of killing the process. Needed wherever a library writes without MSG_NOSIGNAL: Debian's
// cpp-httplib (the etcd client, checkpoint transfer), OpenSSL's write(), and pipes to a child
// process (core/subprocess.h).
// Thread safety: affects the calling thread only; construct and destroy on the same thread.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <time.h>

namespace tenax {

class ScopedBlockSigpipe {
 public:
  ScopedBlockSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    // A SIGPIPE already pending before us is not ours to swallow.
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedBlockSigpipe() {
    if (!was_pending_) {
      const struct timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedBlockSigpipe(const ScopedBlockSigpipe&) = delete;
  ScopedBlockSigpipe& operator=(const ScopedBlockSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

}  // namespace tenax
