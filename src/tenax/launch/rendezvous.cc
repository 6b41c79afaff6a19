#include "tenax/launch/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace tenax::launch::rdzv {
namespace {

Result<nlohmann::json> Parse(const std::string& text, const char* what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return DataError(fmt::format("etcd holds an unreadable {} record", what));
  return j;
}

}  // namespace

std::string Keys::commit(int64_t step) const { return commits() + fmt::format("{:012d}", step); }
std::string Keys::dropped(int64_t step) const { return drops() + fmt::format("{:012d}", step); }

nlohmann::json AgentInfo::ToJson() const {
  nlohmann::json j = {{"id", id},   {"host", host},   {"address", address},
                      {"pid", pid}, {"nproc", nproc}, {"file_port", file_port}};
  if (!scheduler_node.empty()) j["scheduler_node"] = scheduler_node;
  if (!scheduler_job.empty()) j["scheduler_job"] = scheduler_job;
  if (!spare_request.empty()) j["spare_request"] = spare_request;
  return j;
}

Result<AgentInfo> AgentInfo::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "agent"));
  AgentInfo a;
  a.id = j.value("id", std::string());
  a.host = j.value("host", std::string());
  a.address = j.value("address", std::string());
  a.file_port = j.value("file_port", 0);
  a.pid = j.value("pid", 0);
  a.nproc = j.value("nproc", 0);
  a.scheduler_node = j.value("scheduler_node", std::string());
  a.scheduler_job = j.value("scheduler_job", std::string());
  a.spare_request = j.value("spare_request", std::string());
  return a;
}

nlohmann::json Plan::ToJson() const {
  return {{"generation", generation}, {"nodes", nodes}, {"spares", spares}};
}

Result<Plan> Plan::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "plan"));
  Plan p;
  p.generation = j.value("generation", int64_t{0});
  p.nodes = j.value("nodes", std::vector<std::string>{});
  p.spares = j.value("spares", std::vector<std::string>{});
  return p;
}

int Plan::NodeRankOf(const std::string& agent) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] == agent) return static_cast<int>(i);
  }
  return -1;
}

std::optional<Plan> MakePlan(int64_t generation, int nnodes,
                             const std::vector<std::string>& given_order, const Plan* previous,
                             const std::set<std::string>& last_resort) {
  if (static_cast<int>(given_order.size()) < nnodes) return std::nullopt;
  // Agents of last resort go to the back of the line (their relative order kept).
  std::vector<std::string> joined_in_order;
  for (const std::string& a : given_order) {
    if (last_resort.count(a) == 0) joined_in_order.push_back(a);
  }
  for (const std::string& a : given_order) {
    if (last_resort.count(a) > 0) joined_in_order.push_back(a);
  }
  Plan p;
  p.generation = generation;
  p.nodes.assign(static_cast<size_t>(nnodes), std::string());
  std::set<std::string> placed;
  const std::set<std::string> joined(joined_in_order.begin(), joined_in_order.end());
  // A survivor keeps its node rank: its local files (checkpoint shards) stay where they are used.
  if (previous != nullptr) {
    for (int r = 0; r < nnodes && r < static_cast<int>(previous->nodes.size()); ++r) {
      const std::string& holder = previous->nodes[static_cast<size_t>(r)];
      if (joined.count(holder) > 0 && last_resort.count(holder) == 0) {
        p.nodes[static_cast<size_t>(r)] = holder;
        placed.insert(holder);
      }
    }
  }
  auto next = joined_in_order.begin();
  for (std::string& slot : p.nodes) {
    if (!slot.empty()) continue;
    while (placed.count(*next) > 0) ++next;
    slot = *next;
    placed.insert(*next);
  }
  for (const std::string& a : joined_in_order) {
    if (placed.count(a) == 0) p.spares.push_back(a);
  }
  return p;
}

nlohmann::json NodeProgress::ToJson() const {
  nlohmann::json r = nlohmann::json::object();
  for (const auto& [rank, steps] : ranks) {
    nlohmann::json v = nlohmann::json::array();
    for (const auto& [step, compute] : steps) v.push_back({step, compute});
    r[std::to_string(rank)] = std::move(v);
  }
  return {{"agent", agent}, {"host", host}, {"node_rank", node_rank}, {"ranks", std::move(r)}};
}

Result<NodeProgress> NodeProgress::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "progress"));
  NodeProgress p;
  p.agent = j.value("agent", std::string());
  p.host = j.value("host", std::string());
  p.node_rank = j.value("node_rank", -1);
  if (!j.contains("ranks") || !j["ranks"].is_object()) return p;
  for (const auto& [key, steps] : j["ranks"].items()) {
    char* end = nullptr;
    const long rank = std::strtol(key.c_str(), &end, 10);
    if (end == key.c_str() || *end != '\0' || rank < 0 || !steps.is_array()) {
      return DataError(fmt::format("etcd holds an unreadable progress record (rank '{}')", key));
    }
    auto& out = p.ranks[static_cast<int>(rank)];
    for (const auto& s : steps) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number()) {
        return DataError("etcd holds an unreadable progress record (a step is not [step, s])");
      }
      out.emplace_back(s[0].get<int64_t>(), s[1].get<double>());
    }
  }
  return p;
}

nlohmann::json FailureReport::ToJson() const {
  nlohmann::json j = {{"agent", agent}, {"host", host},           {"node_rank", node_rank},
                      {"rank", rank},   {"code", code},           {"kind", kind},
                      {"cause", cause}, {"secondary", secondary}, {"wall_s", wall_s}};
  if (sdc.is_array() && !sdc.empty()) j["sdc"] = sdc;
  return j;
}

