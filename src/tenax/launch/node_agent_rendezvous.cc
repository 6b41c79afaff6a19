// The node agent's generations (node_agent.h, "join", "fail", "end"): reading the current one,
// joining it and waiting for its plan (the earliest-joined live agent makes it), moving on after a
// failure or a lost node, stopping the job, and the commits a rank may make only while its
// generation is current (the fence).
#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/launch/job_history.h"
#include "tenax/launch/node_agent_internal.h"

namespace tenax::launch::agent_internal {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::ToInt;

Result<int64_t> NodeAgent::CurrentGeneration() {
  TENAX_ASSIGN_OR_RETURN(bool created,
                         Retry([&] { return etcd_->PutIfAbsent(keys_.generation(), "0"); }));
  (void)created;
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> g,
                         Retry([&] { return etcd_->Get(keys_.generation()); }));
  if (!g) return Internal("the job's generation key vanished");
  return rdzv::ParseInt(g->value, 0);
}

Result<std::optional<rdzv::StopRecord>> NodeAgent::ReadStop() {
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> kv,
                         Retry([&] { return etcd_->Get(keys_.stop()); }));
  if (!kv) return std::optional<rdzv::StopRecord>();
  TENAX_ASSIGN_OR_RETURN(rdzv::StopRecord s, rdzv::StopRecord::FromJson(kv->value));
  return std::optional<rdzv::StopRecord>(s);
}

Status NodeAgent::Stop(int code, const std::string& reason) {
  rdzv::StopRecord s{code, reason};
  TENAX_ASSIGN_OR_RETURN(
      bool first, Retry([&] { return etcd_->PutIfAbsent(keys_.stop(), s.ToJson().dump()); }));
  if (first) log::Error("launch: the job stops (exit code {}): {}", code, reason);
  return Status::Ok();
}

Status NodeAgent::Advance(int64_t g, int code, const std::string& why) {
  if (!protocol::Restartable(code)) {
    return Stop(code, fmt::format("{} (exit code {}: a restart cannot fix it, "
                                  "docs/exit_codes.md)",
                                  why, code));
  }
  if (std::optional<std::string> no = restarts_.Take(g, WallNow())) {
    return Stop(code, fmt::format("{}; {}", why, *no));
  }
  TENAX_ASSIGN_OR_RETURN(bool bumped, Retry([&] {
                           return etcd_->CompareAndSwap(keys_.generation(), std::to_string(g),
                                                        std::to_string(g + 1));
                         }));
  if (bumped) {
    log::Info("launch: generation {} -> {}: {} ({})", g, g + 1, why,
              restarts_.Describe(g, WallNow()));
  }
  return Status::Ok();
}

Status NodeAgent::RecordLost(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& lost) {
  for (const std::string& id : lost) {
    rdzv::FailureReport f;
    f.agent = id;
    f.host = hosts_.count(id) > 0 ? hosts_[id] : std::string();
    f.node_rank = plan.NodeRankOf(id);
    f.kind = "node-lost";
    f.code = 137;
    f.wall_s = WallNow();
    f.cause = fmt::format(
        "node {} (agent {}) stopped renewing its etcd lease: killed, stopped, "
        "or cut off from the network",
        f.node_rank, id);
    TENAX_ASSIGN_OR_RETURN(bool first, Retry([&] {
                             return etcd_->PutIfAbsent(keys_.failure(g, "lost-" + id),
                                                       f.ToJson().dump());
                           }));
    if (first) {
      log::Error("launch: {}", f.cause);
      DrainNode(g, id,
                fmt::format("node lost in generation {}: its agent stopped renewing its etcd "
                            "lease (killed, stopped, or cut off)",
                            g));
    }
  }
  return Advance(g, 137, fmt::format("{} node(s) lost", lost.size()));
}

