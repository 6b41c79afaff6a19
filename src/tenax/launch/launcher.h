// `tenax launch`: starts N ranks on this node as child processes of the tenax binary, supervises
// them and restarts them from the newest checkpoint that verifies, as restart_policy.h allows. What
// crosses between the launcher and its ranks is the protocol module (src/tenax/protocol/); how
// a failure is attributed is attribution.h; the loop is supervisor.h. This file checks the
// request before anything starts: flags (finite, in range), the fault spec against the job, the
// train command's config, writable output paths, and the run folder's owner (one launch per run
// folder at a time). Torch-free: the launcher never loads libtorch.
// Non-goals here: restarts across several nodes.
#pragma once

#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // etcd://HOST:PORT[,HOST:PORT...]: node agents meet in etcd (node_agent.h): restarts, spare
  // nodes, lost nodes. HOST:PORT: a fixed rank-0 store and no restarts across nodes. Empty: one
  // node, a free port.
  std::string rdzv;
  std::string job_id;                        // etcd: names the job (every node gives the same)
  std::string rdzv_ca, rdzv_cert, rdzv_key;  // etcd over TLS with a client certificate
  int rdzv_lease_s = 5;           // etcd: lease TTL; a lost node is noticed within about this
  std::string rdzv_address;       // etcd: this node's address for the others (default: its own)
  double rdzv_timeout_s = 600;    // etcd: how long to wait for enough nodes
  std::vector<std::string> args;  // the tenax subcommand and its arguments, e.g. {"train", ...}
  double kill_grace_s = 5.0;      // SIGTERM to SIGKILL when stopping ranks after a failure
  // Restarts (restart_policy.h): a count with --max-restarts; without one, a budget of restarts
  // within a trailing window (--restart-budget, default 10/h). `*_given`: the flag was on the
  // command line.
  int max_restarts = 0;
  bool max_restarts_given = false;
  std::string restart_budget = "10/h";
  bool restart_budget_given = false;
  // Hang detection from the ranks' heartbeats (protocol/heartbeat.h): no rank finishing a step
  // for max(hang_timeout_s, hang_factor x the median observed step time) is a hang; before the
  // first step completes, startup_timeout_s applies instead.
  double hang_timeout_s = 300;
  double hang_factor = 10;
  double startup_timeout_s = 900;
  // After a hang is declared, how long the ranks get to dump their flight records; then every
  // rank of the generation is killed at once (a hung rank does not honour SIGTERM anyway).
  double flight_dump_s = 3;
  // A rank that finished (work done, final checkpoint committed: its `finish` beat) and has not
  // exited this long after the last rank finished is stuck in its teardown: it is named in the
  // log and goodput.json and killed, and the run ends as done (no restart).
  double exit_timeout_s = 60;
  std::string inject;  // fault spec passed to the ranks (protocol/fault_injection.h)
  // goodput.json (goodput.h); empty: <run folder>/goodput.json for `train`, on node 0.
  std::string goodput_file;
  int spares = 0;            // standby processes started in advance (--nnodes 1 only)
  int quarantine_after = 2;  // failures within the window that quarantine a slot (spares.h)
  double quarantine_window_s = 3600;  // how long a slot's failure counts
  std::string status_file;  // live state as JSON, rewritten about once a second; empty: none
  int metrics_port = 0;     // live page, /status.json and /metrics (monitor.h); 0: none
  std::string metrics_addr = "127.0.0.1";  // the address --metrics-port binds
  double straggler_factor = 1.5;           // compute time over the median of the other ranks ...
  int straggler_steps = 3;                 // ... for this many consecutive steps: a straggler
  bool replace_stragglers = false;         // treat a straggler as a failure of its slot
  // The scheduler (etcd only; scheduler.h): drain the Slurm nodes tenax stops trusting (lost,
  // replaced as stragglers), and keep `min_spares` spare nodes by submitting `spare_job`.
  bool drain_bad_nodes = false;
  int min_spares = 0;
  std::string spare_job;
};

// Every flag's value is finite and in range (names the flag and the allowed values).
Status ValidateLaunchOptions(const LaunchOptions& options);

// The scheduler's part of the flags (scheduler.h).
struct SchedulerOptions;
SchedulerOptions SchedulerOptionsOf(const LaunchOptions& options);

// Returns the job's exit code: 0 when every rank succeeded, else the failure's code (128 +
// signal for a rank killed by a signal; docs/exit_codes.md). A request that cannot work is an
// error before any process starts.
Result<int> Launch(const LaunchOptions& options);

}  // namespace tenax::launch
