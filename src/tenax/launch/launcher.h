// `tenax launch`: starts N ranks on this node as child processes of the same binary with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), forwards SIGINT/SIGTERM to them, and ends the job as soon as any rank fails:
// the others get SIGTERM, then SIGKILL after a grace period, and the launcher exits with the
// failed rank's code after naming the rank and the cause.
// Non-goals here: restarting, hot spares, heartbeats (the resilience issue builds on this).
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
};

// Returns the job's exit code: 0 when every rank succeeded, else the first failure's code
// (128 + signal for a rank killed by a signal).
Result<int> Launch(const LaunchOptions& options);

}  // namespace tenax::launch
