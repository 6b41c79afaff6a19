#include "tenax/launch/attribution.h"

#include <fmt/format.h>

#include <algorithm>

#include "tenax/core/check.h"

namespace tenax::launch {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::Phase;

bool IsSecondary(const RankEnd& e) {
  return e.code == protocol::ToInt(ExitCode::kPeerLost) || (e.report && e.report->secondary);
}

FailureKind ClassifyEnd(const RankEnd& e) {
  const bool in_checkpoint = e.phase == Phase::kCheckpoint || e.writing_checkpoint;
  if (e.report) {
    // The rank said what happened; a plain crash inside a checkpoint is still a checkpoint one.
    if (e.report->kind == FailureKind::kCrash && in_checkpoint && !e.report->exact) {
      return FailureKind::kCrashInCheckpoint;
    }
    return e.report->kind;
  }
  if (e.phase == Phase::kNonFinite) return FailureKind::kNonFinite;
  if (e.phase == Phase::kLossSpike) return FailureKind::kLossSpike;
  const bool io = e.code == protocol::ToInt(ExitCode::kIoError);
  if (in_checkpoint && e.code != protocol::ToInt(ExitCode::kUnavailable) &&
      e.code != protocol::ToInt(ExitCode::kCollectiveTimeout)) {
    return io ? FailureKind::kCheckpointWrite : FailureKind::kCrashInCheckpoint;
  }
  if (e.phase == Phase::kSetup) return FailureKind::kSetup;
  if (io) return FailureKind::kIoError;
  return FailureKind::kCrash;
}

Verdict AttributeFailure(const std::vector<RankEnd>& ends) {
  TENAX_CHECK_MSG(!ends.empty(), "AttributeFailure needs at least one failed rank");
  // Evidence time: a report is written before the rank exits, so it is the earlier witness.
  auto when = [](const RankEnd& e) { return e.report ? e.report->mono_s : e.mono_s; };
  std::vector<const RankEnd*> primaries, secondaries;
  for (const RankEnd& e : ends) (IsSecondary(e) ? secondaries : primaries).push_back(&e);
  auto by_time = [&](const RankEnd* a, const RankEnd* b) {
    return when(*a) != when(*b) ? when(*a) < when(*b) : a->rank < b->rank;
  };
  std::sort(primaries.begin(), primaries.end(), by_time);
  std::sort(secondaries.begin(), secondaries.end(), by_time);

  Verdict v;
  if (primaries.empty()) {
    const RankEnd& first = *secondaries.front();
    v.code = first.code;
    // Every rank may agree on what happened without any being its origin (a NaN gradient norm).
    const FailureKind seen = ClassifyEnd(first);
    v.kind = seen == FailureKind::kPeerLost ? FailureKind::kCrash : seen;
    v.mono_s = when(first);
    std::vector<int> ranks;
    for (const RankEnd* e : secondaries) ranks.push_back(e->rank);
    std::string list;
    for (size_t i = 0; i < ranks.size(); ++i) list += (i ? ", " : "") + std::to_string(ranks[i]);
    if (seen == FailureKind::kPeerLost || !first.report) {
      v.cause = fmt::format(
          "rank(s) {} lost their peers, and no rank failed on its own (the "
          "network, or a rank that is alive but unreachable)",
          list);
    } else {
      v.cause = fmt::format("rank(s) {} failed, none as the origin: {}", list, first.report->cause);
    }
    v.reasoning = "only secondary failures: undetermined";
    return v;
  }
  const RankEnd& first = *primaries.front();
  if (primaries.size() > 1) {
    const RankEnd& second = *primaries[1];
    if (!first.report && !second.report && when(second) - when(first) < kTieS) {
      v.code = first.code;
      v.kind = ClassifyEnd(first);
      v.mono_s = when(first);
      v.cause = fmt::format("ranks {} and {} failed within {:.1f} ms of each other ({}; {})",
                            first.rank, second.rank, 1e3 * (when(second) - when(first)),
                            protocol::DescribeExitCode(first.code),
                            protocol::DescribeExitCode(second.code));
      v.reasoning = "two independent failures that cannot be ordered: undetermined";
      return v;
    }
  }
  v.rank = first.rank;
  v.code = first.report ? first.report->code : first.code;
  v.kind = ClassifyEnd(first);
  v.host = first.host;
  v.mono_s = when(first);
  v.cause = fmt::format("rank {} {}", first.rank, protocol::DescribeExitCode(first.code));
  if (first.report && !first.report->cause.empty()) v.cause += ": " + first.report->cause;
  v.reasoning = first.report ? "it reported its own failure first" : "the first to fail";
  if (!secondaries.empty()) {
    v.reasoning +=
        fmt::format("; {} peer(s) failed after it because they lost it", secondaries.size());
  }
  if (primaries.size() > 1) {
    v.reasoning += fmt::format("; {} later failure(s) of other ranks", primaries.size() - 1);
  }
  return v;
}

int HangSuspect(const std::vector<int64_t>& last_step, const std::vector<bool>& finished) {
  if (last_step.empty()) return -1;
  const auto low = std::min_element(last_step.begin(), last_step.end());
  if (std::count(last_step.begin(), last_step.end(), *low) == 1) {
    return static_cast<int>(low - last_step.begin());
  }
  if (std::count(finished.begin(), finished.end(), false) == 1) {
    return static_cast<int>(std::find(finished.begin(), finished.end(), false) - finished.begin());
  }
  return -1;
}

}  // namespace tenax::launch
