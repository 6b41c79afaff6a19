#include "tenax/launch/scheduler.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "tenax/core/log.h"
#include "tenax/core/subprocess.h"

namespace tenax::launch {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// Whether `program` is an executable in PATH.
bool InPath(const std::string& program) {
  const std::string path = Env("PATH");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = path.substr(start, end - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// One line for the log: the first line of the output, trimmed.
std::string FirstLine(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

SchedulerEnv SchedulerEnv::FromEnvironment() {
  SchedulerEnv e;
  e.node = Env("SLURMD_NODENAME");
  e.job = Env("SLURM_JOB_ID");
  e.spare_request = Env("TENAX_SPARE_REQUEST");
  return e;
}

Status CheckSchedulerOptions(const SchedulerOptions& o, const SchedulerEnv& env) {
  if (o.min_spares < 0) {
    return InvalidArgument(fmt::format("--min-spares {} is invalid: must be >= 0", o.min_spares));
  }
  if (!o.drain && o.min_spares == 0) {
    if (!o.spare_job.empty()) {
      return InvalidArgument(
          "--spare-job without --min-spares K: say how many spare nodes to keep");
    }
    return Status::Ok();
  }
  const std::string flag = o.drain ? "--drain-bad-nodes" : "--min-spares";
  if (!env.slurm()) {
    return InvalidArgument(fmt::format(
        "{} tells Slurm what tenax decides, but this agent is not in a Slurm job step "
        "(SLURMD_NODENAME is unset): start it with srun (deploy/slurm/), or drop the flag",
        flag));
  }
  if (o.drain && !InPath("scontrol")) {
    return InvalidArgument(
        "--drain-bad-nodes runs scontrol, which is not in PATH on this node: install Slurm's "
        "client commands (Debian: slurm-client) or drop the flag");
  }
  if (o.min_spares > 0) {
    if (o.spare_job.empty()) {
      return InvalidArgument(
          "--min-spares needs --spare-job FILE: the sbatch script that starts a spare agent "
          "(deploy/slurm/tenax-spare.sbatch)");
    }
    if (!std::ifstream(o.spare_job).good()) {
      return InvalidArgument(fmt::format(
          "--spare-job {}: cannot read it; give the path of the sbatch script that starts a "
          "spare agent (deploy/slurm/tenax-spare.sbatch), on storage every node sees",
          o.spare_job));
    }
    if (!InPath("sbatch")) {
      return InvalidArgument(
          "--min-spares runs sbatch, which is not in PATH on this node: install Slurm's client "
          "commands (Debian: slurm-client) or drop the flag");
    }
  }
  return Status::Ok();
}

SchedulerActions::SchedulerActions(SchedulerOptions o, Runner run)
    : o_(std::move(o)), run_(std::move(run)) {
  if (!run_) {
    const std::string limit = fmt::format("{:g}", o_.command_timeout_s);
    run_ = [limit](const std::vector<std::string>& argv) -> Result<Ran> {
      std::vector<std::string> limited = {"timeout", limit};
      limited.insert(limited.end(), argv.begin(), argv.end());
      TENAX_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(limited, ""));
      // coreutils' timeout exits 124 when it had to stop the command.
      if (r.exit_code == 124) r.err = "no answer within " + limit + " s; " + r.err;
      return Ran{r.exit_code, r.out + r.err};
    };
  }
  worker_ = std::thread([this] { Loop(); });
}

SchedulerActions::~SchedulerActions() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void SchedulerActions::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit, and nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void SchedulerActions::Enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void SchedulerActions::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

std::vector<std::string> SchedulerActions::DrainCommand(const std::string& node,
                                                        const std::string& reason) {
  return {"scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=tenax: " + reason};
}

std::vector<std::string> SchedulerActions::SpareCommand(const std::string& request_id) const {
  return {"sbatch", "--parsable", "--job-name=tenax-spare-" + o_.job_id,
          "--export=ALL,TENAX_JOB_ID=" + o_.job_id + ",TENAX_SPARE_REQUEST=" + request_id,
          o_.spare_job};
}

void SchedulerActions::Drain(const std::string& node, const std::string& reason) {
  if (!o_.drain) return;
  if (node.empty()) {
    log::Warn("launch: cannot drain a node that did not run under Slurm ({})", reason);
    return;
  }
  Enqueue([this, node, reason] {
    Result<Ran> r = run_(DrainCommand(node, reason));
    if (!r.ok()) {
      log::Warn("launch: could not drain Slurm node {}: {}", node, r.status().message());
    } else if (r->exit_code != 0) {
      log::Warn("launch: scontrol could not drain Slurm node {} (exit code {}): {}", node,
                r->exit_code, FirstLine(r->output));
    } else {
      log::Info("launch: drained Slurm node {}: tenax: {}", node, reason);
    }
  });
}

void SchedulerActions::RequestSpare(const std::string& request_id,
                                    std::function<void(const Result<std::string>&)> done) {
  Enqueue([this, request_id, done = std::move(done)] {
    Result<Ran> r = run_(SpareCommand(request_id));
    Result<std::string> job = Internal("unset");
    if (!r.ok()) {
      job = r.status();
    } else if (r->exit_code != 0) {
      job = Unavailable(fmt::format("sbatch {} failed (exit code {}): {}", o_.spare_job,
                                    r->exit_code, FirstLine(r->output)));
    } else {
      // --parsable: "JOBID" or "JOBID;CLUSTER".
      std::string id = FirstLine(r->output);
      id = id.substr(0, id.find(';'));
      job = id;
    }
    if (job.ok()) {
      log::Info("launch: asked Slurm for a spare node (request {}): job {}", request_id, *job);
    } else {
      log::Warn("launch: could not ask Slurm for a spare node (request {}): {}", request_id,
                job.status().message());
    }
    if (done) done(job);
  });
}

}  // namespace tenax::launch
