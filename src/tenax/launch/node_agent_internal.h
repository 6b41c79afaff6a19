// Internals of the node agent (node_agent.h), shared by its .cc files; not an API for other
// code. The NodeAgent class, whose methods are split by responsibility:
//   node_agent.cc              construction, registration, etcd events, Run (the generations'
//                              loop) and RunNodeAgent
//   node_agent_rendezvous.cc   generations: join and plan, advance, record lost nodes, stop, and
//                              the checkpoint commits that only the current generation may make
//   node_agent_progress.cc     progress across nodes, stragglers (etcd around StragglerJudge),
//                              remote hangs, failure reports
//   node_agent_checkpoints.cc  checkpoint files between nodes (etcd and the agent's view around
//                              CheckpointMirror): resume preparation, replicas
//   node_agent_goodput.cc      goodput.json from etcd, and the failure each generation ended by
//   node_agent_scheduler.cc    the scheduler (scheduler.h): draining the nodes tenax stops trusting
//                              and keeping --min-spares spare nodes
// plus the small helpers those files share. The parts with one job each, tested alone, are their
// own classes: AgentView (agent_view.h: etcd's events and the running generation, under its
// lock), StragglerJudge (straggler_judge.h), CheckpointMirror (checkpoint_mirror.h), and the
// job's history and goodput (job_history.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/etcd/client.h"
#include "tenax/launch/agent_view.h"
#include "tenax/launch/checkpoint_mirror.h"
#include "tenax/launch/etcd_retry.h"
#include "tenax/launch/launcher.h"
#include "tenax/launch/live_link_etcd.h"
#include "tenax/launch/node_agent.h"
#include "tenax/launch/rendezvous.h"
#include "tenax/launch/restart_policy.h"
#include "tenax/launch/scheduler.h"
#include "tenax/launch/straggler_judge.h"
#include "tenax/launch/supervisor.h"
#include "tenax/protocol/agent_channel.h"
#include "tenax/protocol/protocol.h"

