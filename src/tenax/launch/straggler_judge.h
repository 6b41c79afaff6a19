// Node 0's agent's judgement of stragglers among every rank of a multi-node job (node_agent.h,
// "progress"): fed what each node published of its ranks' compute times (gen/<G>/progress/<node>),
// it says which ranks straggle (gen/<G>/straggler/<rank> records) and, with
// --replace-stragglers, which straggling node a ready spare node is to replace. A whole slow node
// looks normal to its own launcher: only the view over every rank of the job finds it.
//
// The decisions only: no etcd, no clock (the caller passes the time). The node agent reads the
// progress records and the live and slow agents, and writes what the judge decides
// (node_agent_progress.cc).
// Thread safety: none; the agent's progress thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tenax/launch/rendezvous.h"
#include "tenax/launch/stragglers.h"

namespace tenax::launch {

struct StragglerJudgeOptions {
  int nnodes = 1;
  int nproc_per_node = 1;
  double factor = 1.5;              // --straggler-factor
  int steps = 3;                    // --straggler-steps
  bool replace_stragglers = false;  // --replace-stragglers
};

// A straggler found in a generation, as the job records it.
struct StragglerFinding {
  int rank = -1;
  // gen/<G>/straggler/<rank>: time_unix, generation, rank, node, host, agent, step, compute_s,
  // median_s (goodput.json's stragglers table reads it).
  nlohmann::json record;
};

// One generation at a time: the first Observe of another generation starts afresh (a new
// detector, nothing pending). A rank straggles once per generation at most (StragglerDetector).
class StragglerJudge {
 public:
  explicit StragglerJudge(StragglerJudgeOptions options) : o_(options) {}
  StragglerJudge(const StragglerJudge&) = delete;
  StragglerJudge& operator=(const StragglerJudge&) = delete;

  // What the nodes published for generation g (planned as `plan`), at `now_unix`: the stragglers
  // found since the last call, each logged. With --replace-stragglers, the node of each (one
  // known to the plan) is pending replacement from then on, its failure report (kind straggler,
  // exit code kStraggler) dated `now_unix`.
  std::vector<StragglerFinding> Observe(int64_t g, const rdzv::Plan& plan,
                                        const std::vector<rdzv::NodeProgress>& progress,
                                        double now_unix);
  // A node is waiting to be replaced (only ever with --replace-stragglers).
  bool HasPending() const { return !pending_.empty(); }
  // The failure to act on when a spare node is ready: a live agent (`alive`) that is not itself a
  // replaced straggler (`slow`) nor active in `plan`. The lowest pending node goes first. Without
  // a spare: nullopt, and the slow node trains on (said once per generation).
  std::optional<rdzv::FailureReport> ChooseReplacement(const std::set<std::string>& alive,
                                                       const std::set<std::string>& slow,
                                                       const rdzv::Plan& plan);

  int64_t generation() const { return generation_; }
  // Node -> its straggling, to be replaced.
  const std::map<int, rdzv::FailureReport>& pending() const { return pending_; }

 private:
  const StragglerJudgeOptions o_;
  int64_t generation_ = -1;
  std::unique_ptr<StragglerDetector> detector_;  // over every rank of the job
  std::map<int, rdzv::FailureReport> pending_;
  bool said_no_spare_ = false;
};

}  // namespace tenax::launch
