// A real Slurm cluster for tests, on one machine: Debian's slurmctld and munged in the test's own
// network namespace (on the bridge of a NetnsHosts), and one slurmd per host, each in that host's
// namespace under the node name "n<host>" with the host's address as its NodeAddr. Jobs submitted
// with Sbatch run their steps in the hosts' namespaces, as on separate machines; the shared
// filesystem is this machine's. Nothing of the machine's own Slurm setup is used or touched: the
// configuration (slurm.conf, cgroup.conf), the munge key, the state and the logs live in the
// cluster's folder, and the controller's port is free on the bridge address.
//
// Needs root (namespaces, slurmd) and Debian's slurmctld, slurmd, slurm-client and munge
// (scripts/setup installs them); Start fails with the reason otherwise, and tests GTEST_SKIP
// with it. The destructor stops the daemons (the NetnsHosts ends what still runs in the hosts).
// Non-goals: accounting (slurmdbd), cgroup confinement, GPUs (gres), more than one partition.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "netns_util.h"
#include "tenax/core/status.h"
#include "test_util.h"

namespace tenax::testing {

// Thread safety: none; one test thread owns it.
class SlurmCluster {
 public:
  // `net`'s hosts become the nodes; `dir` holds the cluster's files (it must outlive it).
  static Result<std::unique_ptr<SlurmCluster>> Start(const NetnsHosts& net, const std::string& dir);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  static std::string NodeName(int host) { return "n" + std::to_string(host); }
  // SLURM_CONF=<this cluster's slurm.conf>: a prefix for Slurm's commands (sbatch, scontrol).
  std::string Env() const { return "env SLURM_CONF=" + conf_ + " "; }
  // Runs a Slurm client command line (through /bin/sh) against this cluster.
  CommandResult Client(const std::string& command) const;
  // Submits `script` (sbatch --parsable, with `exports` as extra environment and cwd `cwd`);
  // the job id.
  Result<std::string> Sbatch(const std::string& script, const std::string& exports,
                             const std::string& cwd) const;
  // A field of `scontrol show job|node ID -o` ("JobState", "NodeList", "State", "Reason"); empty
  // when there is none.
  std::string JobField(const std::string& job, const std::string& field) const;
  std::string NodeField(const std::string& node, const std::string& field) const;
  // Waits until the job left the queue (COMPLETED, FAILED, ...); its final JobState, or "" on
  // timeout.
  std::string WaitJobEnd(const std::string& job, double timeout_s) const;
  // The controller's and the nodes' logs (for failure messages).
  std::string Logs() const;

 private:
  SlurmCluster() = default;

  std::string dir_, conf_;
  std::unique_ptr<Background> munged_, slurmctld_;
  std::vector<std::unique_ptr<Background>> slurmds_;
};

}  // namespace tenax::testing