std::set<std::string> NodeAgent::RepeatOffenders(int64_t g) {
  // Culprits of the recent generations' failures, from every node's evidence (FirstFailure:
  // a node whose ranks only lost their peers is never one).
  std::map<std::string, std::vector<int64_t>> named;  // agent -> the generations it failed
  std::map<std::string, rdzv::FailureReport> last;
  // Agents one failure proved faulty (a silent-data-corruption check named their ranks; every
  // node it named, not only the first to report) -> that failure.
  std::map<std::string, std::pair<int64_t, rdzv::FailureReport>> proven;
  const double since = WallNow() - o_.quarantine_window_s;
  for (int64_t past = g - 1; past >= 0 && past >= g - 64; --past) {
    Result<std::vector<rdzv::FailureReport>> reports = ReadFailureReports(*etcd_, keys_, past);
    if (!reports.ok()) continue;
    for (const rdzv::FailureReport& r : *reports) {
      const std::optional<FailureKind> kind = protocol::ParseFailureKind(r.kind);
      if (!r.secondary && !r.agent.empty() && kind && protocol::QuarantinesAtOnce(*kind)) {
        proven.emplace(r.agent, std::make_pair(past, r));  // the newest, as `past` descends
      }
    }
    const std::optional<rdzv::FailureReport> first = rdzv::FirstFailure(*reports);
    if (!first || first->agent.empty() || first->wall_s < since) continue;
    named[first->agent].push_back(past);
    if (last.count(first->agent) == 0) last[first->agent] = *first;
  }
  Result<etcd::RangeResponse> already = etcd_->GetPrefix(keys_.quarantined());
  std::set<std::string> out =
      already.ok() ? IdsUnder(*already, keys_.quarantined()) : std::set<std::string>();
  auto quarantine = [&](const std::string& id, const std::vector<int64_t>& gens,
                        const std::string& why) {
    const nlohmann::json record = {
        {"generation", g}, {"failed_generations", gens}, {"reason", why}, {"time_unix", WallNow()}};
    Result<bool> first =
        Retry([&] { return etcd_->PutIfAbsent(keys_.quarantined(id), record.dump()); });
    if (first.ok() && *first) {
      log::Error("launch: generation {}: agent {} {}; it is a spare of last resort from now on", g,
                 id, why);
      DrainNode(g, id, why);
    }
    out.insert(id);
  };
  for (const auto& [id, failure] : proven) {
    if (out.count(id) > 0) continue;
    const auto& [gen, report] = failure;
    quarantine(id, {gen},
               fmt::format("quarantined: its rank {} computed wrong results in generation {} "
                           "(silent data corruption; one proven fault is enough): {}",
                           report.rank, gen, report.cause));
  }
  for (const auto& [id, gens] : named) {
    if (static_cast<int>(gens.size()) < o_.quarantine_after || out.count(id) > 0) continue;
    quarantine(
        id, gens,
        fmt::format("quarantined: its node was the culprit of {} failures within "
                    "--quarantine-window {:g}s (generations {}; the last: {})",
                    gens.size(), o_.quarantine_window_s, fmt::join(gens, ", "), last[id].cause));
  }
  return out;
}

Status NodeAgent::Commit(int64_t generation, int64_t step, const nlohmann::json& manifest) {
  if (view_.lease_lost()) return Unavailable("this node lost its etcd lease (fenced)");
  etcd::Txn txn;
  txn.compare.push_back(etcd::Compare::Value(keys_.generation(), etcd::CompareOp::kEqual,
                                             std::to_string(generation)));
  // And only while this agent still holds its lease in etcd's eyes: a node stopped or cut off
  // past it was found lost, and in live mode the generation goes on without it (its rank that
  // led the group may wake in the middle of a save).
  txn.compare.push_back(
      etcd::Compare::Lease(keys_.agent(info_.id), etcd::CompareOp::kEqual, view_.lease_id()));
  txn.success.push_back(
      etcd::TxnOp::Put(keys_.commit(step),
                       nlohmann::json{{"generation", generation}, {"manifest", manifest}}.dump()));
  txn.failure.push_back(etcd::TxnOp::Get(keys_.generation()));
  // A repeat after an unknown outcome (a leader lost mid-request) is harmless: the comparison
  // still holds and the same record is written again.
  TENAX_ASSIGN_OR_RETURN(etcd::TxnResponse r, Retry([&] { return etcd_->Commit(txn); }, 40));
  if (!r.succeeded) {
    std::string now = "?";
    if (!r.gets.empty() && !r.gets[0].kvs.empty()) now = r.gets[0].kvs[0].value;
    if (now == std::to_string(generation)) {
      return Unavailable(
          "this node lost its etcd lease (fenced): it must not commit a checkpoint; the others "
          "went on without it");
    }
    return Unavailable(
        fmt::format("generation {} is no longer current (now {}): a rank of an old "
                    "generation must not commit a checkpoint",
                    generation, now));
  }
  return Status::Ok();
}

