#include "tenax/launch/launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "tenax/core/log.h"

namespace tenax::launch {
namespace {

volatile sig_atomic_t g_forward_signal = 0;  // set by the handler, read by the wait loop
void OnSignal(int sig) { g_forward_signal = sig; }

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Result<int> Launch(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return InvalidArgument("--nproc-per-node and --nnodes must be >= 1 and 0 <= --node-rank < "
                           "--nnodes");
  }
  if (o.args.empty()) {
    return InvalidArgument("nothing to launch: give the tenax command after --, e.g. "
                           "tenax launch --nproc-per-node 4 -- train --config c.toml");
  }
  std::string host = "127.0.0.1";
  int port = 0;
  if (!o.rdzv.empty()) {
    const size_t colon = o.rdzv.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument("--rdzv " + o.rdzv + ": expected HOST:PORT");
    }
    host = o.rdzv.substr(0, colon);
    port = std::atoi(o.rdzv.c_str() + colon + 1);
    if (port <= 0 || port > 65535) return InvalidArgument("--rdzv " + o.rdzv + ": bad port");
  } else if (o.nnodes > 1) {
    return InvalidArgument("--nnodes > 1 needs --rdzv HOST:PORT (the address of node 0)");
  } else {
    port = FreePort();
  }
  const int world = o.nproc_per_node * o.nnodes;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return Internal("cannot find the tenax executable (/proc/self/exe)");
  exe[n] = '\0';

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::vector<pid_t> pids(o.nproc_per_node, -1);
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    pid_t pid = ::fork();
    if (pid < 0) return Internal(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
      ::setenv("MASTER_ADDR", host.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> argv{exe};
      for (const auto& a : o.args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe, argv.data());
      std::fprintf(stderr, "tenax launch: exec %s failed: %s\n", exe, std::strerror(errno));
      ::_exit(127);
    }
    pids[local] = pid;
  }
  log::Info("launch: started ranks {}..{} of {} (store {}:{})",
            o.node_rank * o.nproc_per_node, (o.node_rank + 1) * o.nproc_per_node - 1, world, host,
            port);

  int alive = o.nproc_per_node;
  int result = 0;
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at;
  auto stop_all = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) ::kill(p, sig);
    }
  };
  while (alive > 0) {
    if (g_forward_signal != 0 && !stopping) {
      log::Info("launch: received signal {}, stopping all ranks", int(g_forward_signal));
      stop_all(g_forward_signal);
      stopping = true;
      result = 128 + g_forward_signal;
      kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(o.kill_grace_s * 1000));
    }
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int local = -1;
      for (int i = 0; i < o.nproc_per_node; ++i) {
        if (pids[i] == pid) local = i;
      }
      if (local < 0) continue;
      pids[local] = -1;
      --alive;
      const int rank = o.node_rank * o.nproc_per_node + local;
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && !stopping) {
        log::Error("launch: rank {} {}; stopping the other {} rank(s) on this node", rank,
                   Describe(status), alive);
        result = ExitCode(status);
        stop_all(SIGTERM);
        stopping = true;
        kill_at = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(o.kill_grace_s * 1000));
      }
      continue;
    }
    if (stopping && std::chrono::steady_clock::now() > kill_at) {
      stop_all(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (result != 0) {
    log::Error("launch: the job failed (exit code {})", result);
  }
  return result;
}

}  // namespace tenax::launch
