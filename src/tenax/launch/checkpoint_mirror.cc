#include "tenax/launch/checkpoint_mirror.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/etcd_retry.h"

namespace tenax::launch {
namespace {

// Each read or write between agents (checkpoint files, replicas): a peer stopped mid-transfer
// (SIGSTOP, a hung host) fails after this long instead of holding a push, or the agent's exit,
// for the library's default 30 s. Generous for a healthy network: it bounds one read, not a file.
constexpr std::chrono::milliseconds kPeerIoTimeout{5000};

}  // namespace

Result<ckpt::Manifest> CommitManifest(const std::string& record, const std::string& where) {
  const auto j = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("manifest")) {
    return InvalidArgument(where + ": not a commit record (no manifest)");
  }
  return ckpt::Manifest::Parse(j["manifest"].dump(), where);
}

JobCommits ParseCommits(const etcd::RangeResponse& commits) {
  JobCommits out;
  for (const etcd::KeyValue& kv : commits.kvs) {
    Result<ckpt::Manifest> m = CommitManifest(kv.value, kv.key);
    if (!m.ok()) continue;
    out.accepted[m->step] = ckpt::ManifestCrc(*m);
    if (!out.newest || m->step > out.newest->step) out.newest = *m;
  }
  return out;
}

std::map<int64_t, uint32_t> ParseDrops(const etcd::RangeResponse& drops) {
  std::map<int64_t, uint32_t> dropped;
  for (const etcd::KeyValue& kv : drops.kvs) {
    const auto j = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j.contains("manifest_crc")) {
      dropped[j["step"].get<int64_t>()] = j["manifest_crc"].get<uint32_t>();
    }
  }
  return dropped;
}

std::vector<transfer::FilePeer> FilePeersOf(const std::map<std::string, rdzv::AgentInfo>& agents,
                                            const std::string& self) {
  std::vector<transfer::FilePeer> peers;
  for (const auto& [id, a] : agents) {
    if (id == self || a.file_port <= 0) continue;
    peers.push_back(
        {fmt::format("agent {} on {}", id, a.host), fmt::format("{}:{}", a.address, a.file_port)});
  }
  return peers;
}

ckpt::Manifest FilesOfNode(const ckpt::Manifest& m, int node_rank, int nproc_per_node) {
  ckpt::Manifest own = m;
  own.files.clear();
  for (const auto& [name, entry] : m.files) {
    bool mine = name.find("rank") == std::string::npos && node_rank == 0;
    for (int l = 0; l < nproc_per_node && !mine; ++l) {
      mine =
          name.find(fmt::format("rank{:05d}", node_rank * nproc_per_node + l)) != std::string::npos;
    }
    if (mine) own.files[name] = entry;
  }
  return own;
}

const std::string& BuddyOf(const std::vector<std::string>& nodes, int node_rank) {
  return nodes[(node_rank + 1) % nodes.size()];
}

const protocol::Fault* PushLossFault(const std::vector<protocol::Fault>& faults, int node_rank,
                                     int nproc_per_node, int64_t generation) {
  for (const protocol::Fault& f : faults) {
    const bool here = f.rank / nproc_per_node == node_rank;
    const bool now =
        f.generation == protocol::Fault::kEveryGeneration || f.generation == generation;
    if (f.kind == protocol::FaultKind::kPushLoss && here && now) return &f;
  }
  return nullptr;
}

std::optional<ReplicaPush> ReplicaPushOf(const ckpt::Manifest& m, const MirrorPlace& place,
                                         int nproc_per_node,
                                         const std::vector<protocol::Fault>& faults) {
  if (place.generation < 0 || place.node_rank < 0 || place.plan_nodes.size() < 2) {
    return std::nullopt;
  }
  // The next node keeps this node's files in RAM: a node lost with its disk is rebuilt from it.
  const std::string& buddy = BuddyOf(place.plan_nodes, place.node_rank);
  auto it = place.agents.find(buddy);
  if (it == place.agents.end() || it->second.file_port <= 0) return std::nullopt;
  if (const protocol::Fault* f =
          PushLossFault(faults, place.node_rank, nproc_per_node, place.generation)) {
    log::Warn("launch: injected fault {}: this node's files of step {} are not pushed", f->text,
              m.step);
    return std::nullopt;
  }
  return ReplicaPush{FilesOfNode(m, place.node_rank, nproc_per_node),
                     {fmt::format("agent {} on {}", buddy, it->second.host),
                      fmt::format("{}:{}", it->second.address, it->second.file_port)}};
}

