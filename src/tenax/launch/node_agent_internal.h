// Internals of the node agent (node_agent.h), shared by its .cc files; not an API for other
// code. The NodeAgent class, whose methods are split by responsibility:
//   node_agent.cc              construction, registration, etcd events, Run (the generations'
//                              loop) and RunNodeAgent
//   node_agent_rendezvous.cc   generations: join and plan, advance, record lost nodes, stop, and
//                              the checkpoint commits that only the current generation may make
//   node_agent_progress.cc     progress across nodes, stragglers, remote hangs, failure reports
//   node_agent_checkpoints.cc  checkpoint files between nodes: resume preparation, replicas
//   node_agent_goodput.cc      goodput.json from etcd, and the failure each generation ended by
// plus the small helpers those files share.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tenax/core/owned_folder.h"
#include "tenax/core/status.h"
#include "tenax/etcd/client.h"
#include "tenax/launch/launcher.h"
#include "tenax/launch/node_agent.h"
#include "tenax/launch/rendezvous.h"
#include "tenax/launch/stragglers.h"
#include "tenax/launch/supervisor.h"
#include "tenax/protocol/agent_channel.h"
#include "tenax/protocol/protocol.h"
#include "tenax/transfer/checkpoint_sync.h"

namespace tenax::launch::agent_internal {

constexpr double kPollS = 0.5;  // re-read etcd at least this often while waiting
// How often an active agent publishes its ranks' progress, and node 0's agent reads everyone's:
// a ranks' beat holds its last 16 steps, so steps of up to 32 per second are all seen.
constexpr double kProgressS = 0.5;
// Each read or write between agents (checkpoint files, replicas): a peer stopped mid-transfer
// (SIGSTOP, a hung host) fails after this long instead of holding a push, or the agent's exit,
// for the library's default 30 s. Generous for a healthy network: it bounds one read, not a file.
constexpr std::chrono::milliseconds kPeerIoTimeout{5000};
// An agent's replica folder is /dev/shm/<this><job id>-<agent id> (see OwnedFolder).
constexpr char kReplicaFolderPrefix[] = "tenax-replicas-";

// --- helpers -----------------------------------------------------------------------------------

// etcd is briefly unavailable while a member is lost and a new leader is elected (about a second
// with default settings): retry what must not fail for that, for up to `budget_s`. Only
// Unavailable is retried; every operation retried here is safe to repeat (idempotent, or a
// compare-and-swap whose repeat after an unknown outcome is harmless).
template <typename F>
auto Retry(F fn, double budget_s = 30) -> decltype(fn()) {
  const double deadline = protocol::MonotonicNow() + budget_s;
  double pause = 0.1;
  for (;;) {
    auto r = fn();
    if (r.ok() || r.status().code() != StatusCode::kUnavailable ||
        protocol::MonotonicNow() + pause > deadline) {
      return r;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    pause = std::min(pause * 2, 1.0);
  }
}

inline int64_t ParseInt(const std::string& s, int64_t fallback) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return (end != s.c_str() && *end == '\0') ? v : fallback;
}

// The last path component of every key in `r` (keys under `prefix`: agents/<id>, slow/<id>).
inline std::set<std::string> IdsUnder(const etcd::RangeResponse& r, const std::string& prefix) {
  std::set<std::string> ids;
  for (const etcd::KeyValue& kv : r.kvs) ids.insert(kv.key.substr(prefix.size()));
  return ids;
}

// The readable agents/<id> records of `r`, by agent id.
inline std::map<std::string, rdzv::AgentInfo> AgentRecords(const etcd::RangeResponse& r) {
  std::map<std::string, rdzv::AgentInfo> agents;
  for (const etcd::KeyValue& kv : r.kvs) {
    if (auto info = rdzv::AgentInfo::FromJson(kv.value); info.ok()) agents[info->id] = *info;
  }
  return agents;
}

// --- the agent ---------------------------------------------------------------------------------

// One node's agent (node_agent.h tells the protocol between agents). Thread safety: Run, and
// what it calls (the supervisor's hooks included: AwaitRemoteHang, the StopFn), on one thread.
// Other threads: the etcd watcher (OnEvents, then PushReplicas) and the lease keeper's callback
// only update what is guarded by mu_ and wake the waiters; the agent channel's thread calls
// Commit; the progress thread (ProgressLoop) reads the running generation under mu_ and hands
// back a reason to stop it (straggler_stop_).
class NodeAgent {
 public:
  NodeAgent(const LaunchOptions& o, JobInfo job, AgentOptions a, std::string host, std::string exe)
      : o_(o), a_(std::move(a)), keys_(a_.job_id), host_(std::move(host)) {
    job_ = std::move(job);
    exe_ = std::move(exe);
  }
  ~NodeAgent();
  Result<int> Run();

