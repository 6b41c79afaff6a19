#include "tenax/launch/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "tenax/core/fault_injection.h"
#include "tenax/core/heartbeat.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/net.h"

namespace tenax::launch {
namespace {

volatile sig_atomic_t g_forward_signal = 0;  // set by the handler, read by the wait loop
void OnSignal(int sig) { g_forward_signal = sig; }


std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Exit codes after which starting again cannot help (docs/exit_codes.md).
bool Restartable(int code) { return code != 2 && code != 3 && code != 4 && code != 7; }

double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct GenerationResult {
  int exit_code = 0;
  int failed_rank = -1;
  std::string cause;
  double start_s = 0, end_s = 0;
  bool interrupted = false;  // the launcher itself was told to stop
  double detection_s = 0;    // hangs: how long the job was silent before the launcher acted
};

GenerationResult RunGeneration(const LaunchOptions& o, int generation, const std::string& host,
                               int port, const char* exe) {
  GenerationResult g;
  g.start_s = Now();
  const int world = o.nproc_per_node * o.nnodes;
  // Heartbeats: a fresh folder per generation, read every 250 ms.
  std::string hb_dir = "/tmp/tenax-heartbeat-XXXXXX";
  const bool watching = ::mkdtemp(hb_dir.data()) != nullptr;
  std::vector<int64_t> last_step(o.nproc_per_node, -1);
  double last_progress = Now();  // launcher clock of the newest step change on any rank
  double last_check = 0;
  bool any_step_done = false;
  std::vector<double> intervals;  // seconds between step completions (rank 0 of this node)
  std::vector<pid_t> pids(o.nproc_per_node, -1);
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    pid_t pid = ::fork();
    if (pid < 0) {
      g.exit_code = 1;
      g.cause = std::string("fork failed: ") + std::strerror(errno);
      return g;
    }
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
      ::setenv("MASTER_ADDR", host.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TENAX_RESTART_COUNT", std::to_string(generation).c_str(), 1);
      if (watching) ::setenv("TENAX_HEARTBEAT_DIR", hb_dir.c_str(), 1);
      if (!o.inject.empty()) ::setenv("TENAX_INJECT", o.inject.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(exe)};
      for (const auto& a : o.args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe, argv.data());
      std::fprintf(stderr, "tenax launch: exec %s failed: %s\n", exe, std::strerror(errno));
      ::_exit(127);
    }
    pids[local] = pid;
  }
  log::Info("launch: generation {}: started ranks {}..{} of {} (store {}:{})", generation,
            o.node_rank * o.nproc_per_node, (o.node_rank + 1) * o.nproc_per_node - 1, world, host,
            port);
  int alive = o.nproc_per_node;
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at;
  auto stop_all = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) ::kill(p, sig);
    }
  };
  auto begin_stop = [&](int sig) {
    stop_all(sig);
    stopping = true;
    kill_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<int>(o.kill_grace_s * 1000));
  };
  while (alive > 0) {
    if (g_forward_signal != 0 && !stopping) {
      log::Info("launch: received signal {}, stopping all ranks", int(g_forward_signal));
      g.exit_code = 128 + g_forward_signal;
      g.interrupted = true;
      begin_stop(g_forward_signal);
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
        g.exit_code = ExitCode(status);
        g.failed_rank = rank;
        g.cause = Describe(status);
        begin_stop(SIGTERM);
      }
      continue;
    }
    if (watching && !stopping && Now() - last_check > 0.25) {
      last_check = Now();
      for (int i = 0; i < o.nproc_per_node; ++i) {
        auto beat = ReadHeartbeat(hb_dir, o.node_rank * o.nproc_per_node + i);
        if (!beat || beat->step == last_step[i]) continue;
        if (i == 0 && last_step[0] >= 0) intervals.push_back(Now() - last_progress);
        any_step_done = any_step_done || last_step[i] >= 0;
        last_step[i] = beat->step;
        last_progress = Now();
      }
      double timeout = o.startup_timeout_s;
      if (any_step_done && !intervals.empty()) {
        std::vector<double> sorted = intervals;
        std::sort(sorted.begin(), sorted.end());
        timeout = std::max(o.hang_timeout_s, o.hang_factor * sorted[sorted.size() / 2]);
      }
      const double quiet = Now() - last_progress;
      if (quiet > timeout) {
        std::string steps;
        for (int i = 0; i < o.nproc_per_node; ++i) {
          steps += fmt::format("{}rank {} at step {}", i ? ", " : "",
                               o.node_rank * o.nproc_per_node + i, last_step[i]);
        }
        log::Error("launch: hang: no rank finished a step for {:.1f}s (timeout {:.1f}s); {}; "
                   "stopping all ranks",
                   quiet, timeout, steps);
        g.exit_code = 124;
        g.cause = fmt::format("hang: no progress for {:.1f}s", quiet);
        g.detection_s = quiet;
        // The lowest step is the likeliest culprit; equal steps leave it undetermined.
        const auto low = std::min_element(last_step.begin(), last_step.end());
        if (std::count(last_step.begin(), last_step.end(), *low) == 1) {
          g.failed_rank = o.node_rank * o.nproc_per_node + static_cast<int>(low - last_step.begin());
        }
        begin_stop(SIGTERM);
      }
    }
    if (stopping && std::chrono::steady_clock::now() > kill_at) {
      stop_all(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g.end_s = Now();
  if (watching) {
    std::error_code ec;
    std::filesystem::remove_all(hb_dir, ec);
  }
  return g;
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
  if (o.max_restarts < 0) return InvalidArgument("--max-restarts must be >= 0");
  if (o.max_restarts > 0 && o.nnodes > 1) {
    return InvalidArgument("--max-restarts with --nnodes > 1 is not supported yet (restarts need "
                           "a rendezvous across nodes); use one node or restart the job "
                           "from your scheduler");
  }
  if (!o.inject.empty()) TENAX_RETURN_IF_ERROR(ParseFaults(o.inject).status());
  std::string host = "127.0.0.1";
  int fixed_port = 0;
  if (!o.rdzv.empty()) {
    const size_t colon = o.rdzv.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument("--rdzv " + o.rdzv + ": expected HOST:PORT");
    }
    host = o.rdzv.substr(0, colon);
    fixed_port = std::atoi(o.rdzv.c_str() + colon + 1);
    if (fixed_port <= 0 || fixed_port > 65535) {
      return InvalidArgument("--rdzv " + o.rdzv + ": bad port");
    }
  } else if (o.nnodes > 1) {
    return InvalidArgument("--nnodes > 1 needs --rdzv HOST:PORT (the address of node 0)");
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return Internal("cannot find the tenax executable (/proc/self/exe)");
  exe[n] = '\0';

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  const double t0 = Now();
  nlohmann::json failures = nlohmann::json::array();
  nlohmann::json generations = nlohmann::json::array();
  int result = 0;
  for (int gen = 0;; ++gen) {
    // A fresh store port each generation: the old one may linger in TIME_WAIT.
    const int port = fixed_port > 0 ? fixed_port : FreeTcpPort();
    GenerationResult g = RunGeneration(o, gen, host, port, exe);
    generations.push_back({{"generation", gen},
                           {"start_s", g.start_s - t0},
                           {"end_s", g.end_s - t0},
                           {"exit_code", g.exit_code}});
    result = g.exit_code;
    if (g.exit_code == 0 || g.interrupted) break;
    failures.push_back({{"time_s", g.end_s - t0},
                        {"generation", gen},
                        {"rank", g.failed_rank},
                        {"kind", g.exit_code == 124 ? "hang" : "crash"},
                        {"cause", g.cause},
                        {"detection_s", g.detection_s},
                        {"exit_code", g.exit_code}});
    if (!Restartable(g.exit_code)) {
      log::Error("launch: exit code {} means the input must be fixed (docs/exit_codes.md); "
                 "not restarting",
                 g.exit_code);
      break;
    }
    if (gen >= o.max_restarts) {
      if (o.max_restarts > 0) {
        log::Error("launch: no restarts left ({} used); stopping with exit code {}",
                   o.max_restarts, g.exit_code);
      }
      break;
    }
    log::Info("launch: restart {} of {}: all ranks start again from the newest good checkpoint",
              gen + 1, o.max_restarts);
  }
  const double wall = Now() - t0;
  log::Info("launch: {} in {:.1f}s with {} failure(s) and {} restart(s)",
            result == 0 ? "finished" : "failed", wall, failures.size(),
            generations.size() - 1);
  if (!o.goodput_file.empty()) {
    nlohmann::json report = {{"wall_s", wall},
                             {"exit_code", result},
                             {"restarts", generations.size() - 1},
                             {"generations", generations},
                             {"failures", failures}};
    TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(o.goodput_file, report.dump(2) + "\n"));
  }
  if (result != 0) log::Error("launch: the job failed (exit code {})", result);
  return result;
}

}  // namespace tenax::launch
