#include "tenax/launch/launcher.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "tenax/config/config.h"
#include "tenax/config/train_command.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/run_lock.h"
#include "tenax/etcd/client.h"
#include "tenax/launch/child_watch.h"
#include "tenax/launch/node_agent.h"
#include "tenax/launch/restart_policy.h"
#include "tenax/launch/scheduler.h"
#include "tenax/launch/supervisor.h"
#include "tenax/protocol/fault_injection.h"

namespace tenax::launch {
namespace {

Status CheckFinite(const char* flag, double value, double min, bool min_inclusive,
                   const char* allowed) {
  const bool ok = std::isfinite(value) && (min_inclusive ? value >= min : value > min);
  if (ok) return Status::Ok();
  return InvalidArgument(fmt::format("{} {} is invalid: must be {}", flag, value, allowed));
}

// A file the launcher writes must be writable before any rank starts, not after the whole run.
Status CheckWritable(const char* flag, const std::string& path) {
  if (path.empty()) return Status::Ok();
  std::string dir = ParentDir(path);
  if (dir.empty()) dir = ".";
  if (Status st = LocalFs().CreateDirs(dir); !st.ok()) {
    return InvalidArgument(
        fmt::format("{} {}: cannot create its folder: {}", flag, path, st.message()));
  }
  if (std::filesystem::is_directory(path)) {
    return InvalidArgument(fmt::format("{} {} is a folder; give a file name", flag, path));
  }
  const std::string probe = path + ".tenax-probe";
  if (Status st = LocalFs().WriteFileAtomic(probe, ""); !st.ok()) {
    return InvalidArgument(
        fmt::format("{} {}: the folder is not writable ({}); choose another "
                    "path",
                    flag, path, st.message()));
  }
  std::error_code ec;
  std::filesystem::remove(probe, ec);
  return Status::Ok();
}

// What `tenax launch -- train ...` will train: the config is read here (it is torch-free) so a
// bad config stops the launch before any rank starts, and the run folder is known for its lock
// and goodput.json.
struct TrainJob {
  std::string run_dir;
  std::string checkpoint_dir;  // empty: checkpoints off
  int64_t total_steps = 0;
  bool async_checkpoints = false;
  bool memory_replicas = false;
  bool nan_restarts = false;       // training.on_nonfinite = "restart"
  bool live = false;               // resilience.mode = "live"
  ParallelismOptions parallelism;  // the layout, for live mode's checks
};
Result<std::optional<TrainJob>> ReadTrainJob(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "train") return std::optional<TrainJob>();
  TENAX_ASSIGN_OR_RETURN(TrainCommand cmd, ParseTrainCommand({args.begin() + 1, args.end()}));
  TENAX_ASSIGN_OR_RETURN(Config config, LoadTrainConfig(cmd));
  TrainJob job;
  const RunPaths paths = RunPathsOf(config);
  job.run_dir = paths.root();
  if (config.checkpoint.enable) job.checkpoint_dir = paths.checkpoints();
  job.total_steps = config.training.steps;
  job.async_checkpoints = config.checkpoint.enable && config.checkpoint.async;
  job.memory_replicas = config.checkpoint.enable && config.checkpoint.memory_replicas;
  job.nan_restarts = config.training.on_nonfinite == "restart";
  job.live = config.resilience.mode == "live";
  job.parallelism = config.parallelism;
  return std::optional<TrainJob>(job);
}

}  // namespace

Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return InvalidArgument(fmt::format(
        "--nproc-per-node {} / --nnodes {} / --node-rank {}: need --nproc-per-node >= 1, "
        "--nnodes >= 1 and 0 <= --node-rank < --nnodes",
        o.nproc_per_node, o.nnodes, o.node_rank));
  }
  if (o.args.empty()) {
    return InvalidArgument(
        "nothing to launch: give the tenax command after --, e.g. "
        "tenax launch --nproc-per-node 4 -- train --config c.toml");
  }
  if (o.max_restarts < 0) {
    return InvalidArgument(
        fmt::format("--max-restarts {} is invalid: must be >= 0", o.max_restarts));
  }
  const bool etcd = o.rdzv.rfind("etcd://", 0) == 0;
  if (o.max_restarts > 0 && o.nnodes > 1 && !etcd) {
    return InvalidArgument(
        "--max-restarts with --nnodes > 1 needs --rdzv etcd://HOST:PORT (node agents that meet "
        "in etcd); a fixed --rdzv HOST:PORT cannot restart across nodes");
  }
  TENAX_RETURN_IF_ERROR(RestartPolicy::FromOptions(o).status());
  if (o.spares < 0)
    return InvalidArgument(fmt::format("--spares {} is invalid: must be >= 0", o.spares));
  if (o.spares > 0 && o.nnodes > 1) {
    return InvalidArgument(
        "--spares with --nnodes > 1 is not supported (spares are local slots of a single-node "
        "job); on several nodes start more agents than --nnodes: the extra ones are spare nodes");
  }
  if (etcd && o.job_id.empty()) {
    return InvalidArgument("--rdzv etcd://... needs --job-id NAME (the same on every node)");
  }
  if (!o.job_id.empty() && o.job_id.find_first_of("/ ") != std::string::npos) {
    return InvalidArgument("--job-id " + o.job_id + ": no '/' or spaces");
  }
  if (o.rdzv_lease_s < 2 || o.rdzv_lease_s > 600) {
    return InvalidArgument(
        fmt::format("--rdzv-lease {} is invalid: must be 2..600 seconds", o.rdzv_lease_s));
  }
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--rdzv-timeout", o.rdzv_timeout_s, 0, false, "a number of seconds > 0"));
  if (o.quarantine_after < 1) {
    return InvalidArgument(
        fmt::format("--quarantine-after {} is invalid: must be >= 1", o.quarantine_after));
  }
  TENAX_RETURN_IF_ERROR(CheckFinite("--quarantine-window", o.quarantine_window_s, 0, false,
                                    "a number of seconds > 0"));
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--hang-timeout", o.hang_timeout_s, 0, false, "a number of seconds > 0"));
  TENAX_RETURN_IF_ERROR(CheckFinite("--hang-factor", o.hang_factor, 1, true, "a number >= 1"));
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--startup-timeout", o.startup_timeout_s, 0, false, "a number of seconds > 0"));
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--flight-dump-timeout", o.flight_dump_s, 0, true, "a number of seconds >= 0"));
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--exit-timeout", o.exit_timeout_s, 0, true, "a number of seconds >= 0"));
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--kill-grace", o.kill_grace_s, 0, true, "a number of seconds >= 0"));
  TENAX_RETURN_IF_ERROR(
      CheckFinite("--straggler-factor", o.straggler_factor, 1, false, "a number > 1"));
  if (o.straggler_steps < 1) {
    return InvalidArgument(
        fmt::format("--straggler-steps {} is invalid: must be >= 1", o.straggler_steps));
  }
  if ((o.drain_bad_nodes || o.min_spares > 0 || !o.spare_job.empty()) && !etcd) {
    return InvalidArgument(
        "--drain-bad-nodes, --min-spares and --spare-job act on the nodes of a job whose agents "
        "meet in etcd: add --rdzv etcd://HOST:PORT (deploy/slurm/ starts one)");
  }
  if (o.metrics_port < 0 || o.metrics_port > 65535) {
    return InvalidArgument(
        fmt::format("--metrics-port {} is invalid: must be a TCP port (1..65535), or 0 for none",
                    o.metrics_port));
  }
  return Status::Ok();
}

