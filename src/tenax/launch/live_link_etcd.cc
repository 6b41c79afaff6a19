#include "tenax/launch/live_link_etcd.h"

#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/launch/etcd_retry.h"

namespace tenax::launch {
namespace {

bool HasPrefix(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// A change that keeps meeting another node's newer record gives up after this many tries.
constexpr int kUpdateTries = 100;

}  // namespace

void EtcdLiveLink::Begin(int64_t gen, const std::string& heartbeat_dir) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    gen_ = gen;
    heartbeat_dir_ = heartbeat_dir;
    record_.reset();
    revision_ = 0;
    states_.clear();
    state_revisions_.clear();
    vacancies_.clear();
    claims_.clear();
  }
  // Read after gen_ is set: whatever arrives meanwhile through OnEvents is ordered by revision.
  Result<etcd::RangeResponse> all =
      Retry([&] { return etcd_->GetPrefix(keys_.gen(gen) + "live/"); });
  if (!all.ok()) {
    log::Warn("launch: cannot read generation {}'s live records: {}", gen, all.status().message());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (gen_ != gen) return;
  for (const etcd::KeyValue& kv : all->kvs) Take(kv.key, kv.value, kv.mod_revision);
}

void EtcdLiveLink::OnEvents(const std::vector<etcd::WatchEvent>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gen_ < 0) return;
  for (const etcd::WatchEvent& e : events) {
    if (e.type == etcd::WatchEvent::Type::kPut) Take(e.kv.key, e.kv.value, e.kv.mod_revision);
  }
}

void EtcdLiveLink::Take(const std::string& key, const std::string& value, int64_t revision) {
  if (key == keys_.live_record(gen_)) {
    Result<rdzv::LiveRecord> r = rdzv::LiveRecord::FromJson(value);
    if (r.ok()) {
      TakeRecord(*r, revision);
    } else {
      log::Warn("launch: {}", r.status().message());
    }
  } else if (HasPrefix(key, keys_.live_states(gen_))) {
    TakeStates(key, value, revision);
  } else if (HasPrefix(key, keys_.live_vacancies(gen_))) {
    if (Result<rdzv::LiveVacancy> v = rdzv::LiveVacancy::FromJson(value); v.ok()) {
      auto it = vacancies_.find(v->node);
      if (it == vacancies_.end() || it->second.turn < v->turn) vacancies_[v->node] = *v;
    } else {
      log::Warn("launch: {}", v.status().message());
    }
  } else if (HasPrefix(key, keys_.live_claims(gen_))) {
    const auto [node, turn] = rdzv::ParseNodeTurn(key.substr(keys_.live_claims(gen_).size()));
    if (node >= 0) claims_.emplace(std::pair{node, turn}, value);
  }
}

void EtcdLiveLink::TakeRecord(const rdzv::LiveRecord& r, int64_t revision) {
  if (revision <= revision_) return;
  const bool changed = !record_ || !(record_->membership == r.membership);
  record_ = r;
  revision_ = revision;
  if (!changed) return;
  if (Status st = protocol::WriteLiveMembership(heartbeat_dir_, r.membership); !st.ok()) {
    // The ranks wait for it; without it they end (and the generation with them).
    log::Error("launch: cannot write the live membership: {}", st.message());
  }
}

void EtcdLiveLink::TakeStates(const std::string& key, const std::string& value, int64_t revision) {
  const int node = static_cast<int>(rdzv::ParseInt(key.substr(keys_.live_states(gen_).size()), -1));
  if (node < 0 || revision <= state_revisions_[node]) return;
  Result<std::map<int, rdzv::LiveRankState>> s = rdzv::ParseLiveStates(value);
  if (!s.ok()) {
    log::Warn("launch: {}", s.status().message());
    return;
  }
  states_[node] = std::move(*s);
  state_revisions_[node] = revision;
}

Result<std::optional<rdzv::LiveRecord>> EtcdLiveLink::Update(int gen, const Change& change) {
  const std::string key = keys_.live_record(gen);
  for (int attempt = 0; attempt < kUpdateTries; ++attempt) {
    TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> kv,
                           Retry([&] { return etcd_->Get(key); }));
    std::optional<rdzv::LiveRecord> now;
    if (kv) {
      TENAX_ASSIGN_OR_RETURN(rdzv::LiveRecord r, rdzv::LiveRecord::FromJson(kv->value));
      now = r;
      std::lock_guard<std::mutex> lock(mu_);
      if (gen_ == gen) TakeRecord(r, kv->mod_revision);
    }
    std::optional<rdzv::LiveRecord> next = change(now);
    if (!next) return now;
    etcd::Txn txn;
    txn.compare.push_back(
        kv ? etcd::Compare::ModRevision(key, etcd::CompareOp::kEqual, kv->mod_revision)
           : etcd::Compare::Version(key, etcd::CompareOp::kEqual, 0));
    RequireHeld(txn);
    txn.success.push_back(etcd::TxnOp::Put(key, next->ToJson().dump()));
    // A repeat after an unknown outcome fails the comparison and asks the change again, which
    // sees its own record then.
    TENAX_ASSIGN_OR_RETURN(etcd::TxnResponse r, Retry([&] { return etcd_->Commit(txn); }));
    if (r.succeeded) {
      std::lock_guard<std::mutex> lock(mu_);
      if (gen_ == gen) TakeRecord(*next, r.revision);
      return next;
    }
    if (FencedBy(r)) {
      return Unavailable(fmt::format(
          "this node lost its etcd lease (fenced): it must not change generation {}'s live record",
          gen));
    }
  }
  return Unavailable(fmt::format(
      "generation {}'s live record changed under this node {} times in a row", gen, kUpdateTries));
}

