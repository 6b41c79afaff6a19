#include "tenax/launch/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
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

nlohmann::json AgentInfo::ToJson() const {
  return {{"id", id},   {"host", host},   {"address", address},
          {"pid", pid}, {"nproc", nproc}, {"file_port", file_port}};
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
                             const std::vector<std::string>& joined_in_order,
                             const Plan* previous) {
  if (static_cast<int>(joined_in_order.size()) < nnodes) return std::nullopt;
  Plan p;
  p.generation = generation;
  p.nodes.assign(static_cast<size_t>(nnodes), std::string());
  std::set<std::string> placed;
  const std::set<std::string> joined(joined_in_order.begin(), joined_in_order.end());
  // A survivor keeps its node rank: its local files (checkpoint shards) stay where they are used.
  if (previous != nullptr) {
    for (int r = 0; r < nnodes && r < static_cast<int>(previous->nodes.size()); ++r) {
      const std::string& holder = previous->nodes[static_cast<size_t>(r)];
      if (joined.count(holder) > 0) {
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

nlohmann::json FailureReport::ToJson() const {
  return {{"agent", agent}, {"host", host},           {"node_rank", node_rank},
          {"rank", rank},   {"code", code},           {"kind", kind},
          {"cause", cause}, {"secondary", secondary}, {"wall_s", wall_s}};
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

}  // namespace tenax::launch::rdzv