 private:
  // Run's phases (node_agent.cc). Each returns the code Run is to exit with, or nullopt to go on.
  // Before the first generation: the job's fixed facts in etcd, this node's checkpoint file
  // server, the lease, the watcher, the supervisor and the agent channel; 0 when the job had
  // already finished.
  Result<std::optional<int>> Start();
  // After this agent lost its lease (fenced): registers under a new one (until --rdzv-timeout)
  // and records the partition of the generation it was active in; the stop code when the job
  // ended meanwhile.
  Result<std::optional<int>> RegisterAgain();
  // A spare in generation g: waits until the job finishes (0) or g stops holding; records the
  // active nodes lost meanwhile.
  Result<std::optional<int>> WaitAsSpare(int64_t g, const rdzv::Plan& plan);
  // Node `node_rank` of generation g: node 0's store address, the checkpoint folder ready, the
  // ranks run until they end or g stops holding, then how g ended recorded in etcd; 0 when every
  // node finished the job.
  Result<std::optional<int>> RunActive(int64_t g, const rdzv::Plan& plan, int node_rank);
  // The running generation still holds: not moved on, not stopped, lease held, no node lost.
  bool StillCurrent();

  Status Register();
  void OnEvents(const std::vector<etcd::WatchEvent>& events);
  Result<int64_t> CurrentGeneration();
  // Waits until `done()` is true, re-checking whenever etcd changed (and at least every
  // kPollS); false after `timeout_s`.
  bool WaitUntil(const std::function<bool()>& done, double timeout_s);
  // Joins generation g and waits for its plan; nullopt when g is no longer current, the job
  // stopped, or the lease was lost.
  Result<std::optional<rdzv::Plan>> Rendezvous(int64_t g);
  void LogFailureOf(int64_t g);
  Result<std::optional<rdzv::StopRecord>> ReadStop();
  Status Stop(int code, const std::string& reason);
  // After g failed: the next generation, or the job's end.
  Status Advance(int64_t g, int code, const std::string& why);
  Status RecordLost(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& lost);
  Status Commit(int64_t generation, int64_t step, const nlohmann::json& manifest);
  // Before this node's ranks resume: its checkpoint folder holds exactly the job's commits (a
  // commit etcd does not know is moved aside) and the newest one complete, its missing files
  // fetched from the other nodes' folders and RAM replicas.
  Status PrepareCheckpoints(int64_t g);
  // A new commit: this node's files of it go to the next node's RAM (replicas), in the background.
  void PushReplicas(const std::string& commit_json);
  std::vector<transfer::FilePeer> Peers();
  void PublishReport(int64_t g, int node_rank, const Supervisor::Outcome& out);
  // This node's account of a failure its ranks saw (failures/<G>/<id>).
  rdzv::FailureReport ReportOf(const Verdict& v, int node_rank) const;
  // Supervisor's RemoteHangFn: this node's ranks hang waiting for a rank elsewhere. Records this
  // node's (secondary) evidence without moving the generation, then waits until another node
  // names the culprit (or the generation moves, or `budget_s` passes) before they are killed.
  void AwaitRemoteHang(const Verdict& v, double budget_s);
  // Progress across nodes, on a thread of its own so that etcd's latency never stalls the
  // supervision loop: every kProgressS it publishes this node's ranks' compute times of the
  // running generation (gen/<G>/progress/<node>); node 0's agent also finds stragglers among
  // every rank of the job from everyone's (a whole slow node looks normal to its own launcher).
  void ProgressLoop();
  // Node 0's view of one generation's stragglers.
  struct Judge {
    int64_t generation = -1;
    std::unique_ptr<StragglerDetector> detector;  // over every rank of the job
    std::map<int, rdzv::FailureReport> pending;   // node -> its straggling, to be replaced
    bool said_no_spare = false;
  };
  // Node 0: the stragglers in what the nodes published for g. With --replace-stragglers, once a
  // spare node is ready (now or later), a straggler's node is marked slow (a spare of last
  // resort), the failure recorded and g ended; returns the reason to stop g then.
  std::optional<std::string> JudgeStragglers(int64_t g, const rdzv::Plan& plan, Judge* judge);
  void WriteGoodput(bool ended, int code);
  double WallNow() const { return protocol::WallNow(); }

