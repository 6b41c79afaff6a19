// What a node agent (node_agent.h) knows of its job as etcd's watch and its lease keeper tell it,
// and of the generation running on this node, under one mutex. The watcher's events are read
// here (given the job's keys, no etcd call): the generation key moving off the running one, the
// job's stop, an active node's agent vanishing, and new commits (handed back for replicas).
// Waiters (WaitUntil) wake on every event and lease loss, and re-check at least every poll.
//
// Thread safety: every method may be called from any thread; each takes the lock for itself
// alone (nothing here calls out under it, except LeaseLost's `wake`). In the agent: the watcher
// calls OnEvents (and Place), the lease keeper LeaseLost, the progress thread WaitForQuit,
// Progress and SetStragglerStop, the agent channel's thread lease_lost; the rest is the Run
// thread's (the generations' loop and the supervisor's hooks), and Quit the agent's destructor.
// Non-goals: reading or writing etcd (the agent does), judging anything (the agent's parts do).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tenax/etcd/client.h"
#include "tenax/launch/checkpoint_mirror.h"
#include "tenax/launch/rendezvous.h"
#include "tenax/protocol/heartbeat.h"

namespace tenax::launch {

class AgentView {
 public:
  // `poll_s`: how often WaitUntil re-checks without an event (etcd is re-read that often).
  explicit AgentView(rdzv::Keys keys, double poll_s = 0.5)
      : keys_(std::move(keys)), poll_s_(poll_s) {}
  AgentView(const AgentView&) = delete;
  AgentView& operator=(const AgentView&) = delete;

  // --- what the watcher and the lease keeper tell ------------------------------------------------

  // A batch of watch events on the job's keys: the generation key put to another value than the
  // running generation's (moved), the stop key (stopped), the agents/<id> key of an agent active
  // in the running generation deleted (lost). Returns the commits/<step> records put, in order
  // (this node's files of each go to a peer). Wakes the waiters.
  std::vector<std::string> OnEvents(const std::vector<etcd::WatchEvent>& events);
  // This agent's lease expired (fenced). `wake` (the supervisor's) runs under the lock, and only
  // until Quit: the agent sets quit before it destroys what `wake` wakes. Wakes the waiters.
  // True for the call that found the lease held (the first to tell of this loss).
  bool LeaseLost(const std::function<void()>& wake);
  // Registered under a (new) lease: not fenced any more.
  void LeaseGranted(int64_t lease_id);
  bool lease_lost() const;
  // The lease this agent's keys hang on now (0 before the first): the agent's decisions in etcd
  // require its agents/<id> key to hang on it still (NodeAgent::Commit, EtcdLiveLink).
  int64_t lease_id() const;
  bool stopped() const;

  // --- waiting -----------------------------------------------------------------------------------

  // Waits until `done()` (called without the lock) is true, re-checking on every event and lease
  // loss, and at least every poll_s; false after `timeout_s`.
  bool WaitUntil(const std::function<bool()>& done, double timeout_s);
  // The agent is going: ProgressTurn's waits end, LeaseLost's `wake` is no longer called.
  void Quit();
  // Waits up to `s`, or until Quit; true once quitting.
  bool WaitForQuit(double s);

  // --- the generation running here (Run's thread) ------------------------------------------------

  // This node takes part in generation g of `plan` as node `node_rank` (-1: a spare): nothing
  // moved or lost yet, no beats, no straggler stop.
  void Begin(int64_t g, const rdzv::Plan& plan, int node_rank);
  // Not moved on, not stopped, lease held, no active node lost.
  bool StillCurrent() const;
  // The supervision loop's StopFn: keeps the ranks' `beats` (for the progress thread), and says
  // why the running generation must stop (the straggler stop first), or nullopt.
  std::optional<std::string> StopReason(std::vector<protocol::Beat> beats);
  struct Ended {
    std::set<std::string> lost;  // active agents lost while it ran
    bool lease_lost = false;     // this agent was fenced meanwhile
  };
  // The generation no longer runs here. `forget_lost`: the lost agents are handed over (and
  // cleared) rather than left for the next rendezvous to take.
  Ended End(bool forget_lost);
  // The lost agents, taken (cleared here); false, taking none, when the lease is lost.
  bool TakeLost(std::set<std::string>* lost);
  // resilience.mode = "live" (node_agent_live.cc): the lost agents as they stand (kept here);
  // one whose loss the job survives live (it no longer stops the generation, and is no longer
  // watched); and the agent that holds node rank `node` of the running plan from now on (a spare
  // that took a lost node's place: watched like the others, and its node in the plan).
  std::set<std::string> Lost() const;
  void Forgive(const std::string& id);
  void Activate(int node, const std::string& id);
  // The live agents as last read from etcd (file ports for checkpoint transfers).
  void SetAgents(std::map<std::string, rdzv::AgentInfo> agents);
  // Where this node stands for a replica push.
  MirrorPlace Place() const;
  // The running generation as this node runs it (-1s: none).
  struct Running {
    int64_t generation = -1;
    int node_rank = -1;
  };
  Running running() const;

  // --- the progress thread -----------------------------------------------------------------------

  // What the progress thread publishes and judges now; nullopt when nothing runs here, this
  // agent is fenced, the generation moved on, or a straggler stop is already decided.
  struct ProgressTurn {
    int64_t generation = -1;
    int node_rank = -1;
    int64_t lease = 0;  // progress records hang on it
    rdzv::Plan plan;
    std::vector<protocol::Beat> beats;  // [local rank], as the StopFn last kept them
  };
  std::optional<ProgressTurn> Progress() const;
  // A straggler node is replaced: the running generation stops (StopReason says why).
  void SetStragglerStop(std::string reason);

 private:
  const rdzv::Keys keys_;
  const double poll_s_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // notified on events, lease loss and Quit (see changes_)
  // Guarded by mu_: what the watcher and the lease keeper saw.
  uint64_t changes_ = 0;  // bumped on every event batch and lease loss (WaitUntil's wake-up)
  bool lease_lost_ = false;
  bool stopped_ = false;
  int64_t running_ = -1;                           // the generation whose ranks run here (-1: none)
  bool moved_ = false;                             // the generation key left `running_`
  std::set<std::string> active_;                   // agents active in `running_`
  std::set<std::string> lost_;                     // ... whose agents/<id> key vanished
  std::map<std::string, rdzv::AgentInfo> agents_;  // live agents as last read
  int node_rank_ = -1;                             // this node's in `running_`
  rdzv::Plan running_plan_;                        // `running_`'s plan
  int64_t lease_id_ = 0;                           // the lease this agent's keys hang on
  // The progress thread's: the running generation's beats (copied by the StopFn on the
  // supervision loop's thread), a reason to stop it (a straggler node replaced), and quitting.
  std::vector<protocol::Beat> beats_;
  std::optional<std::string> straggler_stop_;
  bool quit_ = false;
};

}  // namespace tenax::launch
