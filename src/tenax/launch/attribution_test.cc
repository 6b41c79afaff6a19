// First-failure attribution from synthetic evidence: the cause is never a rank that lost its
// peer, a report beats a later death, ties without reports blame nobody, and the kind follows
// the report and the last phase.
#include "tenax/launch/attribution.h"

#include <gtest/gtest.h>

namespace tenax::launch {
namespace {

using protocol::ExitCode;
using protocol::ExitReport;
using protocol::FailureKind;
using protocol::Phase;
using protocol::ToInt;

RankEnd Death(int rank, int code, double t, Phase phase = Phase::kTrain) {
  RankEnd e;
  e.rank = rank;
  e.code = code;
  e.mono_s = t;
  e.phase = phase;
  return e;
}

RankEnd Reported(int rank, int code, double t_report, double t_death, FailureKind kind,
                 bool secondary = false, const std::string& cause = "why") {
  RankEnd e = Death(rank, code, t_death);
  ExitReport r;
  r.rank = rank;
  r.code = code;
  r.kind = kind;
  r.secondary = secondary || kind == FailureKind::kPeerLost;
  r.cause = cause;
  r.mono_s = t_report;
  e.report = r;
  return e;
}

const int kPeerLost = ToInt(ExitCode::kPeerLost);

// The reported scenario: rank 1 is killed from outside; its peer's Gloo thread throws a moment
// later. Whatever the order the supervisor saw them in, and even if the peer's death was
// stamped first, the peer is secondary.
TEST(AttributionTest, APeerThatLostItsPartnerIsNeverTheCause) {
  for (const bool peer_first : {false, true}) {
    std::vector<RankEnd> ends = {
        Reported(0, kPeerLost, 10.0004, peer_first ? 10.0005 : 10.002, FailureKind::kPeerLost),
        Death(1, 137, 10.001)};
    const Verdict v = AttributeFailure(ends);
    EXPECT_EQ(v.rank, 1) << peer_first;
    EXPECT_EQ(v.code, 137);
    EXPECT_EQ(v.kind, FailureKind::kCrash);
    EXPECT_NE(v.cause.find("rank 1 was killed by signal 9"), std::string::npos) << v.cause;
    EXPECT_NE(v.reasoning.find("1 peer(s) failed after it"), std::string::npos) << v.reasoning;
  }
}

TEST(AttributionTest, AnAbortFromOutsideIsTheCauseWhenItsPeersExitAsSecondary) {
  std::vector<RankEnd> ends = {Death(2, kPeerLost, 5.01), Death(3, 134, 5.02),
                               Death(0, kPeerLost, 5.03), Death(1, kPeerLost, 5.00)};
  const Verdict v = AttributeFailure(ends);
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.code, 134);
}

TEST(AttributionTest, TheEarliestReportWinsOverALaterDeath) {
  // Rank 0 failed to write a checkpoint and said so; rank 1 died (SIGABRT, no report) after.
  std::vector<RankEnd> ends = {Death(1, 134, 7.5),
                               Reported(0, 5, 7.2, 7.6, FailureKind::kCheckpointWrite)};
  const Verdict v = AttributeFailure(ends);
  EXPECT_EQ(v.rank, 0);
  EXPECT_EQ(v.code, 5);
  EXPECT_EQ(v.kind, FailureKind::kCheckpointWrite);
  EXPECT_NE(v.cause.find("why"), std::string::npos);
}

TEST(AttributionTest, TwoSimultaneousUnreportedFailuresBlameNobody) {
  std::vector<RankEnd> ends = {Death(0, 137, 3.0000), Death(1, 137, 3.0005)};
  const Verdict v = AttributeFailure(ends);
  EXPECT_EQ(v.rank, -1);
  EXPECT_EQ(v.code, 137);  // still restartable
  EXPECT_NE(v.reasoning.find("undetermined"), std::string::npos);
  // Far enough apart, the first one is the cause.
  ends[1].mono_s = 3.1;
  EXPECT_EQ(AttributeFailure(ends).rank, 0);
}

TEST(AttributionTest, OnlySecondariesBlameNobody) {
  std::vector<RankEnd> ends = {Death(0, kPeerLost, 1.0), Death(1, kPeerLost, 1.0)};
  Verdict v = AttributeFailure(ends);
  EXPECT_EQ(v.rank, -1);
  EXPECT_EQ(v.kind, FailureKind::kCrash);
  EXPECT_NE(v.cause.find("lost their peers"), std::string::npos);
  // Every rank saw a NaN that none of them produced (the gradient norm overflowed).
  ends = {Reported(0, 8, 1.0, 1.1, FailureKind::kNonFinite, true, "NaN"),
          Reported(1, 8, 1.0, 1.1, FailureKind::kNonFinite, true, "NaN")};
  v = AttributeFailure(ends);
  EXPECT_EQ(v.rank, -1);
  EXPECT_EQ(v.kind, FailureKind::kNonFinite);
  EXPECT_EQ(v.code, 8);
}

TEST(AttributionTest, TheOriginOfANaNIsTheRankThatSaysSo) {
  std::vector<RankEnd> ends = {Reported(0, 8, 2.0, 2.1, FailureKind::kNonFinite, true),
                               Reported(1, 8, 2.01, 2.1, FailureKind::kNonFinite, false),
                               Reported(2, 8, 1.99, 2.1, FailureKind::kNonFinite, true)};
  const Verdict v = AttributeFailure(ends);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.kind, FailureKind::kNonFinite);
}

