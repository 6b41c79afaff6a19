#include "tenax/protocol/launcher_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "tenax/protocol/protocol.h"

namespace tenax::protocol {

LauncherWatch::LauncherWatch(const RankContext& ctx) {
  if (ctx.launcher_fd < 0) return;
  if (!stop_.ok()) return;  // no watch; PR_SET_PDEATHSIG still applies
  thread_ = std::thread([this, fd = ctx.launcher_fd, pid = ctx.launcher_pid] { Loop(fd, pid); });
}

LauncherWatch::~LauncherWatch() { StopAndJoin(stop_, thread_); }

void LauncherWatch::Loop(int launcher_fd, int launcher_pid) {
  pollfd fds[2] = {{launcher_fd, POLLIN, 0}, {stop_.read_fd(), POLLIN, 0}};
  for (;;) {
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    if (fds[1].revents != 0) return;  // the destructor
    if (fds[0].revents != 0) {
      char c = 0;
      const ssize_t r = ::read(launcher_fd, &c, 1);
      if (r > 0) continue;  // the launcher never writes; ignore stray bytes
      if (r < 0 && errno == EINTR) continue;
      std::fprintf(stderr,
                   "tenax: the launcher (pid %d) is gone; stopping this rank (exit code %d)\n",
                   launcher_pid, ToInt(ExitCode::kLauncherLost));
      std::fflush(stderr);
      // No unwinding: other threads may be inside collectives whose peers are gone too.
      std::_Exit(ToInt(ExitCode::kLauncherLost));
    }
  }
}

}  // namespace tenax::protocol