Result<std::unique_ptr<CheckpointMirror>> CheckpointMirror::Start(CheckpointMirrorOptions options) {
  std::unique_ptr<CheckpointMirror> m(new CheckpointMirror(std::move(options)));
  const CheckpointMirrorOptions& o = m->o_;
  // Peers fetch this node's checkpoint files (and the replicas it holds for them) from here.
  // The folder is this agent's alone and goes with it; those of agents killed on this host
  // before they could remove theirs go now (nothing can read them: their server is gone).
  TENAX_ASSIGN_OR_RETURN(
      OwnedFolder folder,
      OwnedFolder::Claim("/dev/shm", kReplicaFolderPrefix,
                         fmt::format("{}{}-{}", kReplicaFolderPrefix, o.job_id, o.agent_id)));
  if (folder.swept() > 0) {
    log::Info("launch: removed {} replica folder(s) in /dev/shm left by killed agents",
              folder.swept());
  }
  m->replica_folder_ = std::make_unique<OwnedFolder>(std::move(folder));
  transfer::FileServerOptions fo;
  fo.address = o.address;
  fo.checkpoint_folder = o.checkpoint_dir;
  fo.replica_root = m->replica_root();
  fo.secret = o.secret;
  TENAX_ASSIGN_OR_RETURN(m->files_, transfer::CheckpointFileServer::Start(fo));
  transfer::PushOptions po;
  po.transfer.io_timeout = kPeerIoTimeout;
  m->pusher_ = std::make_unique<transfer::ReplicaPusher>(
      LocalFs(), o.checkpoint_dir, o.secret, po,
      [](int64_t step, const Result<transfer::PushReport>& r) {
        if (!r.ok()) {
          log::Warn("launch: memory replica of step {}: {}", step, r.status().message());
        } else if (r->skipped_damaged.empty()) {
          // The event that this node's files of the step survive its loss (tests wait for it).
          log::Info("launch: memory replica of step {}: {} file(s) held by the next node", step,
                    r->pushed.size());
        }
      });
  return m;
}

Status CheckpointMirror::Prepare(etcd::EtcdClient& etcd, const rdzv::Keys& keys, int64_t g,
                                 const LiveAgentsFn& live_agents) {
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse commit_records,
                         Retry([&] { return etcd.GetPrefix(keys.commits()); }));
  const JobCommits commits = ParseCommits(commit_records);
  // Commits the job dropped (lost with a node) may still be whole in this folder: never resumed
  // from, even when the job has no other commit and starts over.
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse drops,
                         Retry([&] { return etcd.GetPrefix(keys.drops()); }));
  const std::map<int64_t, uint32_t> dropped = ParseDrops(drops);
  if (!dropped.empty()) {
    TENAX_ASSIGN_OR_RETURN(std::vector<std::string> moved,
                           transfer::SetAsideDroppedCommits(LocalFs(), o_.checkpoint_dir, dropped));
    for (const auto& m : moved) log::Warn("launch: {} was dropped by the job: moved aside", m);
  }
  if (!commits.newest) return Status::Ok();  // nothing committed (or all dropped): a fresh start
  const ckpt::Manifest& newest = *commits.newest;
  // The sources of files are the agents alive now (a lost one would make a file nobody has look
  // merely unreachable, below).
  using Agents = std::map<std::string, rdzv::AgentInfo>;
  TENAX_ASSIGN_OR_RETURN(const Agents agents, live_agents());
  // A commit etcd does not know (a rank of an old generation wrote it, or it is newer than the
  // job's newest) must not be resumed from.
  const int64_t oldest = commits.accepted.begin()->first;
  for (int attempt = 0;; ++attempt) {  // two agents may move the same folder on shared storage
    Result<std::vector<std::string>> moved =
        transfer::SetAsideUnacceptedCommits(LocalFs(), o_.checkpoint_dir, commits.accepted, oldest);
    if (moved.ok()) {
      for (const auto& m : *moved)
        log::Warn("launch: {} is not a commit of the job: moved aside", m);
      break;
    }
    if (attempt > 0) return moved.status();
  }
  transfer::ReconcileOptions ro;
  ro.local_replica_root = replica_root();
  ro.transfer.io_timeout = kPeerIoTimeout;
  const std::vector<transfer::FilePeer> peers = FilePeersOf(agents, o_.agent_id);
  Result<transfer::ReconcileReport> r =
      transfer::Reconcile(LocalFs(), o_.checkpoint_dir, newest, peers, o_.secret, ro);
  if (!r.ok()) {
    r = transfer::Reconcile(LocalFs(), o_.checkpoint_dir, newest, peers, o_.secret,
                            ro);  // shared folder race
  }
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
    // Every live node answered and none has some file of it: the step is lost (its node died
    // before its replicas reached a peer). Drop its record while g is current, so that every
    // node resumes from the commit before it in the next generation.
    etcd::Txn txn;
    txn.compare.push_back(
        etcd::Compare::Value(keys.generation(), etcd::CompareOp::kEqual, std::to_string(g)));
    txn.success.push_back(etcd::TxnOp::Delete(keys.commit(newest.step)));
    const nlohmann::json record = {
        {"step", newest.step}, {"manifest_crc", ckpt::ManifestCrc(newest)}, {"generation", g}};
    txn.success.push_back(etcd::TxnOp::Put(keys.dropped(newest.step), record.dump()));
    Result<etcd::TxnResponse> done = Retry([&] { return etcd.Commit(txn); });
    if (done.ok() && done->succeeded) {
      log::Error(
          "launch: checkpoint step {} is lost: no live node holds every file of it; the job "
          "goes back to the commit before it",
          newest.step);
    }
  }
  if (!r.ok()) {
    return r.status().WithContext(fmt::format(
        "generation {}: this node cannot get every file of checkpoint step {} (the job's newest "
        "commit)",
        g, newest.step));
  }
  if (r->fetched() > 0) log::Info("launch: {}", r->Summary(o_.checkpoint_dir));
  return Status::Ok();
}

void CheckpointMirror::Push(const std::string& commit_record, const MirrorPlace& place) {
  Result<ckpt::Manifest> m = CommitManifest(commit_record, "commit");
  if (!m.ok()) return;
  std::optional<ReplicaPush> push = ReplicaPushOf(*m, place, o_.nproc_per_node, o_.faults);
  if (push) pusher_->Submit(std::move(push->files), std::move(push->buddy));
}

}  // namespace tenax::launch