namespace tenax::launch::agent_internal {

constexpr double kPollS = 0.5;  // re-read etcd at least this often while waiting (AgentView)
// How often an active agent publishes its ranks' progress, and node 0's agent reads everyone's:
// a ranks' beat holds its last 16 steps, so steps of up to 32 per second are all seen.
constexpr double kProgressS = 0.5;

// --- helpers (Retry is in etcd_retry.h) --------------------------------------------------------

// The last path component of every key in `r` (keys under `prefix`: agents/<id>, slow/<id>).
inline std::set<std::string> IdsUnder(const etcd::RangeResponse& r, const std::string& prefix) {
  std::set<std::string> ids;
  for (const etcd::KeyValue& kv : r.kvs) ids.insert(kv.key.substr(prefix.size()));
  return ids;
}

// The JSON-object records of `r` (keys under `prefix`), each with its key's last component added
// as `id_field` (drained/, spare_requests/, quarantined/ for goodput.json); unreadable ones left
// out.
inline nlohmann::json RecordsUnder(const etcd::RangeResponse& r, const std::string& prefix,
                                   const std::string& id_field) {
  nlohmann::json out = nlohmann::json::array();
  for (const etcd::KeyValue& kv : r.kvs) {
    nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
    if (!j.is_object()) continue;
    j[id_field] = kv.key.substr(prefix.size());
    out.push_back(std::move(j));
  }
  return out;
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
// Other threads: the etcd watcher (OnEvents, then PushReplicas: the mirror's Push) and the lease
// keeper's callback only update the view (view_, under its lock) and wake the waiters; the agent
// channel's thread calls Commit; the progress thread (ProgressLoop) reads the running generation
// from the view and hands back a reason to stop it (AgentView::SetStragglerStop).
class NodeAgent {
 public:
  NodeAgent(const LaunchOptions& o, JobInfo job, AgentOptions a, std::string host, std::string exe)
      : o_(o),
        a_(std::move(a)),
        keys_(a_.job_id),
        host_(std::move(host)),
        restarts_(*RestartPolicy::FromOptions(o)),  // checked by ValidateLaunchOptions
        view_(keys_, kPollS) {
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
  // Whether this agent's lease is lost by now, by its local deadline, checked before it acts on
  // what it sees: an agent stopped (or cut off) past the deadline wakes to a backlog of changes,
  // its own node among the lost, before the keeper's thread has run to say so. Tells the view at
  // once (this node's generation stops); a fenced agent decides nothing for the job.
  bool Fenced();
  // The lease is lost (`why`): tells the view and wakes the supervisor; logs it once a lease.
  void LeaseLost(const Status& why);
  // A spare in generation g: waits until the job finishes (0) or g stops holding; records the
  // active nodes lost meanwhile.
  Result<std::optional<int>> WaitAsSpare(int64_t g, const rdzv::Plan& plan);
  // Node `node_rank` of generation g: node 0's store address, the checkpoint folder ready, the
  // ranks run until they end or g stops holding, then how g ended recorded in etcd; 0 when every
  // node finished the job.
  // `vacancy` (live): this spare takes a lost node's place in the running generation.
  Result<std::optional<int>> RunActive(int64_t g, const rdzv::Plan& plan, int node_rank,
                                       const std::optional<rdzv::LiveVacancy>& vacancy = {});

  Status Register();
  // The watcher's: the view takes the events in; the supervisor wakes to ask whether its
  // generation still holds; new commits go to the mirror.
  void OnEvents(const std::vector<etcd::WatchEvent>& events);
  // Live recovery across nodes (node_agent_live.cc): the lost agents of generation g whose loss
  // the job survives live are taken off the view (an active node drops their ranks from the
  // record and puts their vacancy; a spare only waits for that), and the spares that claimed a
  // vacancy are watched in their place; a spare's claim of a vacancy (the one it won); and
  // whether every node rank of g is done or was lost with nobody to take it.
  void LiveNodesLost(int64_t g, const rdzv::Plan& plan, bool active);
  // LiveNodesLost, then whether the view is still current (a spare's wait) or why it is not (an
  // active node's, `beats` as StopReason's), from one state: the view's watcher may add a loss
  // between LiveNodesLost's look and that check, which then ended the generation for a node
  // whose ranks live recovery drops (seen: a spare restarted the job on a node loss the active
  // node was recovering from live). So LiveNodesLost runs again until no loss arrived between.
  bool LiveStillCurrent(int64_t g, const rdzv::Plan& plan);
  std::optional<std::string> LiveStopReason(int64_t g, const rdzv::Plan& plan,
                                            const std::vector<protocol::Beat>& beats);
  std::optional<rdzv::LiveVacancy> LiveClaimVacancy(int64_t g);
  bool AllDone(int64_t g);
  // The agent that writes the job's goodput.json for generation g of `plan`: node 0's; live, the
  // spare that took a lost node 0's place, or with nobody in it the lowest node rank's that was
  // not lost.
  std::string ReportingAgent(int64_t g, const rdzv::Plan& plan);
  Result<int64_t> CurrentGeneration();
  // Joins generation g and waits for its plan; nullopt when g is no longer current, the job
  // stopped, or the lease was lost.
  Result<std::optional<rdzv::Plan>> Rendezvous(int64_t g);
  void LogFailureOf(int64_t g);
  Result<std::optional<rdzv::StopRecord>> ReadStop();
  Status Stop(int code, const std::string& reason);
  // After g failed: the next generation, or the job's end.
  Status Advance(int64_t g, int code, const std::string& why);
  Status RecordLost(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& lost);
  // The planner of g: the agents that --quarantine-after of the generations before g named as
  // their failure's culprit within --quarantine-window (a node that keeps failing), and those
  // whose ranks one failure proved faulty (protocol::QuarantinesAtOnce: silent data corruption,
  // every node that a check named), each recorded under quarantined/<id> and drained once; they
  // are placed only as a last resort.
  std::set<std::string> RepeatOffenders(int64_t g);
  Status Commit(int64_t generation, int64_t step, const nlohmann::json& manifest);
  // Before this node's ranks resume (CheckpointMirror::Prepare): its checkpoint folder holds
  // exactly the job's commits (a commit etcd does not know is moved aside) and the newest one
  // complete, its missing files fetched from the other nodes' folders and RAM replicas.
  Status PrepareCheckpoints(int64_t g);
  // A new commit: this node's files of it go to the next node's RAM (replicas), in the background
  // (CheckpointMirror::Push, told where this node stands).
  void PushReplicas(const std::string& commit_json);
  void PublishReport(int64_t g, int node_rank, const Supervisor::Outcome& out);
  // This node's account of a failure its ranks saw (failures/<G>/<id>).
  rdzv::FailureReport ReportOf(const Verdict& v, int node_rank) const;
  // The silent-data-corruption detections of generation g that this node's ranks recorded in its
  // run folder (a shared folder holds every node's: each takes its own ranks', node 0 also an
  // undecided check's).
  nlohmann::json NodeSdcRecords(int64_t g, int node_rank) const;
  // Supervisor's RemoteHangFn: this node's ranks hang waiting for a rank elsewhere. Records this
  // node's (secondary) evidence without moving the generation, then waits until another node
  // names the culprit (or the generation moves, or `budget_s` passes) before they are killed.
  void AwaitRemoteHang(const Verdict& v, double budget_s);
  // Whether a node's report for g names a culprit (is not secondary).
  bool CulpritNamed(int64_t g);
  // After this node's ranks failed only because of others (a secondary report, already put):
  // waits up to `budget_s` for another node to name the culprit, the generation to move, or an
  // active node of `plan` to vanish, before this node moves the generation. Without it, a node
  // whose ranks all ended at once moves it first, and the node with the evidence (a rank that
  // a silent-data-corruption check named, which ends with the others) has its ranks killed
  // before they can report it.
  void AwaitCulprit(int64_t g, const rdzv::Plan& plan, double budget_s);
  // Progress across nodes, on a thread of its own so that etcd's latency never stalls the
  // supervision loop: every kProgressS it publishes this node's ranks' compute times of the
  // running generation (gen/<G>/progress/<node>); node 0's agent also finds stragglers among
  // every rank of the job from everyone's (a whole slow node looks normal to its own launcher).
  void ProgressLoop();
  // Node 0: the stragglers `judge` finds in what the nodes published for g, recorded in etcd.
  // With --replace-stragglers, once a spare node is ready (now or later), a straggler's node is
  // marked slow (a spare of last resort), the failure recorded and g ended; returns the reason
  // to stop g then.
  std::optional<std::string> JudgeStragglers(int64_t g, const rdzv::Plan& plan,
                                             StragglerJudge* judge);
  void WriteGoodput(bool ended, int code);
  // The scheduler (node_agent_scheduler.cc). Drains the node of agent `id` (its members/ record
  // names it) once for the job, with `why`; no-op without --drain-bad-nodes.
  void DrainNode(int64_t g, const std::string& id, const std::string& why);
  // The planner of g (which wrote its plan): when failures left fewer spare nodes than
  // --min-spares, counting the requests still on their way, asks for the missing ones. Agents in
  // `last_resort` (slow, quarantined) are no spares for this count.
  void KeepSparePool(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& alive,
                     const std::set<std::string>& last_resort);
  // goodput.json's "scheduler" section: the drained nodes and the spare requests.
  nlohmann::json SchedulerRecords();
  double WallNow() const { return protocol::WallNow(); }

  // The members keep the order they had when this class was private to node_agent.cc: the
  // implicit destruction after ~NodeAgent runs in reverse of it (mirror_, with its pusher and file
  // server, before etcd_). Every thread that uses view_ (the progress thread, the watcher, the
  // lease keeper, the agent channel) is stopped by ~NodeAgent's body before any member goes.

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
  // resilience.mode = "live": the job's live record (live_link_etcd.h); null otherwise. Made
  // before the watcher (which feeds it) and destroyed after it and the supervisor.
  std::unique_ptr<EtcdLiveLink> live_;
  std::unique_ptr<etcd::EtcdLeaseKeeper> keeper_;
  std::unique_ptr<etcd::EtcdWatcher> watcher_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<protocol::AgentChannelServer> channel_;
  // This node's checkpoint files for peers and its replicas of theirs; none without checkpoints.
  std::unique_ptr<CheckpointMirror> mirror_;
  // The scheduler's commands (--drain-bad-nodes, --min-spares); null when neither is asked for.
  std::unique_ptr<SchedulerActions> scheduler_;
  std::string secret_;
  rdzv::AgentInfo info_;
  double job_start_unix_ = 0;
  // Run's thread only (the rendezvous, the failure records and the supervision loop's hooks).
  rdzv::Plan last_plan_;  // the newest plan this agent saw (whose losses it may record)
  std::map<std::string, std::string> hosts_;  // agent id -> host, as last seen in agents/
  int64_t last_plan_gen_ = -1;
  bool fenced_ = false;  // this agent lost its lease while active in last_plan_gen_
  double fenced_at_ = 0;
  RestartPolicy restarts_;  // the generations this agent saw fail, for --restart-budget

  // What the watcher and the lease keeper saw, and the generation running here: the state the
  // agent's threads share, under the view's own lock (agent_view.h).
  AgentView view_;
  // Owned threads (the watcher and the lease keeper own theirs).
  std::thread progress_;  // ProgressLoop: started by Run, joined first by the destructor
};

}  // namespace tenax::launch::agent_internal
