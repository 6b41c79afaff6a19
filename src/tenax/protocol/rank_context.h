// What `tenax launch` tells a rank process, and how: the environment at start-up and the
// standby assignment line, read once into a RankContext that the rank passes on explicitly.
// Nothing else in tenax reads these variables.
//
// Start-up environment (set by the launcher for every process it starts, see
// StandbyEnvironment):
//   TENAX_LAUNCHER_PID   the launcher's pid; present = supervised
//   TENAX_LAUNCHER_FD    read end of a pipe whose write end only the launcher holds: end of file
//                        means the launcher is gone, and the rank stops (LauncherWatch)
//   TENAX_RUN_LOCK_FD    the run folder's lock (core/run_lock.h), held by the launcher and
//                        inherited, so the folder stays owned while any process of the job lives
//   TENAX_STANDBY_FD     read end of the assignment pipe: the process starts up (tenax train also
//                        opens its data, StandbySlot), then blocks in WaitForAssignment until
//                        the launcher writes one line
//   TENAX_SLOT, TENAX_HEARTBEAT_DIR, TENAX_LAUNCH_TIME (unix seconds), TENAX_INJECT (fault spec)
//   TENAX_AGENT_SOCKET   (several nodes) the node agent's channel: rank 0 commits checkpoints
//                        through it, fenced by the generation (agent_channel.h)
//   TENAX_RAM_FOLDER     (checkpoint.memory_replicas) a tmpfs folder that lives exactly as long
//                        as the launcher (core/owned_folder.h): the ranks keep their checkpoint
//                        copies there, so ranks it restarts find them and nothing outlives it
//   TENAX_JOB_SECRET     the job's secret (random per launch; several nodes: the one the first
//                        agent put in etcd, which the agents' transfers carry): a live member
//                        signs the state it sends a replacement with it (parallel/live_group.h)
//   TENAX_LIVE_STORE     (several nodes, resilience.mode = "live") where the ranks' live groups
//                        meet: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX", the agent's etcd and a
//                        key prefix of the job's; TENAX_LIVE_STORE_CA, _CERT, _KEY: its TLS files
//                        (the agent's --rdzv-ca, --rdzv-cert, --rdzv-key), when it uses TLS
// Assignment line ("KEY=VALUE KEY=VALUE ...\n", AssignmentLine): RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's names, read by parallel/dist_env.h),
// TENAX_RESTART_COUNT (the launch generation) and TENAX_RUN_ELAPSED_S (seconds since the launch
// started, at assignment), and TENAX_LIVE_JOIN=K for a replacement that joins a running
// generation (resilience.mode = "live": it heals from a live rank, protocol/live_membership.h);
// K >= 1 is its replica's incarnation (the ranks of one data-parallel replica are replaced
// together, and its new ranks form their replica's groups under that number). The
// values are exported into the process environment, so a rank looks the same whether started by
// tenax launch, torchrun or srun. End of file without a line: the launcher no longer needs the
// standby (Unavailable).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::protocol {

inline constexpr const char* kEnvLauncherPid = "TENAX_LAUNCHER_PID";
inline constexpr const char* kEnvLauncherFd = "TENAX_LAUNCHER_FD";
inline constexpr const char* kEnvRunLockFd = "TENAX_RUN_LOCK_FD";
inline constexpr const char* kEnvStandbyFd = "TENAX_STANDBY_FD";
inline constexpr const char* kEnvSlot = "TENAX_SLOT";
inline constexpr const char* kEnvHeartbeatDir = "TENAX_HEARTBEAT_DIR";
inline constexpr const char* kEnvLaunchTime = "TENAX_LAUNCH_TIME";
inline constexpr const char* kEnvInject = "TENAX_INJECT";
inline constexpr const char* kEnvRestartCount = "TENAX_RESTART_COUNT";
inline constexpr const char* kEnvRunElapsed = "TENAX_RUN_ELAPSED_S";
inline constexpr const char* kEnvAgentSocket = "TENAX_AGENT_SOCKET";
inline constexpr const char* kEnvRamFolder = "TENAX_RAM_FOLDER";
inline constexpr const char* kEnvLiveJoin = "TENAX_LIVE_JOIN";
inline constexpr const char* kEnvJobSecret = "TENAX_JOB_SECRET";
inline constexpr const char* kEnvLiveStore = "TENAX_LIVE_STORE";
inline constexpr const char* kEnvLiveStoreCa = "TENAX_LIVE_STORE_CA";
inline constexpr const char* kEnvLiveStoreCert = "TENAX_LIVE_STORE_CERT";
inline constexpr const char* kEnvLiveStoreKey = "TENAX_LIVE_STORE_KEY";

