#include "tenax/parallel/dist_env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tenax::parallel {
namespace {

Result<int> ParseInt(const char* name, const char* value, int min) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < min) {
    return InvalidArgument(
        fmt::format("environment variable {}={} is not an integer >= {}", name, value, min));
  }
  return static_cast<int>(v);
}

}  // namespace

Result<DistEnv> ReadDistEnv(const std::function<const char*(const char*)>& getenv) {
  DistEnv env;
  auto get = [&](const char* n) -> const char* {
    const char* v = getenv(n);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  const char* rank = get("RANK");
  const char* world = get("WORLD_SIZE");
  if (rank || world) {
    if (!rank || !world) {
      return InvalidArgument(
          "RANK and WORLD_SIZE must be set together (torchrun-style launch); "
          "set both, or neither for a single process");
    }
    env.source = "torchrun";
    TENAX_ASSIGN_OR_RETURN(env.rank, ParseInt("RANK", rank, 0));
    TENAX_ASSIGN_OR_RETURN(env.world, ParseInt("WORLD_SIZE", world, 1));
    if (const char* lr = get("LOCAL_RANK")) {
      TENAX_ASSIGN_OR_RETURN(env.local_rank, ParseInt("LOCAL_RANK", lr, 0));
    }
    env.local_world = env.world;
    if (const char* lw = get("LOCAL_WORLD_SIZE")) {
      TENAX_ASSIGN_OR_RETURN(env.local_world, ParseInt("LOCAL_WORLD_SIZE", lw, 1));
    }
  } else if (const char* procid = get("SLURM_PROCID")) {
    env.source = "slurm";
    TENAX_ASSIGN_OR_RETURN(env.rank, ParseInt("SLURM_PROCID", procid, 0));
    const char* ntasks = get("SLURM_NTASKS");
    if (!ntasks) return InvalidArgument("SLURM_PROCID is set but SLURM_NTASKS is not");
    TENAX_ASSIGN_OR_RETURN(env.world, ParseInt("SLURM_NTASKS", ntasks, 1));
    if (const char* lr = get("SLURM_LOCALID")) {
      TENAX_ASSIGN_OR_RETURN(env.local_rank, ParseInt("SLURM_LOCALID", lr, 0));
    }
    env.local_world = env.world;
    if (const char* tpn = get("SLURM_NTASKS_PER_NODE")) {
      // "4" or "4(x2)": the count before any parenthesis.
      env.local_world = std::max(1, std::atoi(tpn));
    }
    if (!get("MASTER_ADDR")) {
      if (const char* ip = get("SLURM_LAUNCH_NODE_IPADDR")) env.master_addr = ip;
    }
  } else {
    return env;  // single process
  }
  if (const char* addr = get("MASTER_ADDR")) env.master_addr = addr;
  if (const char* port = get("MASTER_PORT")) {
    TENAX_ASSIGN_OR_RETURN(env.master_port, ParseInt("MASTER_PORT", port, 1));
  }
  if (env.rank >= env.world) {
    return InvalidArgument(
        fmt::format("rank {} is not below the world size {}", env.rank, env.world));
  }
  return env;
}

Result<DistEnv> ReadDistEnv() {
  return ReadDistEnv([](const char* n) { return std::getenv(n); });
}

}  // namespace tenax::parallel
