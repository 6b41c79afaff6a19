// The node agent's view of its ranks across nodes (node_agent.h, "progress"): publishing their
// compute times, node 0's straggler judgement over every rank of the job, waiting for another
// node to name a hang, and the reports of a generation's failure and run that other agents read.
#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/launch/node_agent_internal.h"

namespace tenax::launch::agent_internal {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::ToInt;

rdzv::FailureReport NodeAgent::ReportOf(const Verdict& v, int node_rank) const {
  rdzv::FailureReport f;
  f.agent = info_.id;
  f.host = host_;
  f.node_rank = node_rank;
  f.rank = v.rank;
  f.code = v.code;
  f.kind = protocol::FailureKindName(v.kind);
  f.cause = v.cause;
  // Nobody here is to blame: every failed rank only lost a peer (or waited for one).
  f.secondary = v.rank < 0;
  // The evidence's time, on the wall clock (nodes compare wall clocks; monotonic clocks are per
  // machine).
  f.wall_s = WallNow() - (protocol::MonotonicNow() - v.mono_s);
  return f;
}

void NodeAgent::AwaitRemoteHang(const Verdict& v, double budget_s) {
  int64_t g;
  int node_rank;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = running_;
    node_rank = node_rank_;
  }
  if (g < 0) return;
  (void)etcd_->Put(keys_.failure(g, info_.id), ReportOf(v, node_rank).ToJson().dump());
  log::Info(
      "launch: this node's ranks wait for a rank on another node; waiting up to {:.0f}s for "
      "that node to name it before stopping them",
      budget_s);
  const bool named = WaitUntil(
      [&] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (moved_ || stopped_ || lease_lost_ || !lost_.empty()) return true;
        }
        Result<etcd::RangeResponse> fs = etcd_->GetPrefix(keys_.failures(g));
        if (!fs.ok()) return false;
        return std::any_of(fs->kvs.begin(), fs->kvs.end(), [](const etcd::KeyValue& kv) {
          Result<rdzv::FailureReport> f = rdzv::FailureReport::FromJson(kv.value);
          return f.ok() && !f->secondary;
        });
      },
      budget_s);
  if (!named) log::Warn("launch: no other node named the rank this node's ranks wait for");
}

void NodeAgent::ProgressLoop() {
  Judge judge;
  std::string published;
  for (;;) {
    int64_t g;
    int node_rank;
    int64_t lease;
    rdzv::Plan plan;
    rdzv::NodeProgress mine;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(kProgressS), [&] { return quit_; });
      if (quit_) return;
      if (running_ < 0 || node_rank_ < 0 || lease_lost_ || moved_ || straggler_stop_) continue;
      g = running_;
      node_rank = node_rank_;
      lease = lease_id_;
      plan = running_plan_;
      for (size_t l = 0; l < beats_.size(); ++l) {
        const protocol::Beat& b = beats_[l];
        if (b.generation != g || b.recent.empty()) continue;
        mine.ranks[node_rank * o_.nproc_per_node + static_cast<int>(l)] = b.recent;
      }
    }
    if (!mine.ranks.empty()) {
      mine.agent = info_.id;
      mine.host = host_;
      mine.node_rank = node_rank;
      std::string text = mine.ToJson().dump();
      if (text != published) {  // attached to the lease: it vanishes with this agent
        if (etcd_->Put(keys_.progress(g, node_rank), text, lease).ok()) published = std::move(text);
      }
    }
    if (node_rank != 0) continue;
    if (judge.generation != g) {
      judge = Judge();
      judge.generation = g;
      judge.detector = std::make_unique<StragglerDetector>(o_.nnodes * o_.nproc_per_node,
                                                           o_.straggler_factor, o_.straggler_steps);
    }
    if (std::optional<std::string> stop = JudgeStragglers(g, plan, &judge)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        straggler_stop_ = std::move(stop);
      }
      if (supervisor_) supervisor_->Wake();
    }
  }
}