Result<FailureReport> FailureReport::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "failure"));
  FailureReport f;
  f.agent = j.value("agent", std::string());
  f.host = j.value("host", std::string());
  f.node_rank = j.value("node_rank", -1);
  f.rank = j.value("rank", -1);
  f.code = j.value("code", 0);
  f.kind = j.value("kind", std::string("crash"));
  f.cause = j.value("cause", std::string());
  f.secondary = j.value("secondary", false);
  f.wall_s = j.value("wall_s", 0.0);
  if (j.contains("sdc") && j["sdc"].is_array()) f.sdc = j["sdc"];
  return f;
}

std::optional<FailureReport> FirstFailure(const std::vector<FailureReport>& reports) {
  const FailureReport* best = nullptr;
  const FailureReport* first_secondary = nullptr;
  for (const FailureReport& r : reports) {
    if (r.secondary) {
      if (first_secondary == nullptr || r.wall_s < first_secondary->wall_s) first_secondary = &r;
      continue;
    }
    if (best == nullptr || r.wall_s < best->wall_s) best = &r;
  }
  if (best != nullptr) return *best;
  if (first_secondary == nullptr) return std::nullopt;
  FailureReport undetermined = *first_secondary;  // only secondaries: nobody to blame
  undetermined.rank = -1;
  undetermined.node_rank = -1;
  return undetermined;
}

nlohmann::json StopRecord::ToJson() const { return {{"code", code}, {"reason", reason}}; }

Result<StopRecord> StopRecord::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "stop"));
  return StopRecord{j.value("code", 1), j.value("reason", std::string())};
}

nlohmann::json LiveRecord::ToJson() const {
  nlohmann::json j = nlohmann::json::parse(protocol::LiveMembershipJson(membership));
  j["healing"] = healing;
  return j;
}

Result<LiveRecord> LiveRecord::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "live"));
  LiveRecord r;
  TENAX_ASSIGN_OR_RETURN(r.membership, protocol::ParseLiveMembership(text));
  if (j.contains("healing") && !j["healing"].is_array()) {
    return DataError("etcd holds an unreadable live record (healing): " + text);
  }
  for (const auto& h : j.value("healing", nlohmann::json::array())) {
    if (!h.is_number_integer() || !r.membership.Has(h.get<int>())) {
      return DataError("etcd holds a live record whose healing rank is no member: " + text);
    }
    r.healing.push_back(h.get<int>());
  }
  return r;
}

LiveRecord NextLiveEpoch(const LiveRecord& now, const std::vector<int>& leave,
                         const std::vector<int>& join) {
  auto in = [](const std::vector<int>& v, int r) {
    return std::find(v.begin(), v.end(), r) != v.end();
  };
  LiveRecord next;
  next.membership = now.membership;
  ++next.membership.epoch;
  next.membership.members.clear();
  for (int r : now.membership.members) {
    if (!in(leave, r)) next.membership.members.push_back(r);
  }
  for (int r : now.healing) {
    if (!in(leave, r)) next.healing.push_back(r);
  }
  next.membership.joining.clear();
  for (int r : join) {
    if (in(next.membership.members, r)) continue;
    next.membership.members.push_back(r);
    next.membership.joining.push_back(r);
    next.healing.push_back(r);
  }
  std::sort(next.membership.members.begin(), next.membership.members.end());
  std::sort(next.membership.joining.begin(), next.membership.joining.end());
  std::sort(next.healing.begin(), next.healing.end());
  return next;
}

std::string LiveStatesJson(const std::map<int, LiveRankState>& ranks) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [rank, s] : ranks) {
    j[std::to_string(rank)] = {
        {"epoch", s.epoch}, {"done", s.done}, {"ready", s.ready}, {"finished", s.finished}};
  }
  return j.dump();
}

Result<std::map<int, LiveRankState>> ParseLiveStates(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "live state"));
  std::map<int, LiveRankState> out;
  for (const auto& [key, v] : j.items()) {
    char* end = nullptr;
    const long rank = std::strtol(key.c_str(), &end, 10);
    if (end == key.c_str() || *end != '\0' || rank < 0 || !v.is_object()) {
      return DataError(fmt::format("etcd holds an unreadable live state record (rank '{}')", key));
    }
    out[static_cast<int>(rank)] = {v.value("epoch", -1), v.value("done", false),
                                   v.value("ready", false), v.value("finished", false)};
  }
  return out;
}

nlohmann::json LiveVacancy::ToJson() const {
  return {{"node", node},           {"turn", turn},   {"agent", agent},     {"ranks", ranks},
          {"time_unix", time_unix}, {"epoch", epoch}, {"members", members}, {"step", step}};
}

Result<LiveVacancy> LiveVacancy::FromJson(const std::string& text) {
  TENAX_ASSIGN_OR_RETURN(nlohmann::json j, Parse(text, "live vacancy"));
  LiveVacancy v;
  try {
    v.node = j.at("node").get<int>();
    v.turn = j.at("turn").get<int>();
    v.agent = j.at("agent").get<std::string>();
    v.ranks = j.at("ranks").get<std::vector<int>>();
    v.time_unix = j.at("time_unix").get<double>();
    v.epoch = j.at("epoch").get<int>();
    v.members = j.at("members").get<std::vector<int>>();
    v.step = j.at("step").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    return DataError("etcd holds an unreadable live vacancy record: " + text);
  }
  if (v.node < 0 || v.turn < 0) return DataError("etcd holds a live vacancy of no node: " + text);
  return v;
}

}  // namespace tenax::launch::rdzv
