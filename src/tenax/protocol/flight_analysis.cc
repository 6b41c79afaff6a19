#include "tenax/protocol/flight_analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "tenax/protocol/protocol.h"

namespace tenax::protocol {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string FlightAnalysis::Summary() const {
  std::string s;
  for (const auto& f : findings) s += f + "\n";
  if (!waited_on.empty()) {
    s += fmt::format("verdict: the other ranks are waiting for rank(s) {}", RankList(waited_on));
  } else {
    s += "verdict: no single rank is behind (see the findings above)";
  }
  return s;
}

FlightAnalysis AnalyzeFlightRecords(const std::vector<nlohmann::json>& dumps) {
  FlightAnalysis out;
  const int world = static_cast<int>(dumps.size());
  auto present = [&](int r) { return r >= 0 && r < world && dumps[r].is_object(); };
  for (int r = 0; r < world; ++r) {
    if (!present(r)) out.absent.push_back(r);
  }
  if (!out.absent.empty()) {
    out.findings.push_back(
        fmt::format("rank(s) {} left no flight record: crashed, or too stuck to handle SIGUSR1",
                    RankList(out.absent)));
  }

  // Per rank: the collectives it is inside (pending), and per group the last started seq.
  struct Pending {
    std::string op;
    int64_t seq;
    double since;
  };
  std::vector<std::map<std::string, Pending>> pending(world);  // rank -> group -> oldest pending
  std::vector<std::map<std::string, int64_t>> started(world);  // rank -> group -> last started
  std::map<std::string, std::set<int>> members;
  for (int r = 0; r < world; ++r) {
    members["world"].insert(r);
    if (!present(r)) continue;
    const nlohmann::json& d = dumps[r];
    const nlohmann::json groups = d.value("groups", nlohmann::json::object());
    for (const auto& [name, g] : groups.items()) {
      started[r][name] = g.value("last_started_seq", int64_t{0});
      members[name].insert(r);
      for (int m : g.value("ranks", std::vector<int>{})) members[name].insert(m);
    }
    const double dumped = d.value("dumped_unix", 0.0);
    for (const auto& c : d.value("collectives", nlohmann::json::array())) {
      const std::string state = c.value("state", std::string());
      if (state == "completed" || state == "abandoned") continue;  // not what blocks the rank
      const std::string group = c.value("group", std::string());
      if (pending[r].count(group)) continue;  // keep the oldest: that is what blocks the rank
      const double since = c.value("started_unix", 0.0) > 0 ? c.value("started_unix", 0.0)
                                                            : c.value("enqueued_unix", 0.0);
      pending[r][group] = {c.value("op", std::string()), c.value("seq", int64_t{0}),
                           dumped > 0 ? dumped - since : 0.0};
      // An enqueued op still counts as reached: the rank issued it.
      started[r][group] = std::max(started[r][group], c.value("seq", int64_t{0}));
    }
  }
  auto where = [&](int r) {
    const nlohmann::json& d = dumps[r];
    std::string s = fmt::format("in step {}, phase {}", d.value("step", int64_t{0}),
                                d.value("phase", std::string("?")));
    if (pending[r].empty()) return s + ", not in any collective";
    for (const auto& [g, p] : pending[r]) {
      s += fmt::format(", blocked in {} seq {} on group {}", p.op, p.seq, g);
    }
    return s;
  };

  std::set<int> behind_all;
  for (const auto& [group, ranks] : members) {
    int64_t blocked_seq = 0;
    for (int r : ranks) {
      if (!present(r)) continue;
      auto it = pending[r].find(group);
      if (it != pending[r].end()) blocked_seq = std::max(blocked_seq, it->second.seq);
    }
    if (blocked_seq == 0) continue;  // nobody is stuck in this group
    std::vector<int> waiting, behind;
    std::set<std::string> ops;
    double longest = 0;
    for (int r : ranks) {
      if (!present(r)) {
        if (r < world) behind.push_back(r);
        continue;
      }
      auto it = pending[r].find(group);
      if (it != pending[r].end() && it->second.seq == blocked_seq) {
        waiting.push_back(r);
        ops.insert(it->second.op);
        longest = std::max(longest, it->second.since);
      } else if (started[r].count(group) == 0 || started[r][group] < blocked_seq) {
        behind.push_back(r);
      }
    }
    std::string line = fmt::format(
        "group {} (ranks {}): rank(s) {} wait in {} seq {} ({:.1f} s "
        "before the dump)",
        group, RankList({ranks.begin(), ranks.end()}), RankList(waiting), *ops.begin(), blocked_seq,
        longest);
    if (ops.size() > 1) {
      std::string all;
      for (const auto& o : ops) all += (all.empty() ? "" : "/") + o;
      line += fmt::format(
          "; ranks disagree on the op at this seq ({}): collectives were "
          "issued in different orders",
          all);
    }
    for (int r : behind) {
      if (!present(r)) {
        line += fmt::format("; rank {} left no record", r);
      } else {
        line += fmt::format("; rank {} has not reached it (last started seq {}) and is {}", r,
                            started[r].count(group) ? started[r][group] : 0, where(r));
      }
      behind_all.insert(r);
    }
    if (behind.empty())
      line += "; every member is inside it (a transport problem, not a straggler)";
    out.findings.push_back(line);
  }
  // The ranks everyone ultimately waits for: behind and not blocked themselves. A rank that is
  // behind because it waits in another group points at that group's stragglers instead.
  for (int r : behind_all) {
    if (!present(r) || pending[r].empty()) out.waited_on.push_back(r);
  }
  if (out.waited_on.empty() && !behind_all.empty()) {
    out.waited_on.assign(behind_all.begin(), behind_all.end());
    out.findings.push_back(
        fmt::format("rank(s) {} are behind but blocked in other groups: a cycle, i.e. ranks issued "
                    "collectives in different orders",
                    RankList(out.waited_on)));
  }
  return out;
}

Result<std::vector<nlohmann::json>> ReadFlightRecords(FileSystem& fs, const std::string& dir,
                                                      int world_size) {
  std::vector<nlohmann::json> dumps(static_cast<size_t>(std::max(world_size, 0)));
  for (int r = 0; r < world_size; ++r) {
    const std::string path = FlightRecordPath(dir, r);
    Result<std::string> text = fs.ReadFile(path);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      return text.status();
    }
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || j.value("format", std::string()) != "tenax-flight-record") {
      return DataError(path + " is not a tenax flight record");
    }
    dumps[r] = std::move(j);
  }
  return dumps;
}

}  // namespace tenax::protocol