std::optional<std::string> NodeAgent::JudgeStragglers(int64_t g, const rdzv::Plan& plan,
                                                      Judge* judge) {
  Result<etcd::RangeResponse> all = etcd_->GetPrefix(keys_.progresses(g));
  if (!all.ok()) return std::nullopt;  // etcd busy (a leader change): next time
  const int world = o_.nnodes * o_.nproc_per_node;
  std::map<int, std::string> host_of;  // node rank -> host
  for (const etcd::KeyValue& kv : all->kvs) {
    Result<rdzv::NodeProgress> p = rdzv::NodeProgress::FromJson(kv.value);
    if (!p.ok()) continue;
    host_of[p->node_rank] = p->host;
    for (const auto& [rank, steps] : p->ranks) {
      if (rank >= 0 && rank < world) judge->detector->Add(rank, steps);
    }
  }
  for (const Straggler& s : judge->detector->Evaluate()) {
    const int node = s.local / o_.nproc_per_node;
    const std::string agent = node < static_cast<int>(plan.nodes.size()) ? plan.nodes[node] : "";
    const std::string host = host_of[node];
    log::Warn(
        "launch: straggler: rank {} on node {} ({}) computed {:.3f}s per step against a median "
        "of {:.3f}s of the job's other ranks for {} steps in a row (step {})",
        s.local, node, host, s.compute_s, s.median_s, o_.straggler_steps, s.step);
    const nlohmann::json record = {
        {"time_unix", WallNow()}, {"generation", g}, {"rank", s.local}, {"node", node},
        {"host", host},           {"agent", agent},  {"step", s.step},  {"compute_s", s.compute_s},
        {"median_s", s.median_s}};
    (void)etcd_->Put(keys_.straggler(g, s.local), record.dump());
    if (!o_.replace_stragglers || agent.empty() || judge->pending.count(node) > 0) continue;
    rdzv::FailureReport& f = judge->pending[node];
    f.agent = agent;
    f.host = host;
    f.node_rank = node;
    f.rank = s.local;
    f.code = ToInt(ExitCode::kStraggler);
    f.kind = protocol::FailureKindName(FailureKind::kStraggler);
    f.cause = fmt::format(
        "node {} straggles: its rank {} computed {:.3f}s per step against a median of {:.3f}s of "
        "the job's other ranks for {} steps in a row (--replace-stragglers: a spare node takes "
        "its place)",
        node, s.local, s.compute_s, s.median_s, o_.straggler_steps);
    f.wall_s = WallNow();
  }
  if (judge->pending.empty()) return std::nullopt;
  // A spare node that is alive and not itself a replaced straggler takes the slow node's place;
  // until one is there, the slow node trains on.
  Result<etcd::RangeResponse> alive = etcd_->GetPrefix(keys_.agents());
  Result<etcd::RangeResponse> slow = etcd_->GetPrefix(keys_.slow_agents());
  if (!alive.ok() || !slow.ok()) return std::nullopt;
  std::set<std::string> ready = IdsUnder(*alive, keys_.agents());
  for (const std::string& a : IdsUnder(*slow, keys_.slow_agents())) ready.erase(a);
  for (const std::string& a : plan.nodes) ready.erase(a);
  if (ready.empty()) {
    if (!judge->said_no_spare) {
      log::Warn("launch: no spare node yet to take node {}'s place: it trains on",
                judge->pending.begin()->first);
      judge->said_no_spare = true;
    }
    return std::nullopt;
  }
  const rdzv::FailureReport f = judge->pending.begin()->second;
  (void)Retry([&] {
    return etcd_->Put(keys_.slow_agent(f.agent), nlohmann::json{{"generation", g}}.dump());
  });
  (void)Retry(
      [&] { return etcd_->Put(keys_.failure(g, "straggler-" + f.agent), f.ToJson().dump()); });
  if (Status st = Advance(g, f.code, f.cause); !st.ok()) log::Warn("launch: {}", st.message());
  return fmt::format("node {} straggles and is replaced (--replace-stragglers)", f.node_rank);
}

void NodeAgent::PublishReport(int64_t g, int node_rank, const Supervisor::Outcome& out) {
  const nlohmann::json report = supervisor_->goodput().Report(supervisor_->Elapsed(), 0, false);
  if (!report.contains("generations") || report["generations"].empty()) return;
  nlohmann::json gen = report["generations"].back();
  const double t0 = supervisor_->start_unix();
  auto unix_of = [&](const char* key) {
    const double v = gen.value(key, -1.0);
    return v >= 0 ? t0 + v : -1.0;
  };
  const nlohmann::json r = {{"agent", info_.id},
                            {"host", host_},
                            {"start_unix", unix_of("start_s")},
                            {"ready_unix", unix_of("ready_s")},
                            {"end_unix", unix_of("end_s")},
                            {"last_step_unix", unix_of("last_step_at")},
                            {"resume_step", gen.value("resume_step", int64_t{-1})},
                            {"last_step", gen.value("last_step", int64_t{-1})},
                            {"steps_s", gen.value("steps_s", 0.0)},
                            {"checkpoint_s", gen.value("checkpoint_s", 0.0)},
                            {"tokens_per_s", supervisor_->lead_beat().tokens_per_s},
                            {"run_dir", supervisor_->lead_beat().run_dir},
                            {"exit_code", out.exit_code}};
  (void)etcd_->Put(keys_.report(g, node_rank), r.dump());
}

}  // namespace tenax::launch::agent_internal