// Several nodes: the etcd the live groups meet in (TENAX_LIVE_STORE). Empty: the heartbeat
// folder's files (one node).
struct LiveStoreAddress {
  std::vector<std::string> endpoints;  // "HOST:PORT"
  std::string prefix;                  // every key starts with it; ends in '/'
  std::string ca_file, cert_file, key_file;
  bool empty() const { return endpoints.empty(); }
  bool operator==(const LiveStoreAddress& o) const {
    return endpoints == o.endpoints && prefix == o.prefix && ca_file == o.ca_file &&
           cert_file == o.cert_file && key_file == o.key_file;
  }
};
std::string LiveStoreUrl(const LiveStoreAddress& a);  // TENAX_LIVE_STORE's value

struct RankContext {
  bool supervised = false;  // started by tenax launch
  int launcher_pid = 0;
  int launcher_fd = -1;  // -1: no liveness pipe
  int run_lock_fd = -1;  // -1: this process must lock the run folder itself
  int slot = -1;
  int generation = 0;           // 0, then 1 after the launch's first restart, ...
  double launch_time_unix = 0;  // when the launch started (0: unknown)
  double run_elapsed_s = 0;     // seconds since the launch started, at assignment
  std::string heartbeat_dir;    // empty: no beats, exit reports or fired-fault records
  std::string inject;           // fault spec (fault_injection.h); empty: none
  std::string agent_socket;     // several nodes: commit checkpoints through the agent
  std::string ram_folder;       // the launcher's RAM folder for memory replicas; empty: none
  bool live_join = false;       // a replacement joining a running generation (live recovery)
  int live_incarnation = 0;     // its replica's incarnation: 0 for the generation's first ranks
  LiveStoreAddress live_store;  // several nodes: where the live groups meet
  std::string job_secret;       // empty: not started by tenax launch
};

using GetEnv = std::function<const char*(const char*)>;

// Parses the context; a malformed value is InvalidArgument naming the variable. Absent
// variables leave the defaults (a process not started by tenax launch).
Result<RankContext> ReadRankContext(const GetEnv& getenv);
// The process's own context: first waits for the standby assignment when TENAX_STANDBY_FD is
// set (exporting it), then reads the environment. Call once, before any thread starts.
Result<RankContext> ReadRankContext();

// In a standby process not yet assigned (TENAX_STANDBY_FD set): its slot, so that it can prepare
// what needs no rank before ReadRankContext waits; nullopt otherwise.
std::optional<int> StandbySlot();

// Launcher side. The environment of a process started in `slot` (standby_fd / launcher_fd /
// lock_fd: descriptors the child inherits; -1 leaves the variable out).
struct StandbySetup {
  int slot = 0;
  int standby_fd = -1;
  int launcher_pid = 0;
  int launcher_fd = -1;
  int run_lock_fd = -1;
  double launch_time_unix = 0;
  std::string heartbeat_dir;
  std::string inject;
  std::string agent_socket;
  std::string ram_folder;
  LiveStoreAddress live_store;
  std::string job_secret;
};
std::vector<std::string> StandbyEnvironment(const StandbySetup& s);  // "KEY=VALUE" entries

struct Assignment {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string master_addr;
  int master_port = 0;
  int generation = 0;
  double run_elapsed_s = 0;
  int live_incarnation = 0;  // > 0: a live replacement, of this incarnation of its replica
};
std::string AssignmentLine(const Assignment& a);  // without the trailing newline

}  // namespace tenax::protocol
