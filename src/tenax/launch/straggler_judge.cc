#include "tenax/launch/straggler_judge.h"

#include <fmt/format.h>

#include "tenax/core/log.h"
#include "tenax/protocol/protocol.h"

namespace tenax::launch {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::ToInt;

std::vector<StragglerFinding> StragglerJudge::Observe(
    int64_t g, const rdzv::Plan& plan, const std::vector<rdzv::NodeProgress>& progress,
    double now_unix) {
  const int world = o_.nnodes * o_.nproc_per_node;
  if (generation_ != g || !detector_) {
    generation_ = g;
    detector_ = std::make_unique<StragglerDetector>(world, o_.factor, o_.steps);
    pending_.clear();
    said_no_spare_ = false;
  }
  std::map<int, std::string> host_of;  // node rank -> host
  for (const rdzv::NodeProgress& p : progress) {
    host_of[p.node_rank] = p.host;
    for (const auto& [rank, steps] : p.ranks) {
      if (rank >= 0 && rank < world) detector_->Add(rank, steps);
    }
  }
  std::vector<StragglerFinding> found;
  for (const Straggler& s : detector_->Evaluate()) {
    const int node = s.local / o_.nproc_per_node;
    const std::string agent = node < static_cast<int>(plan.nodes.size()) ? plan.nodes[node] : "";
    const std::string host = host_of[node];
    log::Warn(
        "launch: straggler: rank {} on node {} ({}) computed {:.3f}s per step against a median "
        "of {:.3f}s of the job's other ranks for {} steps in a row (step {})",
        s.local, node, host, s.compute_s, s.median_s, o_.steps, s.step);
    found.push_back({s.local,
                     {{"time_unix", now_unix},
                      {"generation", g},
                      {"rank", s.local},
                      {"node", node},
                      {"host", host},
                      {"agent", agent},
                      {"step", s.step},
                      {"compute_s", s.compute_s},
                      {"median_s", s.median_s}}});
    if (!o_.replace_stragglers || agent.empty() || pending_.count(node) > 0) continue;
    rdzv::FailureReport& f = pending_[node];
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
        node, s.local, s.compute_s, s.median_s, o_.steps);
    f.wall_s = now_unix;
  }
  return found;
}

std::optional<rdzv::FailureReport> StragglerJudge::ChooseReplacement(
    const std::set<std::string>& alive, const std::set<std::string>& slow, const rdzv::Plan& plan) {
  if (pending_.empty()) return std::nullopt;
  // A spare node that is alive and not itself a replaced straggler takes the slow node's place;
  // until one is there, the slow node trains on.
  std::set<std::string> ready = alive;
  for (const std::string& a : slow) ready.erase(a);
  for (const std::string& a : plan.nodes) ready.erase(a);
  if (ready.empty()) {
    if (!said_no_spare_) {
      log::Warn("launch: no spare node yet to take node {}'s place: it trains on",
                pending_.begin()->first);
      said_no_spare_ = true;
    }
    return std::nullopt;
  }
  return pending_.begin()->second;
}

}  // namespace tenax::launch
