// Who this process is in a multi-process job, read from the environment the way clusters already
// launch jobs: `tenax launch` and torchrun set RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE /
// MASTER_ADDR / MASTER_PORT; Slurm's srun sets SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (the
// master address then comes from MASTER_ADDR, else SLURM_LAUNCH_NODE_IPADDR).
// No variables at all means a single process (rank 0 of 1).
// Under `tenax launch` the same variables arrive in the standby assignment
// (protocol/rank_context.h), which ReadRankContext exports before this is read.
#pragma once

#include <functional>
#include <string>

#include "tenax/core/status.h"

namespace tenax::parallel {

struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // single | torchrun | slurm
  bool distributed() const { return world > 1; }
};

// `getenv` is injectable for tests.
Result<DistEnv> ReadDistEnv(const std::function<const char*(const char*)>& getenv);
Result<DistEnv> ReadDistEnv();

}  // namespace tenax::parallel
