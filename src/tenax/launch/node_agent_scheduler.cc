// The node agent and the cluster's scheduler (scheduler.h): a node tenax stops trusting (lost,
// replaced as a straggler) is drained, once for the job, by the agent that recorded it; the
// planner of a generation keeps --min-spares spare nodes by asking for the missing ones. Both are
// best effort: etcd or the scheduler failing here is logged and never stops the job.
#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/launch/node_agent_internal.h"

namespace tenax::launch::agent_internal {

void NodeAgent::DrainNode(int64_t g, const std::string& id, const std::string& why) {
  if (!scheduler_ || !o_.drain_bad_nodes) return;
  Result<std::optional<etcd::KeyValue>> kv = Retry([&] { return etcd_->Get(keys_.member(id)); });
  if (!kv.ok() || !*kv) {
    log::Warn("launch: cannot drain the node of agent {}: its record is not in etcd", id);
    return;
  }
  Result<rdzv::AgentInfo> member = rdzv::AgentInfo::FromJson((**kv).value);
  if (!member.ok()) return;
  const std::string reason = fmt::format("job {}: {}", a_.job_id, why);
  const nlohmann::json record = {{"agent", id},
                                 {"node", member->scheduler_node},
                                 {"generation", g},
                                 {"reason", reason},
                                 {"time_unix", WallNow()}};
  Result<bool> first = Retry([&] { return etcd_->PutIfAbsent(keys_.drained(id), record.dump()); });
  if (first.ok() && *first) scheduler_->Drain(member->scheduler_node, reason);
}

void NodeAgent::KeepSparePool(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& alive,
                              const std::set<std::string>& last_resort) {
  // The allocation brings the first spares; tenax replaces those failures use up.
  if (!scheduler_ || o_.min_spares <= 0 || g == 0) return;
  int spares = 0;
  for (const std::string& id : alive) {
    spares += plan.NodeRankOf(id) < 0 && last_resort.count(id) == 0 ? 1 : 0;
  }
  Result<etcd::RangeResponse> requests = etcd_->GetPrefix(keys_.spare_requests());
  Result<etcd::RangeResponse> members = etcd_->GetPrefix(keys_.members());
  if (!requests.ok() || !members.ok()) return;
  std::set<std::string> answered;  // requests whose agent registered
  for (const auto& [id, m] : AgentRecords(*members)) {
    if (!m.spare_request.empty()) answered.insert(m.spare_request);
  }
  int pending = 0;  // asked for, not yet joined, not given up on (--rdzv-timeout)
  for (const etcd::KeyValue& r : requests->kvs) {
    const std::string name = r.key.substr(keys_.spare_requests().size());
    const nlohmann::json j = nlohmann::json::parse(r.value, nullptr, false);
    if (!j.is_object()) continue;
    if (answered.count(name) == 0 && j.value("error", std::string()).empty() &&
        WallNow() - j.value("time_unix", 0.0) < a_.nodes_timeout_s) {
      ++pending;
    }
  }
  const int missing = o_.min_spares - spares - pending;
  if (missing <= 0) return;
  log::Info(
      "launch: generation {}: {} spare node(s) left and {} on the way, --min-spares {}: asking "
      "the scheduler for {}",
      g, spares, pending, o_.min_spares, missing);
  for (int i = 0; i < missing; ++i) {
    const std::string name = fmt::format("g{}-{}", g, i);
    nlohmann::json record = {{"generation", g}, {"time_unix", WallNow()}};
    Result<bool> first =
        Retry([&] { return etcd_->PutIfAbsent(keys_.spare_request(name), record.dump()); });
    if (!first.ok() || !*first) continue;
    const std::string key = keys_.spare_request(name);
    // The worker thread fills in the answer (the EtcdClient is safe to share between threads).
    scheduler_->RequestSpare(name, [this, key, record](const Result<std::string>& job) mutable {
      if (job.ok()) {
        record["scheduler_job"] = *job;
      } else {
        record["error"] = job.status().message();
      }
      (void)Retry([&] { return etcd_->Put(key, record.dump()); });
    });
  }
}

nlohmann::json NodeAgent::SchedulerRecords() {
  nlohmann::json out = {{"drained", nlohmann::json::array()},
                        {"spare_requests", nlohmann::json::array()}};
  Result<etcd::RangeResponse> drained = etcd_->GetPrefix(keys_.drains());
  Result<etcd::RangeResponse> requests = etcd_->GetPrefix(keys_.spare_requests());
  Result<etcd::RangeResponse> members = etcd_->GetPrefix(keys_.members());
  if (!drained.ok() || !requests.ok() || !members.ok()) return out;
  out["drained"] = RecordsUnder(*drained, keys_.drains(), "agent");
  out["spare_requests"] = RecordsUnder(*requests, keys_.spare_requests(), "request");
  const std::map<std::string, rdzv::AgentInfo> who = AgentRecords(*members);
  for (nlohmann::json& j : out["spare_requests"]) {
    for (const auto& [id, m] : who) {
      if (m.spare_request == j["request"]) j["joined_agent"] = id;
    }
  }
  return out;
}

}  // namespace tenax::launch::agent_internal
