// A rank never outlives its launcher. Two mechanisms, because either alone has a gap:
//   - the launcher sets PR_SET_PDEATHSIG = SIGKILL in every child before exec: the kernel kills
//     the child the moment the launcher dies (but only if it is the direct child, and set-uid
//     execs clear it);
//   - LauncherWatch: a thread blocked on the liveness pipe (RankContext::launcher_fd), whose
//     write end only the launcher holds. End of file means the launcher is gone, however the
//     process tree looks; the rank then stops at once with ExitCode::kLauncherLost.
// Non-goals: surviving a launcher restart (its successor starts fresh ranks that resume from the
// newest checkpoint).
#pragma once

#include <thread>

#include "tenax/core/wake_pipe.h"
#include "tenax/protocol/rank_context.h"

namespace tenax::protocol {

class LauncherWatch {
 public:
  // Starts watching ctx.launcher_fd; does nothing without one.
  explicit LauncherWatch(const RankContext& ctx);
  ~LauncherWatch();  // stops the thread
  LauncherWatch(const LauncherWatch&) = delete;
  LauncherWatch& operator=(const LauncherWatch&) = delete;

 private:
  void Loop(int launcher_fd, int launcher_pid);

  WakePipe stop_;  // signalled by the destructor to end the thread
  std::thread thread_;
};

}  // namespace tenax::protocol
