// What a node agent tells the cluster's scheduler, and what it reads from it: the one place where
// tenax reads a scheduler's environment (SLURM_*) and runs its commands (scontrol, sbatch).
//
//   - Where this agent runs: its Slurm node (SLURMD_NODENAME), its own allocation (SLURM_JOB_ID),
//     and, for an agent started by a spare request, that request (TENAX_SPARE_REQUEST, set by the
//     agent that asked: SchedulerActions::RequestSpare). Agents publish these in their record
//     (rendezvous.h, AgentInfo), so whichever agent acts on a node knows the node's name.
//   - Draining a node tenax stopped trusting (--drain-bad-nodes): `scontrol update NodeName=N
//     State=DRAIN Reason="tenax: ..."`, so the scheduler does not hand it out again.
//   - Asking for a spare node (--min-spares K --spare-job FILE): `sbatch FILE` with the job's id
//     and the request's id in its environment; the script starts an agent that joins the job as a
//     spare (deploy/slurm/README.md).
//
// Commands run on a worker thread of this class, each under a time limit: a slow or failing
// scheduler is logged and never stops or stalls training.
// Thread safety: Drain and RequestSpare may be called from any thread; the callbacks they take run
// on the worker thread. Non-goals: schedulers other than Slurm (Kubernetes spares are replicas of
// the same Job: deploy/kubernetes/), reading the scheduler's state back.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::launch {

// Where this agent runs, as the scheduler's environment says; empty fields outside one.
struct SchedulerEnv {
  std::string node;           // SLURMD_NODENAME: the Slurm node this agent runs on
  std::string job;            // SLURM_JOB_ID: the allocation this agent runs in
  std::string spare_request;  // TENAX_SPARE_REQUEST: the request that started this agent
  static SchedulerEnv FromEnvironment();
  bool slurm() const { return !node.empty(); }
};

// The flags (launcher.h holds them as LaunchOptions; these are what this class needs of them).
struct SchedulerOptions {
  bool drain = false;             // --drain-bad-nodes
  int min_spares = 0;             // --min-spares
  std::string spare_job;          // --spare-job: the sbatch script that starts a spare agent
  std::string job_id;             // the tenax job (--job-id): the spare's agent joins it
  double command_timeout_s = 60;  // each scontrol / sbatch run
};

// Checks the flags against the environment before anything starts: --drain-bad-nodes and
// --min-spares need a Slurm job step (SLURMD_NODENAME), scontrol / sbatch in PATH, and for
// --min-spares a readable --spare-job.
Status CheckSchedulerOptions(const SchedulerOptions& o, const SchedulerEnv& env);

class SchedulerActions {
 public:
  // `run` executes one command (argv) and returns its exit code and output; the default runs it
  // under coreutils' `timeout` (tests substitute their own).
  struct Ran {
    int exit_code = 0;
    std::string output;
  };
  using Runner = std::function<Result<Ran>(const std::vector<std::string>& argv)>;
  explicit SchedulerActions(SchedulerOptions o, Runner run = nullptr);
  ~SchedulerActions();  // finishes the queued commands first
  SchedulerActions(const SchedulerActions&) = delete;
  SchedulerActions& operator=(const SchedulerActions&) = delete;

  const SchedulerOptions& options() const { return o_; }

  // Drains `node` with `reason` (prefixed "tenax: "), in the background. No-op without
  // --drain-bad-nodes or without a node name (an agent outside Slurm).
  void Drain(const std::string& node, const std::string& reason);
  // Submits the spare job for request `request_id`, in the background; `done` gets the scheduler's
  // job id (sbatch --parsable), or the error.
  void RequestSpare(const std::string& request_id,
                    std::function<void(const Result<std::string>&)> done);
  // Waits until every queued command has run (tests; the destructor).
  void Flush();

  // The commands, for tests and the log.
  static std::vector<std::string> DrainCommand(const std::string& node, const std::string& reason);
  std::vector<std::string> SpareCommand(const std::string& request_id) const;

 private:
  void Loop();
  void Enqueue(std::function<void()> task);

  // Constant after construction.
  const SchedulerOptions o_;
  Runner run_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool busy_ = false;                        // guarded by mu_: a task is running
  bool quit_ = false;                        // guarded by mu_
  std::thread worker_;                       // last: starts after the members above
};

}  // namespace tenax::launch
