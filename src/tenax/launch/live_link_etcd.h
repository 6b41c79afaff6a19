// The node agent's LiveLink (live_link.h): the job's live record of the running generation kept
// in etcd (rendezvous.h: gen/<G>/live/...), this node's copy of it in its heartbeat folder (where
// its ranks read it), and the other nodes' ranks' states, as the agent's etcd watcher delivers
// them, and a lost node's vacancy and the spare's claim of it (node_agent_live.cc). Begin(G)
// before each generation this node runs (or waits in as a spare); the watcher's events go to
// OnEvents.
// Thread safety: every method may be called from any thread (one mutex; etcd requests are made
// outside it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tenax/etcd/client.h"
#include "tenax/launch/live_link.h"
#include "tenax/launch/rendezvous.h"

namespace tenax::launch {

class EtcdLiveLink : public LiveLink {
 public:
  // `agent`: this agent's id (its records of live recoveries are under it). `lease` (optional):
  // the lease its agents/<id> key hangs on now; with it, changes to the record, vacancies,
  // claims, and this node's states and recoveries are made only while that key still hangs on
  // it (a fenced agent's are refused by etcd: the spare that took its node rank publishes that
  // node rank's states).
  EtcdLiveLink(etcd::EtcdClient* etcd, rdzv::Keys keys, std::string agent,
               std::function<int64_t()> lease = {})
      : etcd_(etcd), keys_(std::move(keys)), agent_(std::move(agent)), lease_(std::move(lease)) {}

  // Generation `gen` starts here, its ranks reading their record in `heartbeat_dir`: what etcd
  // holds of it so far is read in (its events from now on arrive through OnEvents).
  void Begin(int64_t gen, const std::string& heartbeat_dir);
  void OnEvents(const std::vector<etcd::WatchEvent>& events);

  Result<std::optional<rdzv::LiveRecord>> Update(int gen, const Change& change) override;
  std::optional<rdzv::LiveRecord> Current(int gen) override;
  std::map<int, rdzv::LiveRankState> Others(int gen) override;
  Status PublishOwn(int gen, int node, const std::map<int, rdzv::LiveRankState>& ranks) override;
  Status PublishRecoveries(int gen, int node, const nlohmann::json& records) override;

  // A lost node (node_agent_live.cc): its vacancy, put once per turn (the first to see the loss
  // wins; the others' puts change nothing), and a spare's claim of that turn (true: this agent
  // took it).
  Status Vacate(int gen, const rdzv::LiveVacancy& v);
  Result<bool> Claim(int gen, int node, int turn);
  // What this node has seen of `gen`'s vacancies and claims: each node rank's newest vacancy
  // (node -> record), and who claimed that one (node -> agent).
  std::map<int, rdzv::LiveVacancy> Vacancies(int gen);
  std::map<int, std::string> Claims(int gen);

 private:
  // Under mu_: a record of the running generation at etcd revision `revision`, taken when newer
  // than the one held; a newer membership is copied into the heartbeat folder.
  void TakeRecord(const rdzv::LiveRecord& r, int64_t revision);
  void TakeStates(const std::string& key, const std::string& value, int64_t revision);
  // Under mu_: one key of the running generation's live/ prefix, put at `revision`.
  void Take(const std::string& key, const std::string& value, int64_t revision);
  // Puts `key` unless it exists; returns what it holds then (taken in when of generation `gen`).
  Result<std::optional<etcd::KeyValue>> PutOnce(int gen, const std::string& key,
                                                const std::string& value);

  // Puts `key` (a state or recoveries record) while this agent holds its lease (any time
  // without lease_).
  Status PutHeld(const std::string& key, const std::string& value);
  // With lease_: adds to `txn` the comparison that this agent still holds its lease, and as the
  // failure branch's first operation a read of its key.
  void RequireHeld(etcd::Txn& txn) const;
  // With lease_, for a transaction built with RequireHeld that failed: whether this agent's key
  // no longer hangs on its lease (fenced), which is then the reason.
  bool FencedBy(const etcd::TxnResponse& r) const;

  etcd::EtcdClient* const etcd_;
  const rdzv::Keys keys_;
  const std::string agent_;
  const std::function<int64_t()> lease_;
  std::mutex mu_;
  std::string heartbeat_dir_;
  int64_t gen_ = -1;  // the running generation
  std::optional<rdzv::LiveRecord> record_;
  int64_t revision_ = 0;                                      // record_'s mod revision
  std::map<int, std::map<int, rdzv::LiveRankState>> states_;  // node -> rank -> state
  std::map<int, int64_t> state_revisions_;                    // node -> its record's revision
  std::map<int, rdzv::LiveVacancy> vacancies_;                // node -> its newest vacancy
  std::map<std::pair<int, int>, std::string> claims_;         // (node, turn) -> the spare
};

}  // namespace tenax::launch
