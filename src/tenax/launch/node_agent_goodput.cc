// The node agent's account of the job: goodput.json (and the run report) built from what every
// generation's node 0 and every failure left in etcd, and the failure each generation ended by, as
// every node's log names it.
#include <fmt/format.h>
#include <unistd.h>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/goodput.h"
#include "tenax/launch/node_agent_internal.h"
#include "tenax/report/html_report.h"

namespace tenax::launch::agent_internal {

// goodput.json from what etcd holds about every generation (node 0's report of each) and every
// failure, so it covers every node and survives the loss of node 0.
void NodeAgent::WriteGoodput(bool ended, int code) {
  if (job_.goodput_path.empty()) return;
  Goodput g(job_start_unix_, nullptr, host_, static_cast<int>(::getpid()));
  Result<int64_t> current = CurrentGeneration();
  if (!current.ok()) return;
  double now = WallNow() - job_start_unix_;
  double last_end = -1;  // when the newest generation ended (a report written after the job ended
                         // still ends where the job did)
  nlohmann::json nodes = nlohmann::json::array();
  for (int64_t gen = 0; gen <= *current; ++gen) {
    Result<std::optional<KeyValue>> rep = etcd_->Get(keys_.report(gen, 0));
    Result<std::optional<KeyValue>> plan_kv = etcd_->Get(keys_.plan(gen));
    if (!plan_kv.ok() || !*plan_kv) continue;  // never ran
    Result<rdzv::Plan> plan = rdzv::Plan::FromJson((*plan_kv)->value);
    if (plan.ok()) nodes.push_back(plan->ToJson());
    nlohmann::json r =
        rep.ok() && *rep ? nlohmann::json::parse((**rep).value, nullptr, false) : nlohmann::json();
    const double start = r.is_object() ? r.value("start_unix", -1.0) : -1.0;
    g.GenerationStarted(static_cast<int>(gen), start >= 0 ? start - job_start_unix_ : now);
    if (r.is_object() && r.value("ready_unix", -1.0) >= 0) {
      protocol::Beat ready;
      ready.generation = static_cast<int>(gen);
      ready.phase = protocol::Phase::kReady;
      ready.resume_step = r.value("resume_step", int64_t{0});
      ready.run_dir = r.value("run_dir", std::string());
      ready.wall_s = r.value("ready_unix", 0.0);
      g.LeadBeat(ready, ready.wall_s - job_start_unix_, ready.wall_s);
      protocol::Beat last = ready;
      last.phase = protocol::Phase::kTrain;
      last.step = r.value("last_step", int64_t{0});
      last.steps_s = r.value("steps_s", 0.0);
      last.checkpoint_s = r.value("checkpoint_s", 0.0);
      last.tokens_per_s = r.value("tokens_per_s", 0.0);
      last.wall_s = r.value("last_step_unix", ready.wall_s);
      if (last.step > ready.resume_step)
        g.LeadBeat(last, last.wall_s - job_start_unix_, last.wall_s);
    }
    if (r.is_object() && r.value("end_unix", -1.0) >= 0) {
      g.GenerationEnded(r.value("end_unix", 0.0) - job_start_unix_, r.value("exit_code", 0));
      last_end = std::max(last_end, r.value("end_unix", 0.0) - job_start_unix_);
    }
    // Records the nodes left under a prefix (stragglers, exit faults), on the job's clock.
    auto records = [&](const std::string& prefix, auto add) {
      Result<RangeResponse> rs = etcd_->GetPrefix(prefix);
      if (!rs.ok()) return;
      for (const KeyValue& kv : rs->kvs) {
        nlohmann::json x = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
        if (!x.is_object()) continue;
        x["time_s"] = x.value("time_unix", job_start_unix_) - job_start_unix_;
        x.erase("time_unix");
        add(std::move(x));
      }
    };
    records(keys_.stragglers(gen), [&](nlohmann::json x) { g.AddStraggler(std::move(x)); });
    records(keys_.exit_faults(gen), [&](nlohmann::json x) { g.AddExitFault(std::move(x)); });
    Result<std::vector<rdzv::FailureReport>> reports = FailureReportsOf(gen);
    if (!reports.ok()) continue;
    if (std::optional<rdzv::FailureReport> first = rdzv::FirstFailure(*reports)) {
      FailureRecord f;
      f.time_s = first->wall_s - job_start_unix_;
      f.generation = static_cast<int>(gen);
      f.rank = first->rank;
      f.node = first->node_rank;
      f.host = first->host;
      f.kind = first->kind;
      f.cause = first->cause;
      f.exit_code = first->code;
      if (first->kind == "node-lost" || first->kind == "partition") {
        // A lost node is known when its lease expires; its peers saw it go earlier (their
        // collectives broke): the earliest of those is when it failed.
        double failed = first->wall_s;
        for (const rdzv::FailureReport& r : *reports) {
          if (r.secondary) failed = std::min(failed, r.wall_s);
        }
        f.detection_s = std::max(0.0, first->wall_s - failed);
      }
      g.AddFailure(f);
    }
  }
  if (ended && last_end >= 0) now = std::min(now, last_end + 1.0);
  nlohmann::json report = g.Report(now, code, ended);
  report["nodes_by_generation"] = nodes;
  report["job_id"] = a_.job_id;
  Status st = LocalFs().WriteFileAtomic(job_.goodput_path, report.dump(2) + "\n");
  if (!st.ok()) log::Warn("launch: could not write {}: {}", job_.goodput_path, st.message());
  if (ended) log::Info("launch: {}", Goodput::Summary(report));
  // The run report (report/html_report.h) from the node holding node rank 0, which has the run
  // folder's metrics (on shared storage, or its own ranks' on a private folder).
  if (ended && st.ok()) report::WriteReportAtEnd(job_.run_dir, job_.goodput_path, "launch");
}

Result<std::vector<rdzv::FailureReport>> NodeAgent::FailureReportsOf(int64_t g) {
  TENAX_ASSIGN_OR_RETURN(RangeResponse fs, etcd_->GetPrefix(keys_.failures(g)));
  std::vector<rdzv::FailureReport> reports;
  for (const KeyValue& kv : fs.kvs) {
    auto f = rdzv::FailureReport::FromJson(kv.value);
    if (f.ok()) reports.push_back(*f);  // a record of another version: not evidence
  }
  return reports;
}

void NodeAgent::LogFailureOf(int64_t g) {
  // Every node's log names the failure the job decided on, from every node's evidence: a node's
  // own "generation G -> G+1" line tells only what its ranks saw (often: peers lost).
  Result<std::vector<rdzv::FailureReport>> reports = FailureReportsOf(g);
  if (!reports.ok()) return;
  std::optional<rdzv::FailureReport> first = rdzv::FirstFailure(*reports);
  if (!first) return;
  const std::string who = first->rank >= 0
                              ? fmt::format("rank {} on node {}", first->rank, first->node_rank)
                              : fmt::format("node {}", first->node_rank);
  log::Info("launch: generation {} failed: {} ({}; {}): {}", g, who, first->kind, first->host,
            first->cause);
}

}  // namespace tenax::launch::agent_internal
