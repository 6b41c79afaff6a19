#include "tenax/launch/cli.h"

#include <CLI/CLI.hpp>
#include <memory>

#include "tenax/launch/launcher.h"

namespace tenax::launch {

void AddCommands(CLI::App& app, cli::Commands& commands) {
  auto o = std::make_shared<LaunchOptions>();
  auto* launch = app.add_subcommand(
      "launch", "start ranks on this node: tenax launch --nproc-per-node N -- train ARGS...");
  launch->add_option("--nproc-per-node", o->nproc_per_node, "ranks on this node")->required();
  launch->add_option("--nnodes", o->nnodes, "nodes in the job");
  launch->add_option("--node-rank", o->node_rank, "this node's index");
  launch->add_option("--rdzv", o->rdzv,
                     "etcd://HOST:PORT[,HOST:PORT...]: node agents meet in etcd (restarts, "
                     "spare and lost nodes); or HOST:PORT of node 0's store (fixed nodes)");
  launch->add_option("--job-id", o->job_id,
                     "with --rdzv etcd://: the job's name, the same on every node");
  launch->add_option("--rdzv-ca", o->rdzv_ca, "etcd TLS: the CA certificate");
  launch->add_option("--rdzv-cert", o->rdzv_cert, "etcd TLS: this agent's client certificate");
  launch->add_option("--rdzv-key", o->rdzv_key, "etcd TLS: this agent's client key");
  launch->add_option("--rdzv-lease", o->rdzv_lease_s,
                     "etcd lease TTL in seconds: a lost node is noticed within about this "
                     "long (default 5)");
  launch->add_option("--rdzv-address", o->rdzv_address,
                     "this node's address for the other nodes (default: its first "
                     "non-loopback IPv4, GLOO_SOCKET_IFNAME's if set)");
  launch->add_option("--rdzv-timeout", o->rdzv_timeout_s,
                     "seconds to wait for enough nodes before stopping (default 600)");
  auto* max_restarts = launch->add_option(
      "--max-restarts", o->max_restarts,
      "restart all ranks from the newest good checkpoint up to this many times (0: stop at the "
      "first failure); without it, --restart-budget decides");
  auto* budget = launch->add_option(
      "--restart-budget", o->restart_budget,
      "without --max-restarts: restart after every failure while there were fewer than N "
      "restarts in the trailing window, N/h, N/min or N/s (default 10/h)");
  launch->add_option("--inject", o->inject,
                     "fault injection for tests, e.g. crash:rank=R:step=S, "
                     "slow:rank=R:factor=F, nan:rank=R:step=S (docs/launcher_protocol.md)");
  launch->add_option("--hang-timeout", o->hang_timeout_s,
                     "seconds without progress before a hang is declared (a floor; default "
                     "300, or 10x the median step time if longer)");
  launch->add_option("--hang-factor", o->hang_factor,
                     "after the first step, a hang is no progress for the longer of "
                     "--hang-timeout and this many times the median step time (default 10)");
  launch->add_option("--startup-timeout", o->startup_timeout_s,
                     "seconds the ranks may take to their first step (loading, compiling) "
                     "before it is a hang (default 900)");
  launch->add_option("--exit-timeout", o->exit_timeout_s,
                     "seconds a rank that finished training may take to exit before it is "
                     "named as stuck in its teardown and killed; the run still counts as "
                     "done (default 60)");
  launch->add_option("--goodput-file", o->goodput_file,
                     "write the goodput report (time split, failures) here; default: "
                     "goodput.json in the run folder");
  launch->add_option("--spares", o->spares,
                     "standby processes started in advance to take a failed slot's rank");
  launch->add_option("--quarantine-after", o->quarantine_after,
                     "failures within --quarantine-window that quarantine a slot (default 2)");
  launch->add_option("--quarantine-window", o->quarantine_window_s,
                     "seconds a slot's failure counts against it (default 3600)");
  launch->add_option("--kill-grace", o->kill_grace_s,
                     "seconds between SIGTERM and SIGKILL when stopping ranks (default 5)");
  launch->add_option("--flight-dump-timeout", o->flight_dump_s,
                     "after a hang, seconds the ranks get to dump flight records before "
                     "they are killed (default 3)");
  launch->add_option("--status-file", o->status_file,
                     "rewrite the launch state as JSON here about once a second");
  launch->add_option("--metrics-port", o->metrics_port,
                     "serve the live page at http://ADDR:PORT/ and Prometheus metrics at "
                     "/metrics");
  launch->add_option("--metrics-addr", o->metrics_addr,
                     "address for --metrics-port (default 127.0.0.1: this machine only; "
                     "0.0.0.0 for every interface)");
  launch->add_option("--straggler-factor", o->straggler_factor,
                     "a rank computing this many times the median of the others is slow "
                     "(default 1.5)");
  launch->add_option("--straggler-steps", o->straggler_steps,
                     "slow for this many consecutive steps: a straggler (default 3)");
  launch->add_flag("--replace-stragglers", o->replace_stragglers,
                   "treat a straggler as a failure: a spare slot takes its rank (one node), or "
                   "a spare node its node (several nodes)");
  launch->add_flag("--drain-bad-nodes", o->drain_bad_nodes,
                   "under Slurm: drain the nodes tenax stops trusting (lost, replaced as "
                   "stragglers) with the reason, so the scheduler does not hand them out again");
  launch->add_option("--min-spares", o->min_spares,
                     "under Slurm: when a failure leaves fewer spare nodes than this, submit "
                     "--spare-job for each missing one (default 0: never)");
  launch->add_option("--spare-job", o->spare_job,
                     "the sbatch script that starts one spare agent for this job "
                     "(deploy/slurm/tenax-spare.sbatch)");
  launch->add_option("command", o->args, "the tenax command to run, after --");

  commands.Add(launch, [o, max_restarts, budget]() -> Result<int> {
    o->max_restarts_given = max_restarts->count() > 0;
    o->restart_budget_given = budget->count() > 0;
    return Launch(*o);
  });
}

}  // namespace tenax::launch
