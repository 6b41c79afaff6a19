#include "tenax/launch/child_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "tenax/protocol/protocol.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace tenax::launch {
namespace {

// The handler's state is process-global because a signal handler can reach nothing else.
std::atomic<int> g_signal{0};
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  g_signal.store(sig);
  const int saved = errno;
  const char c = 's';
  (void)!::write(g_signal_pipe[1], &c, 1);  // async-signal-safe; a full pipe already woke us
  errno = saved;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

ChildEnd FromSiginfo(const siginfo_t& info, double now) {
  ChildEnd e;
  e.pid = info.si_pid;
  e.mono_s = now;
  e.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  e.code = e.signaled ? 128 + info.si_status : info.si_status;
  return e;
}

}  // namespace

Result<std::unique_ptr<ChildWatcher>> ChildWatcher::Create() {
  std::unique_ptr<ChildWatcher> w(new ChildWatcher());
  w->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (w->epoll_fd_ < 0) return Internal(std::string("epoll_create1: ") + std::strerror(errno));
  if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Internal(std::string("pipe2: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = g_signal_pipe[0];
  if (::epoll_ctl(w->epoll_fd_, EPOLL_CTL_ADD, g_signal_pipe[0], &ev) != 0) {
    return Internal(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  if (::pipe2(w->wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Internal(std::string("pipe2: ") + std::strerror(errno));
  }
  ev.data.fd = w->wake_pipe_[0];
  if (::epoll_ctl(w->epoll_fd_, EPOLL_CTL_ADD, w->wake_pipe_[0], &ev) != 0) {
    return Internal(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // Probe pidfd support once with our own pid.
  const int probe = PidfdOpen(::getpid());
  if (probe >= 0) {
    ::close(probe);
  } else {
    w->use_pidfd_ = false;
  }
  return w;
}

ChildWatcher::~ChildWatcher() {
  for (const auto& [fd, pid] : pidfds_) ::close(fd);
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

int ChildWatcher::signal() const { return g_signal.load(); }

void ChildWatcher::Wake() {
  const char c = 'w';
  (void)!::write(wake_pipe_[1], &c, 1);  // a full pipe already wakes the next Wait
}

Status ChildWatcher::Watch(pid_t pid) {
  if (!use_pidfd_) {
    polled_.push_back(pid);
    return Status::Ok();
  }
  const int fd = PidfdOpen(pid);
  if (fd < 0) return Internal(std::string("pidfd_open: ") + std::strerror(errno));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // pidfds are close-on-exec already; be explicit
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return Internal(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  pidfds_[fd] = pid;
  return Status::Ok();
}

std::vector<ChildEnd> ChildWatcher::ReapPolling() {
  std::vector<ChildEnd> out;
  for (auto it = polled_.begin(); it != polled_.end();) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(*it), &info, WEXITED | WNOHANG) == 0 &&
        info.si_pid == *it) {
      out.push_back(FromSiginfo(info, protocol::MonotonicNow()));
      it = polled_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<ChildEnd> ChildWatcher::Wait(double timeout_s) {
  const int timeout_ms = static_cast<int>(std::max(0.0, timeout_s) * 1000);
  std::vector<ChildEnd> out;
  if (!use_pidfd_) {
    const double deadline = protocol::MonotonicNow() + timeout_s;
    for (;;) {
      out = ReapPolling();
      if (!out.empty() || signal() != 0 || protocol::MonotonicNow() >= deadline) return out;
      epoll_event ev{};
      if (::epoll_wait(epoll_fd_, &ev, 1, 10) > 0) {  // the signal or wake pipe, or 10 ms
        char buf[16];
        while (::read(ev.data.fd, buf, sizeof(buf)) > 0) {
        }
        return ReapPolling();
      }
    }
  }
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_fd_, events, 64, timeout_ms);
  const double now = protocol::MonotonicNow();
  for (int i = 0; i < n; ++i) {
    const int fd = events[i].data.fd;
    if (fd == g_signal_pipe[0] || fd == wake_pipe_[0]) {
      char buf[16];
      while (::read(fd, buf, sizeof(buf)) > 0) {
      }
      continue;
    }
    auto it = pidfds_.find(fd);
    if (it == pidfds_.end()) continue;
    siginfo_t info{};
    const int rc =
        ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(fd), &info, WEXITED | WNOHANG);
    if (rc == 0 && info.si_pid != 0) {
      out.push_back(FromSiginfo(info, now));
    } else if (rc != 0 && errno == ECHILD) {
      out.push_back({it->second, 1, false, now});  // reaped elsewhere: gone, status unknown
    } else {
      continue;  // spurious wake-up: keep watching
    }
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    pidfds_.erase(it);
  }
  return out;
}

}  // namespace tenax::launch