std::optional<rdzv::LiveRecord> EtcdLiveLink::Current(int gen) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gen_ != gen) return std::nullopt;
  return record_;
}

std::map<int, rdzv::LiveRankState> EtcdLiveLink::Others(int gen) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, rdzv::LiveRankState> out;
  if (gen_ != gen) return out;
  for (const auto& [node, ranks] : states_) {
    for (const auto& [rank, s] : ranks) out[rank] = s;
  }
  return out;
}

Status EtcdLiveLink::PublishOwn(int gen, int node,
                                const std::map<int, rdzv::LiveRankState>& ranks) {
  return PutHeld(keys_.live_state(gen, node), rdzv::LiveStatesJson(ranks));
}

Status EtcdLiveLink::PublishRecoveries(int gen, int node, const nlohmann::json& records) {
  return PutHeld(keys_.live_recoveries(gen, node, agent_), records.dump());
}

Status EtcdLiveLink::PutHeld(const std::string& key, const std::string& value) {
  etcd::Txn txn;
  RequireHeld(txn);
  txn.success.push_back(etcd::TxnOp::Put(key, value));
  TENAX_ASSIGN_OR_RETURN(etcd::TxnResponse r, Retry([&] { return etcd_->Commit(txn); }, 5));
  if (!r.succeeded) {
    // The lease's comparison is the only one (FencedBy): a node rank's states are under the node
    // rank, and the spare that holds it now writes there too.
    return Unavailable(
        fmt::format("this node lost its etcd lease (fenced): it must not put {}", key));
  }
  return Status::Ok();
}

void EtcdLiveLink::RequireHeld(etcd::Txn& txn) const {
  if (!lease_) return;
  txn.compare.push_back(
      etcd::Compare::Lease(keys_.agent(agent_), etcd::CompareOp::kEqual, lease_()));
  // Read back where the transaction fails: whether that comparison is why (FencedBy), in the
  // same round trip.
  txn.failure.push_back(etcd::TxnOp::Get(keys_.agent(agent_)));
}

bool EtcdLiveLink::FencedBy(const etcd::TxnResponse& r) const {
  if (!lease_ || r.succeeded || r.gets.empty()) return false;
  const std::vector<etcd::KeyValue>& kvs = r.gets.front().kvs;
  return kvs.empty() || kvs.front().lease != lease_();
}

Result<std::optional<etcd::KeyValue>> EtcdLiveLink::PutOnce(int gen, const std::string& key,
                                                            const std::string& value) {
  etcd::Txn txn;
  txn.compare.push_back(etcd::Compare::CreateRevision(key, etcd::CompareOp::kEqual, 0));
  RequireHeld(txn);
  txn.success.push_back(etcd::TxnOp::Put(key, value));
  TENAX_ASSIGN_OR_RETURN(etcd::TxnResponse r, Retry([&] { return etcd_->Commit(txn); }));
  if (FencedBy(r)) {
    return Unavailable(
        fmt::format("this node lost its etcd lease (fenced): it must not put {}", key));
  }
  // Read back: what the key holds is whoever put it first's (also after a repeat of a put whose
  // outcome was unknown), seen here at once (the watch brings it too).
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> kv, Retry([&] { return etcd_->Get(key); }));
  std::lock_guard<std::mutex> lock(mu_);
  if (kv && gen_ == gen) Take(kv->key, kv->value, kv->mod_revision);
  return kv;
}

Status EtcdLiveLink::Vacate(int gen, const rdzv::LiveVacancy& v) {
  return PutOnce(gen, keys_.live_vacant(gen, v.node, v.turn), v.ToJson().dump()).status();
}

Result<bool> EtcdLiveLink::Claim(int gen, int node, int turn) {
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> kv,
                         PutOnce(gen, keys_.live_claim(gen, node, turn), agent_));
  return kv && kv->value == agent_;
}

std::map<int, rdzv::LiveVacancy> EtcdLiveLink::Vacancies(int gen) {
  std::lock_guard<std::mutex> lock(mu_);
  return gen_ == gen ? vacancies_ : std::map<int, rdzv::LiveVacancy>();
}

std::map<int, std::string> EtcdLiveLink::Claims(int gen) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, std::string> out;
  if (gen_ != gen) return out;
  for (const auto& [node, v] : vacancies_) {
    if (auto c = claims_.find({node, v.turn}); c != claims_.end()) out[node] = c->second;
  }
  return out;
}

}  // namespace tenax::launch