TEST(AttributionTest, AHangSuspectIsTheOnlyRankBehindOrTheOnlyOneNotFinished) {
  EXPECT_EQ(HangSuspect({12, 11, 12}, {false, false, false}), 1);  // the only one behind
  EXPECT_EQ(HangSuspect({12, 12, 12}, {false, false, false}), -1);
  // Equal steps after the last one: the ranks that finished (or exited 0) wait for nobody.
  EXPECT_EQ(HangSuspect({48, 48, 48}, {true, false, true}), 1);
  EXPECT_EQ(HangSuspect({48, 48, 48}, {true, false, false}), -1);
  // The step decides first: a finished rank is never the one behind.
  EXPECT_EQ(HangSuspect({48, 47, 48}, {true, false, false}), 1);
  EXPECT_EQ(HangSuspect({}, {}), -1);
}

TEST(AttributionTest, KindFollowsTheReportAndThePhase) {
  EXPECT_EQ(ClassifyEnd(Death(0, 137, 0, Phase::kCheckpoint)), FailureKind::kCrashInCheckpoint);
  EXPECT_EQ(ClassifyEnd(Death(0, 5, 0, Phase::kCheckpoint)), FailureKind::kCheckpointWrite);
  EXPECT_EQ(ClassifyEnd(Death(0, 5, 0, Phase::kTrain)), FailureKind::kIoError);
  EXPECT_EQ(ClassifyEnd(Death(0, 1, 0, Phase::kSetup)), FailureKind::kSetup);
  EXPECT_EQ(ClassifyEnd(Death(0, 137, 0, Phase::kTrain)), FailureKind::kCrash);
  RankEnd async = Death(0, 137, 0, Phase::kTrain);
  async.writing_checkpoint = true;
  EXPECT_EQ(ClassifyEnd(async), FailureKind::kCrashInCheckpoint);
  // A report says more than the exit code: an injected crash in the training loop.
  RankEnd r = Reported(0, 137, 0, 0, FailureKind::kCrash);
  EXPECT_EQ(ClassifyEnd(r), FailureKind::kCrash);
  r.phase = Phase::kCheckpoint;
  EXPECT_EQ(ClassifyEnd(r), FailureKind::kCrashInCheckpoint);
  // ...unless the rank knew where it was (an injected crash at a step's start while the last
  // beat still said checkpoint, or a background write was in flight).
  r.report->exact = true;
  EXPECT_EQ(ClassifyEnd(r), FailureKind::kCrash);
  r.phase = Phase::kTrain;
  r.writing_checkpoint = true;
  EXPECT_EQ(ClassifyEnd(r), FailureKind::kCrash);
  EXPECT_EQ(ClassifyEnd(Reported(0, 8, 0, 0, FailureKind::kLossSpike)), FailureKind::kLossSpike);
}

}  // namespace
}  // namespace tenax::launch