  // The members keep the order they had when this class was private to node_agent.cc: the
  // implicit destruction after ~NodeAgent runs in reverse of it (pusher_ and files_ before
  // etcd_, the mutex last).

  // Constant after construction.
  const LaunchOptions& o_;
  const AgentOptions a_;
  const rdzv::Keys keys_;
  const std::string host_;
  JobInfo job_;
  std::string exe_;

  // Set up by Run before the watcher, the lease keeper's callback or the progress thread can
  // use them, then only read; keeper_ is replaced by Run's thread alone (Register after fencing).
  std::unique_ptr<etcd::EtcdClient> etcd_;
  std::unique_ptr<etcd::EtcdLeaseKeeper> keeper_;
  std::unique_ptr<etcd::EtcdWatcher> watcher_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<protocol::AgentChannelServer> channel_;
  std::unique_ptr<OwnedFolder> replica_folder_;  // the RAM folder files_ keeps replicas in
  std::unique_ptr<transfer::CheckpointFileServer>
      files_;                                        // this node's checkpoint files, for peers
  std::unique_ptr<transfer::ReplicaPusher> pusher_;  // this node's files of each commit, to a peer
  std::string secret_;
  std::string replica_root_;
  rdzv::AgentInfo info_;
  double job_start_unix_ = 0;
  // Run's thread only (the rendezvous, the failure records and the supervision loop's hooks).
  rdzv::Plan last_plan_;  // the newest plan this agent saw (whose losses it may record)
  std::map<std::string, std::string> hosts_;  // agent id -> host, as last seen in agents/
  int64_t last_plan_gen_ = -1;
  bool fenced_ = false;  // this agent lost its lease while active in last_plan_gen_
  double fenced_at_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;  // notified on every change below (and on quit_)
  // Guarded by mu_: what the watcher and the lease keeper saw.
  uint64_t changes_ = 0;
  bool lease_lost_ = false;
  bool stopped_ = false;
  int64_t running_ = -1;                           // the generation whose ranks run here (-1: none)
  bool moved_ = false;                             // the generation key left `running_`
  std::set<std::string> active_;                   // agents active in `running_`
  std::set<std::string> lost_;                     // ... whose agents/<id> key vanished
  std::map<std::string, rdzv::AgentInfo> agents_;  // live agents as last read
  int node_rank_ = -1;                             // this node's in `running_`
  std::vector<std::string> plan_nodes_;            // `running_`'s plan
  rdzv::Plan running_plan_;                        // ... all of it
  int64_t lease_id_ = 0;                           // the lease this agent's keys hang on
  // The progress thread's: the running generation's beats (copied by the StopFn on the
  // supervision loop's thread), a reason to stop it (a straggler node replaced), and quitting.
  std::vector<protocol::Beat> beats_;
  std::optional<std::string> straggler_stop_;
  bool quit_ = false;
  // Owned threads (the watcher and the lease keeper own theirs).
  std::thread progress_;  // ProgressLoop: started by Run, joined first by the destructor
};

}  // namespace tenax::launch::agent_internal
