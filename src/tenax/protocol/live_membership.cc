#include "tenax/protocol/live_membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "tenax/core/fs.h"

namespace tenax::protocol {

bool LiveMembership::Has(int slot) const {
  return std::find(members.begin(), members.end(), slot) != members.end();
}

bool LiveMembership::Joining(int slot) const {
  return std::find(joining.begin(), joining.end(), slot) != joining.end();
}

std::vector<int> LiveMembership::Missing() const {
  std::vector<int> out;
  for (int s = 0; s < world; ++s) {
    if (!Has(s)) out.push_back(s);
  }
  return out;
}

std::string LiveMembershipPath(const std::string& heartbeat_dir) {
  return heartbeat_dir + "/live-membership.json";
}

std::string LiveMembershipJson(const LiveMembership& m) {
  nlohmann::json j = {{"epoch", m.epoch},
                      {"generation", m.generation},
                      {"world", m.world},
                      {"members", m.members},
                      {"joining", m.joining}};
  return j.dump();
}

Result<LiveMembership> ParseLiveMembership(const std::string& json) {
  LiveMembership m;
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    m.epoch = j.at("epoch").get<int>();
    m.generation = j.value("generation", 0);
    m.world = j.at("world").get<int>();
    m.members = j.at("members").get<std::vector<int>>();
    m.joining = j.value("joining", std::vector<int>{});
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("live membership record: {}", e.what()));
  }
  const std::set<int> distinct(m.members.begin(), m.members.end());
  std::string bad;
  if (m.epoch < 0) bad = "a negative epoch";
  if (m.members.empty() || static_cast<int>(m.members.size()) > m.world) {
    bad = fmt::format("{} members for a world of {}", m.members.size(), m.world);
  }
  if (distinct.size() != m.members.size()) bad = "a slot listed twice";
  for (int s : m.members) {
    if (s < 0 || s >= m.world) bad = fmt::format("slot {} outside 0..{}", s, m.world - 1);
  }
  for (int s : m.joining) {
    if (!m.Has(s)) bad = fmt::format("joining slot {} is not a member", s);
  }
  if (bad.empty() && m.joining.size() >= m.members.size()) {
    bad = "no member with state to heal the joining ones from";
  }
  if (!bad.empty()) return InvalidArgument("live membership record has " + bad + ": " + json);
  return m;
}

Status WriteLiveMembership(const std::string& heartbeat_dir, const LiveMembership& m) {
  return LocalFs().WriteFileAtomic(LiveMembershipPath(heartbeat_dir), LiveMembershipJson(m));
}

Result<std::optional<LiveMembership>> ReadLiveMembership(const std::string& heartbeat_dir) {
  Result<std::string> text = LocalFs().ReadFile(LiveMembershipPath(heartbeat_dir));
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return std::optional<LiveMembership>();
  }
  if (!text.ok()) return text.status();
  TENAX_ASSIGN_OR_RETURN(LiveMembership m, ParseLiveMembership(*text));
  return std::optional<LiveMembership>(std::move(m));
}

std::vector<int> SlotsRunBy(const LiveMembership& m, int slot) {
  const auto me = std::find(m.members.begin(), m.members.end(), slot);
  if (me == m.members.end()) return {};
  const size_t index = static_cast<size_t>(me - m.members.begin());
  std::vector<int> out = {slot};
  const std::vector<int> missing = m.Missing();
  for (size_t k = 0; k < missing.size(); ++k) {
    if (k % m.members.size() == index) out.push_back(missing[k]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<SlotPart> PartsRunBy(const LiveMembership& m, int slot, int64_t samples, bool split) {
  const auto me = std::find(m.members.begin(), m.members.end(), slot);
  if (me == m.members.end()) return {};
  if (!split) {
    std::vector<SlotPart> out;
    for (int s : SlotsRunBy(m, slot)) out.push_back({s, 0, samples});
    return out;
  }
  const int64_t index = me - m.members.begin();
  const int64_t n = static_cast<int64_t>(m.members.size());
  const std::vector<int> missing = m.Missing();
  // The missing slots' samples one after another; this member's run of them.
  const int64_t total = static_cast<int64_t>(missing.size()) * samples;
  const int64_t from = index * total / n, to = (index + 1) * total / n;
  std::vector<SlotPart> out = {{slot, 0, samples}};
  for (size_t k = 0; k < missing.size(); ++k) {
    const int64_t first = static_cast<int64_t>(k) * samples;
    const int64_t begin = std::max(from, first), end = std::min(to, first + samples);
    if (begin < end) out.push_back({missing[k], begin - first, end - first});
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Parts as sets of (slot, row), and back as ascending runs.
std::set<std::pair<int, int64_t>> Rows(const std::vector<SlotPart>& parts) {
  std::set<std::pair<int, int64_t>> rows;
  for (const SlotPart& p : parts) {
    for (int64_t r = p.begin; r < p.end; ++r) rows.insert({p.slot, r});
  }
  return rows;
}

std::vector<SlotPart> Runs(const std::set<std::pair<int, int64_t>>& rows) {
  std::vector<SlotPart> out;
  for (const auto& [slot, row] : rows) {
    if (!out.empty() && out.back().slot == slot && out.back().end == row) {
      ++out.back().end;
    } else {
      out.push_back({slot, row, row + 1});
    }
  }
  return out;
}

}  // namespace

std::vector<SlotPart> PartsMinus(const std::vector<SlotPart>& a, const std::vector<SlotPart>& b) {
  std::set<std::pair<int, int64_t>> rows = Rows(a);
  for (const auto& r : Rows(b)) rows.erase(r);
  return Runs(rows);
}

bool PartsInclude(const std::vector<SlotPart>& a, const std::vector<SlotPart>& b) {
  const std::set<std::pair<int, int64_t>> in = Rows(a), of = Rows(b);
  return std::includes(in.begin(), in.end(), of.begin(), of.end());
}

LiveMembership ReplicaView(const LiveMembership& m, int ranks_per_replica, int position) {
  LiveMembership v;
  v.epoch = m.epoch;
  v.generation = m.generation;
  v.world = m.world / ranks_per_replica;
  for (int r : m.members) {
    if (r % ranks_per_replica == position) v.members.push_back(r / ranks_per_replica);
  }
  for (int r : m.joining) {
    if (r % ranks_per_replica == position) v.joining.push_back(r / ranks_per_replica);
  }
  return v;
}

}  // namespace tenax::protocol
