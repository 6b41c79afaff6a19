// The node agent's part of live recovery across nodes (resilience.mode = "live", live_link.h):
// a lost node's ranks leave the job's live record instead of ending the generation, a spare
// takes the lost node's place with ranks that join the live members, and the job is done when
// every node rank is done or was lost with nobody to take it.
//   Lost      an active agent's key vanished (its lease expired): every node that saw it drops
//             the lost node's ranks from the record (compare-and-swap; a repeat changes nothing)
//             and puts its vacancy (gen/<G>/live/vacant/<node>, put once). Node 0 too: the
//             live group's lowest member leads (writes the metrics, commits checkpoints with its
//             own agent's consent) and the job's goodput.json is written by whoever holds the
//             lowest node rank left (ReportingAgent). The spare that took a node rank may be
//             lost in its turn: the node rank is vacated again, one turn later
//             (gen/<G>/live/vacant/<node>/<turn>).
//   Claimed   a spare puts gen/<G>/live/claim/<node>/<turn> if absent; the one that did runs that
//             node rank's ranks as replacements (GenerationPlan::live_vacancy) and is watched by
//             the others from then on, in the lost agent's place.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tenax/core/log.h"
#include "tenax/launch/node_agent_internal.h"

namespace tenax::launch::agent_internal {

void NodeAgent::LiveNodesLost(int64_t g, const rdzv::Plan& plan, bool active) {
  if (Fenced()) return;  // the others decide: this node is the one they lost
  const std::map<int, rdzv::LiveVacancy> vacant = live_->Vacancies(g);
  const std::map<int, std::string> claims = live_->Claims(g);
  for (const auto& [node, id] : claims) {
    if (id != info_.id) view_.Activate(node, id);
  }
  // The agent holding each node rank now: the plan's, or the spare that took its newest vacancy
  // (none while it is vacant).
  auto node_held_by = [&](const std::string& id) {
    for (int node = 0; node < static_cast<int>(plan.nodes.size()); ++node) {
      const auto v = vacant.find(node);
      const auto c = claims.find(node);
      const std::string holder = v == vacant.end()
                                     ? plan.nodes[static_cast<size_t>(node)]
                                     : (c != claims.end() ? c->second : std::string());
      if (!holder.empty() && holder == id) return node;
    }
    return -1;
  };
  const int n = o_.nproc_per_node;
  for (const std::string& id : view_.Lost()) {
    if (id == info_.id) continue;  // its own key gone: fenced (above), never its to act on
    const int node = node_held_by(id);
    if (node < 0) {
      // A spare: a node rank the active nodes vacated already (`id` held it) is theirs to have
      // decided; this spare only claims it (LiveClaimVacancy, again at the next wake when its
      // claim did not go through), never ends the generation for it.
      if (!active && std::any_of(vacant.begin(), vacant.end(),
                                 [&](const auto& v) { return v.second.agent == id; })) {
        view_.Forgive(id);
      }
      continue;  // otherwise not a node rank's holder: the generation ends
    }
    const int turn = vacant.count(node) > 0 ? vacant.at(node).turn + 1 : 0;
    if (!active) {
      // A spare: the active nodes drop the lost one's ranks and say it is vacant (it has no
      // step to tell); if they cannot, they end the generation, and so its wait.
      view_.Forgive(id);
      continue;
    }
    std::vector<int> leave;
    for (int r = node * n; r < (node + 1) * n; ++r) leave.push_back(r);
    Result<std::optional<rdzv::LiveRecord>> now = live_->Update(
        static_cast<int>(g),
        [&](const std::optional<rdzv::LiveRecord>& was) -> std::optional<rdzv::LiveRecord> {
          const bool member = was && std::any_of(leave.begin(), leave.end(),
                                                 [&](int r) { return was->membership.Has(r); });
          if (!member) return std::nullopt;  // dropped already (by another node)
          return rdzv::NextLiveEpoch(*was, leave, {});
        });
    if (!now.ok() || !*now) {
      log::Error(
          "launch: node {} ({}) lost; cannot drop its ranks from the live record ({}): the "
          "generation ends",
          node, id, now.ok() ? "there is none" : now.status().message());
      continue;
    }
    // The step the members hold (a spare's view has no ranks: -1).
    int64_t step = -1;
    for (const protocol::Beat& b : supervisor_->beats()) step = std::max(step, b.step);
    const rdzv::LiveRecord& r = **now;
    rdzv::LiveVacancy v{node, turn, id, leave, WallNow(), r.membership.epoch, r.membership.members,
                        step};
    if (Status st = live_->Vacate(static_cast<int>(g), v); !st.ok()) {
      log::Error("launch: node {} ({}) lost; cannot record its vacancy ({}): the generation ends",
                 node, id, st.message());
      continue;
    }
    view_.Forgive(id);
    log::Warn(
        "launch: node {} ({}) lost; live recovery: rank(s) {} train on in epoch {}, a spare may "
        "take node {}'s place",
        node, id, fmt::join(r.membership.members, ","), r.membership.epoch, node);
  }
}

bool NodeAgent::LiveStillCurrent(int64_t g, const rdzv::Plan& plan) {
  for (;;) {
    LiveNodesLost(g, plan, /*active=*/false);
    const std::set<std::string> seen = view_.Lost();
    const bool current = view_.StillCurrent();
    if (current || view_.Lost() == seen) return current;
  }
}

std::optional<std::string> NodeAgent::LiveStopReason(int64_t g, const rdzv::Plan& plan,
                                                     const std::vector<protocol::Beat>& beats) {
  for (;;) {
    LiveNodesLost(g, plan, /*active=*/true);
    const std::set<std::string> seen = view_.Lost();
    std::optional<std::string> reason = view_.StopReason(beats);
    if (!reason || view_.Lost() == seen) return reason;
  }
}

std::optional<rdzv::LiveVacancy> NodeAgent::LiveClaimVacancy(int64_t g) {
  if (Fenced()) return std::nullopt;
  const std::map<int, std::string> claims = live_->Claims(g);
  for (const auto& [node, v] : live_->Vacancies(g)) {
    if (claims.count(node) > 0) continue;
    Result<bool> won = live_->Claim(static_cast<int>(g), node, v.turn);
    if (!won.ok()) {
      log::Warn(
          "launch: generation {}: cannot claim node {}'s place ({}); trying again at the next "
          "wake",
          g, node, won.status().message());
      continue;
    }
    if (*won) {
      log::Info("launch: generation {}: this spare takes the place of node {} ({}), lost{}", g,
                node, v.agent,
                v.turn > 0 ? fmt::format(" again ({} times in this generation)", v.turn + 1) : "");
      return v;
    }
  }
  return std::nullopt;
}

bool NodeAgent::AllDone(int64_t g) {
  Result<etcd::RangeResponse> d = etcd_->GetPrefix(keys_.dones(g));
  if (!d.ok()) return false;
  if (!live_) return static_cast<int>(d->kvs.size()) >= o_.nnodes;
  std::set<int> done;
  for (const etcd::KeyValue& kv : d->kvs) {
    done.insert(static_cast<int>(rdzv::ParseInt(kv.key.substr(keys_.dones(g).size()), -1)));
  }
  // A node rank lost live that no spare took: its ranks left the record, nothing is left to do.
  const std::map<int, rdzv::LiveVacancy> vacant = live_->Vacancies(g);
  const std::map<int, std::string> claims = live_->Claims(g);
  for (int node = 0; node < o_.nnodes; ++node) {
    if (done.count(node) == 0 && (vacant.count(node) == 0 || claims.count(node) > 0)) return false;
  }
  return true;
}

std::string NodeAgent::ReportingAgent(int64_t g, const rdzv::Plan& plan) {
  if (!live_) return plan.nodes.empty() ? std::string() : plan.nodes[0];
  const std::map<int, rdzv::LiveVacancy> vacant = live_->Vacancies(g);
  const std::map<int, std::string> claims = live_->Claims(g);
  for (int node = 0; node < static_cast<int>(plan.nodes.size()); ++node) {
    if (vacant.count(node) == 0) return plan.nodes[static_cast<size_t>(node)];
    if (auto c = claims.find(node); c != claims.end()) return c->second;
  }
  return std::string();  // every node rank lost: nobody is left to write it
}

}  // namespace tenax::launch::agent_internal
