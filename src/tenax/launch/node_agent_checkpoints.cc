// The node agent's checkpoint files between nodes (transfer/checkpoint_sync.h): before ranks
// resume, this node's folder holds exactly the job's commits with the newest complete; after each
// commit, this node's files go to the next node's RAM (replicas).
#include <fmt/format.h>

#include "tenax/checkpoint/manifest.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/node_agent_internal.h"
#include "tenax/protocol/fault_injection.h"

namespace tenax::launch::agent_internal {

std::vector<transfer::FilePeer> NodeAgent::Peers() {
  std::vector<transfer::FilePeer> peers;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, a] : agents_) {
    if (id == info_.id || a.file_port <= 0) continue;
    peers.push_back(
        {fmt::format("agent {} on {}", id, a.host), fmt::format("{}:{}", a.address, a.file_port)});
  }
  return peers;
}

Status NodeAgent::PrepareCheckpoints(int64_t g) {
  if (job_.checkpoint_dir.empty()) return Status::Ok();
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse commits,
                         Retry([&] { return etcd_->GetPrefix(keys_.commits()); }));
  std::map<int64_t, uint32_t> accepted;
  std::optional<ckpt::Manifest> newest;
  for (const etcd::KeyValue& kv : commits.kvs) {
    const auto j = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("manifest")) continue;
    Result<ckpt::Manifest> m = ckpt::Manifest::Parse(j["manifest"].dump(), kv.key);
    if (!m.ok()) continue;
    accepted[m->step] = ckpt::ManifestCrc(*m);
    if (!newest || m->step > newest->step) newest = *m;
  }
  // Commits the job dropped (lost with a node) may still be whole in this folder: never resumed
  // from, even when the job has no other commit and starts over.
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse drops,
                         Retry([&] { return etcd_->GetPrefix(keys_.drops()); }));
  std::map<int64_t, uint32_t> dropped;
  for (const etcd::KeyValue& kv : drops.kvs) {
    const auto j = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j.contains("manifest_crc")) {
      dropped[j["step"].get<int64_t>()] = j["manifest_crc"].get<uint32_t>();
    }
  }
  if (!dropped.empty()) {
    TENAX_ASSIGN_OR_RETURN(
        std::vector<std::string> moved,
        transfer::SetAsideDroppedCommits(LocalFs(), job_.checkpoint_dir, dropped));
    for (const auto& m : moved) log::Warn("launch: {} was dropped by the job: moved aside", m);
  }
  if (!newest) return Status::Ok();  // nothing committed (or all dropped): a fresh start
  // The sources of files are the agents alive now (a lost one would make a file nobody has look
  // merely unreachable, below).
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse agents,
                         Retry([&] { return etcd_->GetPrefix(keys_.agents()); }));
  {
    std::lock_guard<std::mutex> lock(mu_);
    agents_ = AgentRecords(agents);
  }
  // A commit etcd does not know (a rank of an old generation wrote it, or it is newer than the
  // job's newest) must not be resumed from.
  const int64_t oldest = accepted.begin()->first;
  for (int attempt = 0;; ++attempt) {  // two agents may move the same folder on shared storage
    Result<std::vector<std::string>> moved =
        transfer::SetAsideUnacceptedCommits(LocalFs(), job_.checkpoint_dir, accepted, oldest);
    if (moved.ok()) {
      for (const auto& m : *moved)
        log::Warn("launch: {} is not a commit of the job: moved aside", m);
      break;
    }
    if (attempt > 0) return moved.status();
  }
  transfer::ReconcileOptions ro;
  ro.local_replica_root = replica_root_;
  ro.transfer.io_timeout = kPeerIoTimeout;
  Result<transfer::ReconcileReport> r =
      transfer::Reconcile(LocalFs(), job_.checkpoint_dir, *newest, Peers(), secret_, ro);
  if (!r.ok()) {
    r = transfer::Reconcile(LocalFs(), job_.checkpoint_dir, *newest, Peers(), secret_,
                            ro);  // shared folder race
  }
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
    // Every live node answered and none has some file of it: the step is lost (its node died
    // before its replicas reached a peer). Drop its record while g is current, so that every
    // node resumes from the commit before it in the next generation.
    etcd::Txn txn;
    txn.compare.push_back(
        etcd::Compare::Value(keys_.generation(), etcd::CompareOp::kEqual, std::to_string(g)));
    txn.success.push_back(etcd::TxnOp::Delete(keys_.commit(newest->step)));
    const nlohmann::json record = {
        {"step", newest->step}, {"manifest_crc", ckpt::ManifestCrc(*newest)}, {"generation", g}};
    txn.success.push_back(etcd::TxnOp::Put(keys_.dropped(newest->step), record.dump()));
    Result<etcd::TxnResponse> dropped = Retry([&] { return etcd_->Commit(txn); });
    if (dropped.ok() && dropped->succeeded) {
      log::Error(
          "launch: checkpoint step {} is lost: no live node holds every file of it; the job "
          "goes back to the commit before it",
          newest->step);
    }
  }
  if (!r.ok()) {
    return r.status().WithContext(fmt::format(
        "generation {}: this node cannot get every file of checkpoint step {} (the job's newest "
        "commit)",
        g, newest->step));
  }
  if (r->fetched() > 0) log::Info("launch: {}", r->Summary(job_.checkpoint_dir));
  return Status::Ok();
}

void NodeAgent::PushReplicas(const std::string& commit_json) {
  if (!pusher_) return;
  const auto j = nlohmann::json::parse(commit_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("manifest")) return;
  Result<ckpt::Manifest> m = ckpt::Manifest::Parse(j["manifest"].dump(), "commit");
  if (!m.ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ < 0 || node_rank_ < 0 || plan_nodes_.size() < 2) return;
  // The next node keeps this node's files in RAM: a node lost with its disk is rebuilt from it.
  const std::string& buddy = plan_nodes_[(node_rank_ + 1) % plan_nodes_.size()];
  // Only the files this node's ranks wrote (model-/optimizer-rankRRRRR-...; node 0 also the ones
  // without a rank, train_state.json): on shared storage the others push theirs.
  ckpt::Manifest own = *m;
  own.files.clear();
  for (const auto& [name, entry] : m->files) {
    bool mine = name.find("rank") == std::string::npos && node_rank_ == 0;
    for (int l = 0; l < o_.nproc_per_node && !mine; ++l) {
      mine = name.find(fmt::format("rank{:05d}", node_rank_ * o_.nproc_per_node + l)) !=
             std::string::npos;
    }
    if (mine) own.files[name] = entry;
  }
  auto it = agents_.find(buddy);
  if (it == agents_.end() || it->second.file_port <= 0) return;
  for (const protocol::Fault& f : job_.faults) {
    const bool here = f.rank / o_.nproc_per_node == node_rank_;
    const bool now = f.generation == protocol::Fault::kEveryGeneration || f.generation == running_;
    if (f.kind == protocol::FaultKind::kPushLoss && here && now) {
      log::Warn("launch: injected fault {}: this node's files of step {} are not pushed", f.text,
                m->step);
      return;
    }
  }
  pusher_->Submit(own, {fmt::format("agent {} on {}", buddy, it->second.host),
                        fmt::format("{}:{}", it->second.address, it->second.file_port)});
}

}  // namespace tenax::launch::agent_internal
