// A multi-node job's history as the node agents left it in etcd (rendezvous.h's keys), and the
// job's goodput.json made from it. Reading (ReadJobHistory) and accounting (JobGoodput) are
// apart so that the accounting is tested without an etcd: whichever agent holds node rank 0 (or,
// with node 0 lost live and nobody in its place, the lowest node rank left) writes goodput.json
// from this, so the report covers every node and survives the loss of node 0
// (node_agent_goodput.cc).
// Thread safety: none needed; values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/launch/rendezvous.h"

namespace tenax::etcd {
class EtcdClient;
}  // namespace tenax::etcd

namespace tenax::launch {

// What etcd holds about one generation that ran (it has a plan).
struct GenerationHistory {
  int64_t generation = 0;
  std::optional<rdzv::Plan> plan;  // none when its record does not parse
  // The generation's report (gen/<G>/report/<node>: agent, start_unix, ready_unix, resume_step,
  // run_dir, last_step, steps_s, checkpoint_s, tokens_per_s, last_step_unix, end_unix,
  // exit_code) of its lowest node rank run from the generation's start by the agent its plan
  // names: node 0's, or, when node 0 was lost (live, or before a restart), the next one's. A
  // spare that took a node's place live started late and is a last resort. Null when no node
  // left one.
  nlohmann::json lead_report;
  // Stragglers and exit faults the nodes recorded, with their time_unix.
  std::vector<nlohmann::json> stragglers;
  std::vector<nlohmann::json> exit_faults;
  // resilience.mode = "live": every node's live recoveries (gen/<G>/live/recoveries/<node>/<id>),
  // each with time_unix, once they happened healed_at_unix or discarded_at_unix, and the agent
  // that ran the replacement (`agent`, from the key).
  std::vector<nlohmann::json> live_recoveries;
  // live: the nodes lost while G ran (gen/<G>/live/vacant/), and the (node rank, turn) vacancies
  // a spare took.
  std::vector<rdzv::LiveVacancy> live_vacancies;
  std::set<std::pair<int, int>> live_claimed;
  // Every node's failure report (failures/<G>/); unreadable records are left out.
  std::vector<rdzv::FailureReport> failures;
};

struct JobHistory {
  double start_unix = 0;  // when the job's first agent started it (the job's clock starts here)
  std::vector<GenerationHistory> generations;  // ascending; generations that never ran left out
};

// Every node's failure report of generation g (failures/<G>/); records that do not parse (of
// another version) are not evidence and are left out. An error when etcd does not answer.
Result<std::vector<rdzv::FailureReport>> ReadFailureReports(etcd::EtcdClient& etcd,
                                                            const rdzv::Keys& keys, int64_t g);

// Reads generations 0..current from etcd. A generation whose records cannot be read (etcd
// unreachable) keeps what was read; an error only when nothing could be.
Result<JobHistory> ReadJobHistory(etcd::EtcdClient& etcd, const rdzv::Keys& keys, int64_t current,
                                  double start_unix);

// goodput.json of the job at `now_unix` (schema: docs/launcher_protocol.md), written by the agent
// on `host` (pid `pid`); `ended`: the job is over with exit code `code` (the report then ends
// where the newest generation did). Adds `nodes_by_generation` (each generation's plan).
nlohmann::json JobGoodput(const JobHistory& h, double now_unix, int code, bool ended,
                          const std::string& host, int pid);

}  // namespace tenax::launch