Result<std::optional<rdzv::Plan>> NodeAgent::Rendezvous(int64_t g) {
  rdzv::Plan previous;
  bool have_previous = false;
  if (g > 0) {
    TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> p,
                           Retry([&] { return etcd_->Get(keys_.plan(g - 1)); }));
    if (p) {
      TENAX_ASSIGN_OR_RETURN(previous, rdzv::Plan::FromJson(p->value));
      have_previous = true;
    }
  }
  TENAX_RETURN_IF_ERROR(Retry([&] {
                          return etcd_->Put(keys_.join(g, info_.id), info_.ToJson().dump(),
                                            keeper_->lease());
                        }).status());
  std::optional<rdzv::Plan> plan;
  Status error = Status::Ok();
  bool gone = false;  // g is over (moved on, stopped) or this agent lost its lease
  const double waiting_since = protocol::MonotonicNow();
  double last_said = -1;
  const bool ok = view_.WaitUntil(
      [&] {
        std::set<std::string> lost;
        if (!view_.TakeLost(&lost)) return gone = true;  // fenced
        // An agent of the last plan vanished meanwhile: say so for that generation.
        if (!lost.empty() && last_plan_gen_ >= 0) {
          if (Status st = RecordLost(last_plan_gen_, last_plan_, lost); !st.ok()) {
            log::Warn("launch: {}", st.message());
          }
        }
        Result<std::optional<etcd::KeyValue>> p = etcd_->Get(keys_.plan(g));
        if (!p.ok()) return false;  // etcd unreachable for now: keep trying
        if (*p) {
          Result<rdzv::Plan> parsed = rdzv::Plan::FromJson((**p).value);
          if (!parsed.ok()) {
            error = parsed.status();
            return true;
          }
          plan = *parsed;
          return true;
        }
        Result<int64_t> now = CurrentGeneration();
        Result<std::optional<rdzv::StopRecord>> stop = ReadStop();
        if ((now.ok() && *now != g) || (stop.ok() && *stop)) return gone = true;
        Result<etcd::RangeResponse> joins = etcd_->GetPrefix(keys_.joins(g));
        Result<etcd::RangeResponse> agents = etcd_->GetPrefix(keys_.agents());
        if (!joins.ok() || !agents.ok()) return false;
        const std::set<std::string> alive = IdsUnder(*agents, keys_.agents());
        std::map<std::string, rdzv::AgentInfo> live = AgentRecords(*agents);
        for (const auto& [id, info] : live) hosts_[id] = info.host;
        view_.SetAgents(std::move(live));
        std::vector<etcd::KeyValue> order = joins->kvs;
        std::sort(order.begin(), order.end(), [](const etcd::KeyValue& a, const etcd::KeyValue& b) {
          return a.create_revision < b.create_revision;
        });
        std::vector<std::string> joined;
        for (const etcd::KeyValue& kv : order) {
          const std::string id = kv.key.substr(keys_.joins(g).size());
          if (alive.count(id) > 0) joined.push_back(id);
        }
        const bool all_joined = joined.size() == alive.size();
        if (static_cast<int>(alive.size()) < o_.nnodes) {
          const double waited = protocol::MonotonicNow() - waiting_since;
          if (last_said < 0 || waited - last_said > 10) {
            log::Info(
                "launch: generation {}: waiting for nodes ({} of {} alive; --rdzv-timeout "
                "{:g}s)",
                g, alive.size(), o_.nnodes, a_.nodes_timeout_s);
            last_said = waited;
          }
          if (waited > a_.nodes_timeout_s) {
            error = Stop(ToInt(ExitCode::kUnavailable),
                         fmt::format("only {} of {} nodes after waiting {:g}s (--rdzv-timeout)",
                                     alive.size(), o_.nnodes, a_.nodes_timeout_s));
            return gone = true;
          }
          return false;
        }
        // The earliest-joined live agent plans, once every live agent has joined.
        if (joined.empty() || joined.front() != info_.id || !all_joined) return false;
        Result<etcd::RangeResponse> slow = etcd_->GetPrefix(keys_.slow_agents());
        if (!slow.ok()) return false;
        std::set<std::string> last_resort = IdsUnder(*slow, keys_.slow_agents());
        for (const std::string& id : RepeatOffenders(g)) last_resort.insert(id);
        std::optional<rdzv::Plan> made =
            rdzv::MakePlan(g, o_.nnodes, joined, have_previous ? &previous : nullptr, last_resort);
        if (!made) return false;
        Result<bool> wrote = etcd_->PutIfAbsent(keys_.plan(g), made->ToJson().dump());
        if (wrote.ok() && *wrote) KeepSparePool(g, *made, alive, last_resort);
        return false;  // read it back on the next turn (another planner may have won)
      },
      a_.nodes_timeout_s + 3600);
  TENAX_RETURN_IF_ERROR(error);
  if (!ok || gone) return std::optional<rdzv::Plan>();
  return plan;
}

}  // namespace tenax::launch::agent_internal