SchedulerOptions SchedulerOptionsOf(const LaunchOptions& o) {
  SchedulerOptions s;
  s.drain = o.drain_bad_nodes;
  s.min_spares = o.min_spares;
  s.spare_job = o.spare_job;
  s.job_id = o.job_id;
  return s;
}

Result<int> Launch(const LaunchOptions& o) {
  TENAX_RETURN_IF_ERROR(ValidateLaunchOptions(o));
  TENAX_RETURN_IF_ERROR(
      CheckSchedulerOptions(SchedulerOptionsOf(o), SchedulerEnv::FromEnvironment()));
  std::string host = "127.0.0.1";
  int fixed_port = 0;
  const bool etcd = o.rdzv.rfind("etcd://", 0) == 0;
  AgentOptions agent;
  if (etcd) {
    TENAX_ASSIGN_OR_RETURN(agent.etcd.endpoints, etcd::ParseEtcdUrl(o.rdzv));
    agent.etcd.ca_file = o.rdzv_ca;
    agent.etcd.cert_file = o.rdzv_cert;
    agent.etcd.key_file = o.rdzv_key;
    agent.job_id = o.job_id;
    agent.lease_ttl_s = o.rdzv_lease_s;
    agent.address = o.rdzv_address;
    agent.nodes_timeout_s = o.rdzv_timeout_s;
  } else if (!o.rdzv.empty()) {
    const size_t colon = o.rdzv.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument("--rdzv " + o.rdzv + ": expected HOST:PORT");
    }
    host = o.rdzv.substr(0, colon);
    char* end = nullptr;
    const long port = std::strtol(o.rdzv.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) {
      return InvalidArgument("--rdzv " + o.rdzv + ": the port must be 1..65535");
    }
    fixed_port = static_cast<int>(port);
  } else if (o.nnodes > 1) {
    return InvalidArgument("--nnodes > 1 needs --rdzv HOST:PORT (the address of node 0)");
  }

  // Everything the request names must work before a process starts.
  TENAX_ASSIGN_OR_RETURN(std::optional<TrainJob> train, ReadTrainJob(o.args));
  JobInfo job;
  if (train) {
    job.run_dir = train->run_dir;
    job.checkpoint_dir = train->checkpoint_dir;
    job.total_steps = train->total_steps;
    job.memory_replicas = train->memory_replicas;
    job.live = train->live;
  }
  if (job.live && o.nnodes > 1 && !etcd) {
    return InvalidArgument(
        "resilience.mode = \"live\" on several nodes needs the node agents (--rdzv "
        "etcd://HOST:PORT): they keep the job's membership in etcd; set resilience.mode = "
        "\"restart\" for --rdzv HOST:PORT");
  }
  if (job.live && o.nproc_per_node < 2) {
    return InvalidArgument(
        "resilience.mode = \"live\" needs at least 2 ranks (--nproc-per-node): a replica must "
        "survive the failure of another");
  }
  if (job.live) {
    // The ranks check these too (and what only they know: the device, the model); said here,
    // before any of them starts.
    const ParallelismOptions& p = train->parallelism;
    const int64_t world = static_cast<int64_t>(o.nproc_per_node) * o.nnodes;
    const int64_t inner = p.tensor_parallel * p.pipeline_parallel * p.context_parallel;
    const int64_t shard = ResolvedDataParallelShard(p, world);
    if (p.data_parallel_replicate < 2 || inner < 1 ||
        p.data_parallel_replicate * shard * inner != world) {
      return InvalidArgument(fmt::format(
          "resilience.mode = \"live\" needs data-parallel replicas that can outlive each other "
          "(DDP, or HSDP, each replica split by tensor, pipeline or context parallelism or not): "
          "parallelism.data_parallel_replicate >= 2 and data_parallel_replicate x "
          "data_parallel_shard x tensor_parallel x pipeline_parallel x context_parallel = the "
          "world ({}), not {} x {} x {} x {} x {}; change the layout or set resilience.mode = "
          "\"restart\"",
          world, p.data_parallel_replicate, p.data_parallel_shard, p.tensor_parallel,
          p.pipeline_parallel, p.context_parallel));
    }
    job.live_replica_ranks = static_cast<int>(shard * inner);
    if (o.nproc_per_node % job.live_replica_ranks != 0) {
      return InvalidArgument(fmt::format(
          "resilience.mode = \"live\" replaces a data-parallel replica's ranks together on its "
          "node, so a replica ({} ranks: the world over parallelism.data_parallel_replicate) must "
          "not span nodes: --nproc-per-node {} must be a multiple of it",
          job.live_replica_ranks, o.nproc_per_node));
    }
    if (train->async_checkpoints) {
      return InvalidArgument(
          "resilience.mode = \"live\" needs checkpoint.async = false (an asynchronous save "
          "waits for every rank's files); set it, or resilience.mode = \"restart\"");
    }
  }
  if (!o.inject.empty()) {
    TENAX_ASSIGN_OR_RETURN(job.faults, protocol::ParseFaults(o.inject));
    TENAX_ASSIGN_OR_RETURN(RestartPolicy restarts, RestartPolicy::FromOptions(o));
    protocol::JobShape shape;
    shape.world = o.nproc_per_node * o.nnodes;
    shape.total_steps = job.total_steps;
    shape.max_restarts = restarts.max_generation();
    shape.nnodes = etcd ? o.nnodes : 1;
    shape.nan_restarts = train && train->nan_restarts;
    shape.restart_budget_per_s = restarts.budget_per_second();
    shape.live = job.live;
    shape.live_replica_ranks = job.live ? job.live_replica_ranks : 1;
    TENAX_RETURN_IF_ERROR(protocol::ValidateFaults(job.faults, shape));
  }
  if (etcd && train && train->async_checkpoints) {
    return InvalidArgument(
        "checkpoint.async = true is not supported across several nodes yet (each node's ranks "
        "commit through their node agent); set checkpoint.async = false");
  }
  job.goodput_path = o.goodput_file;
  // On several nodes with etcd, whichever agent holds node rank 0 writes it.
  if (job.goodput_path.empty() && !job.run_dir.empty() && (o.node_rank == 0 || etcd)) {
    job.goodput_path = RunPaths(job.run_dir).goodput();
  }
  TENAX_RETURN_IF_ERROR(CheckWritable("--goodput-file", o.goodput_file));
  TENAX_RETURN_IF_ERROR(CheckWritable("--status-file", o.status_file));
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return Internal("cannot find the tenax executable (/proc/self/exe)");
  exe[n] = '\0';

  // One owner per run folder: taken before anything in it is touched, held (and inherited by
  // every rank) until the last process of this launch is gone. Node 0 owns it; on other nodes
  // the folder may be shared storage.
  std::optional<RunLock> lock;
  // (Several nodes with etcd: the job id owns the run, and commits are fenced by generation.)
  if (!job.run_dir.empty() && o.node_rank == 0 && !etcd) {
    std::string command = "tenax launch";
    for (const auto& a : o.args) command += " " + a;
    TENAX_ASSIGN_OR_RETURN(lock, RunLock::Acquire(job.run_dir, command));
    job.run_lock = &*lock;
  }
  if (!job.goodput_path.empty()) {
    // Earlier launches of this run (a requeue, or a launcher that was killed).
    auto text = LocalFs().ReadFile(job.goodput_path);
    if (text.ok()) {
      job.previous_goodput = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (job.previous_goodput.is_discarded()) {
        log::Warn("launch: {} is not readable JSON; starting a new goodput record",
                  job.goodput_path);
        job.previous_goodput = nullptr;
      }
    }
  }
  ::signal(SIGPIPE, SIG_IGN);  // a standby that died must not kill the launcher on Assign
  if (etcd) {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    return RunNodeAgent(o, std::move(job), std::move(agent), name, exe);
  }
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<ChildWatcher> watcher, ChildWatcher::Create());
  Supervisor supervisor(o, std::move(job), host, fixed_port, exe, std::move(watcher));
  return supervisor.Run();
}

}  // namespace tenax::launch
