// The node agent's account of the job: goodput.json (and the run report) from the job's history
// in etcd (job_history.h), and the failure each generation ended by, as every node's log names it.
#include <fmt/format.h>
#include <unistd.h>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/goodput.h"
#include "tenax/launch/job_history.h"
#include "tenax/launch/node_agent_internal.h"
#include "tenax/report/html_report.h"

namespace tenax::launch::agent_internal {

// goodput.json from what etcd holds about every generation and every failure (job_history.h).
void NodeAgent::WriteGoodput(bool ended, int code) {
  if (job_.goodput_path.empty()) return;
  Result<int64_t> current = CurrentGeneration();
  if (!current.ok()) return;
  Result<JobHistory> history = ReadJobHistory(*etcd_, keys_, *current, job_start_unix_);
  if (!history.ok()) return;
  nlohmann::json report =
      JobGoodput(*history, WallNow(), code, ended, host_, static_cast<int>(::getpid()));
  report["job_id"] = a_.job_id;
  if (scheduler_) report["scheduler"] = SchedulerRecords();
  // Nodes that kept failing (RepeatOffenders): spares of last resort since.
  report["quarantined_nodes"] = nlohmann::json::array();
  if (Result<etcd::RangeResponse> q = etcd_->GetPrefix(keys_.quarantined()); q.ok()) {
    report["quarantined_nodes"] = RecordsUnder(*q, keys_.quarantined(), "agent");
  }
  Status st = LocalFs().WriteFileAtomic(job_.goodput_path, report.dump(2) + "\n");
  if (!st.ok()) log::Warn("launch: could not write {}: {}", job_.goodput_path, st.message());
  if (ended) log::Info("launch: {}", Goodput::Summary(report));
  // The run report (report/html_report.h) from the node holding node rank 0, which has the run
  // folder's metrics (on shared storage, or its own ranks' on a private folder).
  if (ended && st.ok()) report::WriteReportAtEnd(job_.run_dir, job_.goodput_path, "launch");
}

void NodeAgent::LogFailureOf(int64_t g) {
  // Every node's log names the failure the job decided on, from every node's evidence: a node's
  // own "generation G -> G+1" line tells only what its ranks saw (often: peers lost).
  Result<std::vector<rdzv::FailureReport>> reports = ReadFailureReports(*etcd_, keys_, g);
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
