// `tenax launch`: starts N ranks on this node as child processes of the same binary with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), forwards SIGINT/SIGTERM to them, and ends a launch generation as soon as any
// rank fails: the others get SIGTERM, then SIGKILL after a grace period, naming the rank and the
// cause. With --max-restarts K it then starts all ranks again (they resume from the newest
// checkpoint that verifies), up to K times, unless the exit code says a restart cannot help
// (bad config, missing or damaged input, divergence: docs/exit_codes.md).
// Hangs: ranks write heartbeats after every step; when no rank progresses for longer than the
// hang timeout the launcher stops the generation (cause "hang", restartable).
// Hot spares (--spares K, spares.h): standby processes started in advance take the rank of a
// failed slot; a slot failing --quarantine-after times is quarantined. Stragglers are found from
// the beats' compute times (stragglers.h). Goodput (goodput.h) is written to goodput.json in the
// run folder; the live state goes to --status-file and --metrics-port (monitor.h).
// Non-goals here: flight records naming the rank others wait for; restarts across several nodes.
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
  // goodput.json (goodput.h); empty: <run folder>/goodput.json when the ranks report a run
  // folder (`tenax train` does), on node 0.
  std::string goodput_file;
  int spares = 0;            // standby processes started in advance (--nnodes 1 only)
  int quarantine_after = 2;  // failures of one slot before it is quarantined
  std::string status_file;   // live state as JSON, rewritten about once a second; empty: none
  int metrics_port = 0;      // Prometheus text at http://HOST:PORT/metrics; 0: none
  double straggler_factor = 1.5;  // compute time over the median of the other ranks ...
  int straggler_steps = 3;        // ... for this many consecutive steps: a straggler
  bool replace_stragglers = false;  // treat a straggler as a failure of its slot
};

// Returns the job's exit code: 0 when every rank succeeded, else the first failure's code
// (128 + signal for a rank killed by a signal).
Result<int> Launch(const LaunchOptions& options);

}  // namespace tenax::launch
