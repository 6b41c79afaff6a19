// The node agent's view of its ranks across nodes (node_agent.h, "progress"): publishing their
// compute times, node 0's straggler judgement over every rank of the job (StragglerJudge decides;
// here its etcd reads and writes), waiting for another node to name a hang, and the reports of a
// generation's failure and run that other agents read.
#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/launch/node_agent_internal.h"
#include "tenax/report/run_data.h"

namespace tenax::launch::agent_internal {

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

nlohmann::json NodeAgent::NodeSdcRecords(int64_t g, int node_rank) const {
  nlohmann::json out = nlohmann::json::array();
  Result<std::optional<nlohmann::json>> all = report::ReadSdcDetections(job_.run_dir);
  if (!all.ok()) {
    log::Warn("launch: cannot read this node's silent-data-corruption records: {}",
              all.status().message());
    return out;
  }
  if (!*all || !(**all).is_array()) return out;
  for (const nlohmann::json& d : **all) {
    if (!d.is_object() || d.value("generation", int64_t{-1}) != g) continue;
    const int rank = d.value("rank", -1);
    if (rank >= 0 ? rank / o_.nproc_per_node == node_rank : node_rank == 0) out.push_back(d);
  }
  return out;
}

void NodeAgent::AwaitRemoteHang(const Verdict& v, double budget_s) {
  const AgentView::Running running = view_.running();
  const int64_t g = running.generation;
  const int node_rank = running.node_rank;
  if (g < 0) return;
  (void)etcd_->Put(keys_.failure(g, info_.id), ReportOf(v, node_rank).ToJson().dump());
  log::Info(
      "launch: this node's ranks wait for a rank on another node; waiting up to {:.0f}s for "
      "that node to name it before stopping them",
      budget_s);
  const bool named =
      view_.WaitUntil([&] { return !view_.StillCurrent() || CulpritNamed(g); }, budget_s);
  if (!named) log::Warn("launch: no other node named the rank this node's ranks wait for");
}

bool NodeAgent::CulpritNamed(int64_t g) {
  Result<etcd::RangeResponse> fs = etcd_->GetPrefix(keys_.failures(g));
  if (!fs.ok()) return false;
  return std::any_of(fs->kvs.begin(), fs->kvs.end(), [](const etcd::KeyValue& kv) {
    Result<rdzv::FailureReport> f = rdzv::FailureReport::FromJson(kv.value);
    return f.ok() && !f->secondary;
  });
}

void NodeAgent::AwaitCulprit(int64_t g, const rdzv::Plan& plan, double budget_s) {
  const bool ended = view_.WaitUntil(
      [&] {
        Result<int64_t> now = CurrentGeneration();
        if (now.ok() && *now != g) return true;  // another node moved it: its evidence is in
        if (CulpritNamed(g)) return true;
        // An active node vanished (its lease expired): it cannot name anyone; the rendezvous
        // records it as lost.
        Result<etcd::RangeResponse> agents = etcd_->GetPrefix(keys_.agents());
        if (!agents.ok()) return false;
        const std::set<std::string> alive = IdsUnder(*agents, keys_.agents());
        return std::any_of(plan.nodes.begin(), plan.nodes.end(),
                           [&](const std::string& id) { return alive.count(id) == 0; });
      },
      budget_s);
  if (!ended) {
    log::Warn("launch: no other node named the culprit of generation {} within {:.0f}s", g,
              budget_s);
  }
}

void NodeAgent::ProgressLoop() {
  StragglerJudgeOptions jo;
  jo.nnodes = o_.nnodes;
  jo.nproc_per_node = o_.nproc_per_node;
  jo.factor = o_.straggler_factor;
  jo.steps = o_.straggler_steps;
  jo.replace_stragglers = o_.replace_stragglers;
  StragglerJudge judge(jo);  // starts afresh in each generation it is shown
  std::string published;
  while (!view_.WaitForQuit(kProgressS)) {
    const std::optional<AgentView::ProgressTurn> turn = view_.Progress();
    if (!turn) continue;  // nothing runs here, fenced, moved on, or a straggler stop decided
    const int64_t g = turn->generation;
    const int node_rank = turn->node_rank;
    rdzv::NodeProgress mine;
    for (size_t l = 0; l < turn->beats.size(); ++l) {
      const protocol::Beat& b = turn->beats[l];
      if (b.generation != g || b.recent.empty()) continue;
      mine.ranks[node_rank * o_.nproc_per_node + static_cast<int>(l)] = b.recent;
    }
    if (!mine.ranks.empty()) {
      mine.agent = info_.id;
      mine.host = host_;
      mine.node_rank = node_rank;
      std::string text = mine.ToJson().dump();
      if (text != published) {  // attached to the lease: it vanishes with this agent
        if (etcd_->Put(keys_.progress(g, node_rank), text, turn->lease).ok()) {
          published = std::move(text);
        }
      }
    }
    if (node_rank != 0) continue;
    if (std::optional<std::string> stop = JudgeStragglers(g, turn->plan, &judge)) {
      view_.SetStragglerStop(std::move(*stop));
      if (supervisor_) supervisor_->Wake();
    }
  }
}

std::optional<std::string> NodeAgent::JudgeStragglers(int64_t g, const rdzv::Plan& plan,
                                                      StragglerJudge* judge) {
  Result<etcd::RangeResponse> all = etcd_->GetPrefix(keys_.progresses(g));
  if (!all.ok()) return std::nullopt;  // etcd busy (a leader change): next time
  std::vector<rdzv::NodeProgress> progress;
  for (const etcd::KeyValue& kv : all->kvs) {
    Result<rdzv::NodeProgress> p = rdzv::NodeProgress::FromJson(kv.value);
    if (p.ok()) progress.push_back(std::move(*p));
  }
  for (const StragglerFinding& s : judge->Observe(g, plan, progress, WallNow())) {
    (void)etcd_->Put(keys_.straggler(g, s.rank), s.record.dump());
  }
  if (!judge->HasPending()) return std::nullopt;
  Result<etcd::RangeResponse> alive = etcd_->GetPrefix(keys_.agents());
  Result<etcd::RangeResponse> slow = etcd_->GetPrefix(keys_.slow_agents());
  if (!alive.ok() || !slow.ok()) return std::nullopt;
  const std::optional<rdzv::FailureReport> f = judge->ChooseReplacement(
      IdsUnder(*alive, keys_.agents()), IdsUnder(*slow, keys_.slow_agents()), plan);
  if (!f) return std::nullopt;  // no spare node yet: the slow node trains on
  (void)Retry([&] {
    return etcd_->Put(keys_.slow_agent(f->agent), nlohmann::json{{"generation", g}}.dump());
  });
  (void)Retry(
      [&] { return etcd_->Put(keys_.failure(g, "straggler-" + f->agent), f->ToJson().dump()); });
  DrainNode(g, f->agent, "straggler replaced in generation " + std::to_string(g) + ": " + f->cause);
  if (Status st = Advance(g, f->code, f->cause); !st.ok()) log::Warn("launch: {}", st.message());
  return fmt::format("node {} straggles and is replaced (--replace-stragglers)", f->node_rank);
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
