// `tenax launch`: starts N ranks on this node as child processes of the same binary with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), forwards SIGINT/SIGTERM to them, and ends a launch generation as soon as any
// rank fails: the others get SIGTERM, then SIGKILL after a grace period, naming the rank and the
// cause. With --max-restarts K it then starts all ranks again (they resume from the newest
// checkpoint that verifies), up to K times, unless the exit code says a restart cannot help
// (bad config, missing or damaged input, divergence: docs/exit_codes.md).
// Hangs: ranks write heartbeats after every step; when no rank progresses for longer than the
// hang timeout the launcher stops the generation (cause "hang", restartable).
// Non-goals here: hot spares, flight records naming the rank others wait for, stragglers
// (the resilience issue builds on this); restarts across several nodes.
#pragma once

#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string rdzv;               // HOST:PORT of rank 0's store; empty: this node, a free port
  std::vector<std::string> args;  // the tenax subcommand and its arguments, e.g. {"train", ...}
  double kill_grace_s = 5.0;
  int max_restarts = 0;
  // Hang detection from the ranks' heartbeats (core/heartbeat.h): no rank finishing a step for
  // max(hang_timeout_s, hang_factor x the median observed step time) is a hang; before the first
  // step completes, startup_timeout_s applies instead.
  double hang_timeout_s = 300;
  double hang_factor = 10;
  double startup_timeout_s = 900;
  std::string inject;        // fault spec passed to the ranks (core/fault_injection.h)
  std::string goodput_file;  // where to write the failure/restart record (JSON); empty: none
};

// Returns the job's exit code: 0 when every rank succeeded, else the first failure's code
// (128 + signal for a rank killed by a signal).
Result<int> Launch(const LaunchOptions& options);

}  // namespace tenax::launch
