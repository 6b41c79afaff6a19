#include "tenax/plan/simulate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tenax/core/random.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

TEST(Rng, MatchesTheReferenceAlgorithm) {
  // SplitMix64-seeded xoshiro256**, first outputs for seed 42, from an independent Python
  // transcription of Blackman & Vigna's reference code.
  Rng rng(42);
  EXPECT_EQ(rng.Next(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(rng.Next(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(rng.Next(), 0xae17533239e499a1ULL);
}

TEST(Rng, UniformAndExponential) {
  Rng rng(7);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.UniformOpen();
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);
    sum += rng.Exponential(2.0);
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);  // mean 1 / rate; standard error 0.5 / sqrt(n) = 0.0011
  EXPECT_TRUE(std::isinf(rng.Exponential(0)));
}

SimulationConfig Config() {
  SimulationConfig c;
  c.gpus = 16384;
  c.gpus_per_node = 8;
  c.rate.per_node_hour = 419.0 / (54 * 24) / 2048;  // Llama 3's: job MTBF 3.09 h
  c.checkpoint_cost = 60;
  c.restart_cost = 600;
  c.interval = DalyInterval(60, JobMtbfSeconds(c.rate, c.nodes()));
  c.duration = 20 * kDay;
  c.spares = 1000;  // never short of a node
  c.swap_time = 0;
  c.repair_time = kDay;
  c.runs = 400;
  c.seed = 3;
  return c;
}

TEST(Simulate, SameSeedSameNumbers) {
  SimulationConfig c = Config();
  c.runs = 20;
  auto a = Simulate(c), b = Simulate(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->wall.mean, b->wall.mean);
  EXPECT_EQ(a->failures.mean, b->failures.mean);
  c.seed = 4;
  EXPECT_NE(Simulate(c)->wall.mean, a->wall.mean);
}

TEST(Simulate, EveryRunAccountsForItsTime) {
  const SimulationConfig c = Config();
  for (uint64_t i = 0; i < 20; ++i) {
    const RunOutcome o = SimulateRun(c, i);
    EXPECT_NEAR(o.wall, c.duration + o.lost + o.checkpointing + o.restarting + o.waiting, 1e-6);
    EXPECT_GT(o.failures, 0);
    EXPECT_EQ(o.waiting, 0);  // spares never run out
  }
}

TEST(Simulate, WithoutFailuresOnlyCheckpointsCost) {
  SimulationConfig c = Config();
  c.rate.per_node_hour = 0;
  c.interval = 3600;
  c.duration = 10 * 3600 + 1800;
  c.runs = 3;
  auto r = Simulate(c);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->wall.mean, c.duration + 10 * 60);  // 11 segments, 10 checkpoints
  EXPECT_EQ(r->failures.mean, 0);
}

TEST(Simulate, AgreesWithDalysClosedForm) {
  // Daly's model is the simulator's with unlimited spares and no swap time: the Monte-Carlo mean
  // must sit on the closed form (within 1%: 400 runs of ~150 failures each).
  const SimulationConfig c = Config();
  auto r = Simulate(c);
  ASSERT_TRUE(r.ok());
  const double mtbf = JobMtbfSeconds(c.rate, c.nodes());
  const double daly =
      DalyExpectedWallTime(c.duration, c.interval, c.checkpoint_cost, c.restart_cost, mtbf);
  EXPECT_NEAR(r->wall.mean / daly, 1.0, 0.01) << r->wall.mean / kDay << " vs " << daly / kDay;
  EXPECT_NEAR(r->observed_mtbf / mtbf, 1.0, 0.02);
  EXPECT_LT(r->wall.ci_low, r->wall.mean);
  EXPECT_GT(r->wall.ci_high, r->wall.mean);
}

TEST(Simulate, DalysIntervalBeatsFarOffIntervals) {
  SimulationConfig c = Config();
  c.runs = 200;
  const double best = Simulate(c)->wall.mean;
  c.interval = 8 * Config().interval;
  EXPECT_GT(Simulate(c)->wall.mean, best);
  c.interval = Config().interval / 8;
  EXPECT_GT(Simulate(c)->wall.mean, best);
}

TEST(Simulate, WithoutSparesTheJobWaitsForRepairs) {
  SimulationConfig c = Config();
  c.runs = 50;
  c.spares = 0;
  c.repair_time = 2 * kHour;
  auto r = Simulate(c);
  ASSERT_TRUE(r.ok());
  // Every failure waits the whole repair (nothing else comes back sooner).
  EXPECT_NEAR(r->waiting.mean, r->failures.mean * 2 * kHour, 1e-6 * r->waiting.mean);
  c.spares = 2;  // a couple of spares absorb most of it
  EXPECT_LT(Simulate(c)->waiting.mean, r->waiting.mean / 4);
}

TEST(Simulate, RefusesJobsThatCannotFinish) {
  SimulationConfig c = Config();
  c.interval = 200 * kHour;  // ~65 MTBFs between checkpoints
  auto r = Simulate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shorten --interval"), std::string::npos);
  c = Config();
  c.runs = 0;
  EXPECT_FALSE(Simulate(c).ok());
  // A swap far longer than the MTBF would never complete either (it once looped forever with
  // --spares 0 --repair-time 0 and the default 2-minute swap on a 5-second MTBF).
  c = Config();
  c.spares = 0;
  c.repair_time = 0;
  c.swap_time = 200 * kHour;
  r = Simulate(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("swap"), std::string::npos) << r.status().message();
}

// The replays' run, whose time split follows by hand: one node, work 10 s between checkpoints
// of 1 s, detection 2 s, restart 3 s, 100 s of work, no swap or repair.
SimulationConfig ByHand() {
  SimulationConfig c;
  c.gpus = c.gpus_per_node = 1;
  c.checkpoint_cost = 1;
  c.detect_time = 2;
  c.restart_cost = 3;
  c.interval = 10;
  c.duration = 100;
  c.repair_time = c.swap_time = 0;
  return c;
}

// A replay puts the failures at given times at risk.
TEST(Simulate, ReplayStrikesAtTheGivenTimesAtRisk) {
  SimulationConfig c = ByHand();
  // At risk 25 s: 3 s into the third interval (22 s at risk before it); 200 s never comes.
  c.arrivals = {25, 200};
  RunOutcome o = SimulateRun(c, 0);
  EXPECT_EQ(o.failures, 1);
  EXPECT_DOUBLE_EQ(o.lost, 3);
  EXPECT_DOUBLE_EQ(o.restarting, 5);
  EXPECT_DOUBLE_EQ(o.checkpointing, 9);  // 2 before the failure, 7 after (none after the last)
  EXPECT_DOUBLE_EQ(o.wall, 117);
  // A second failure 1.5 s into the restart (at risk again from the first's detection on) starts
  // the recovery over: 2 + 1.5 + 2 + 3 s.
  c.arrivals = {25, 26.5};
  o = SimulateRun(c, 0);
  EXPECT_EQ(o.failures, 2);
  EXPECT_DOUBLE_EQ(o.lost, 3);
  EXPECT_DOUBLE_EQ(o.restarting, 8.5);
  EXPECT_DOUBLE_EQ(o.wall, 120.5);
  // The same run index with and without arrivals: the replay ignores the rate.
  c.rate.per_node_hour = 1e6;
  EXPECT_DOUBLE_EQ(SimulateRun(c, 0).wall, 120.5);
}

// The replay's kinds: the launcher strikes a hang only after a step and a NaN at the next step,
// so one due in a restart strikes as the restart ends, and a NaN due in a save once it is done.
TEST(Simulate, ReplayedHangsAndNaNsWaitForTheTrainingThatCanShowThem) {
  SimulationConfig c = ByHand();
  // A second arrival 1.5 s into the first's restart: a crash starts it over (as in the test
  // above), a hang or a NaN strikes once it is done, losing no work: 2 + 3 + 2 + 3 s.
  c.arrivals = {25, 26.5};
  for (ArrivalKind second : {ArrivalKind::kCrash, ArrivalKind::kHang, ArrivalKind::kNan}) {
    c.arrival_kinds = {ArrivalKind::kCrash, second};
    const RunOutcome o = SimulateRun(c, 0);
    EXPECT_EQ(o.failures, 2);
    EXPECT_DOUBLE_EQ(o.lost, 3);
    EXPECT_DOUBLE_EQ(o.restarting, second == ArrivalKind::kCrash ? 8.5 : 10);
  }
  // Half-way through the first save (10.5 s at risk): a crash or a hang loses the interval, the
  // save not counted (0.5 s of it spent); a NaN strikes at the next step, after the save.
  c.arrivals = {10.5};
  for (ArrivalKind kind : {ArrivalKind::kCrash, ArrivalKind::kHang, ArrivalKind::kNan}) {
    c.arrival_kinds = {kind};
    const RunOutcome o = SimulateRun(c, 0);
    EXPECT_EQ(o.failures, 1);
    EXPECT_DOUBLE_EQ(o.lost, kind == ArrivalKind::kNan ? 0 : 10);
    EXPECT_DOUBLE_EQ(o.restarting, 5);
    EXPECT_DOUBLE_EQ(o.wall, c.duration + o.lost + o.checkpointing + o.restarting);
  }
  // Live, with both groups out (a restart): a hang due in it waits for its end as well.
  c.gpus = 2;
  c.replica_groups = 2;
  c.heal_time = 4;
  c.short_handed_share = 0.5;
  c.arrivals = {25, 28, 29};  // the second 1 s into the healing, the third 1 s into the restart
  c.arrival_kinds = {ArrivalKind::kCrash, ArrivalKind::kCrash, ArrivalKind::kCrash};
  const RunOutcome crash = SimulateRun(c, 0);
  c.arrival_kinds.back() = ArrivalKind::kHang;
  const RunOutcome hang = SimulateRun(c, 0);
  EXPECT_EQ(crash.failures, 3);
  EXPECT_EQ(hang.failures, 3);
  // The crash cuts the restart after 1 s (then 2 + 3 s); the hang waits 2 s more, then strikes
  // a group at once (2 s of detection, 4 s of healing at half speed) and loses nothing.
  EXPECT_DOUBLE_EQ(crash.restarting, 2 + 2 + 1 + 2 + 3);
  EXPECT_DOUBLE_EQ(hang.restarting, 2 + 2 + 3 + 2);
  EXPECT_DOUBLE_EQ(hang.lost, crash.lost);
  EXPECT_DOUBLE_EQ(hang.short_handed, crash.short_handed + 2);
}

// Live recovery replayed, the split by hand: 2 groups, work 10 s between checkpoints of 1 s,
// detection 2 s, healing 4 s at half speed (one group out), a restart 3 s, 100 s of work.
TEST(Simulate, LiveReplayTrainsThroughAFailureAndRestartsWhenBothAreOut) {
  SimulationConfig c = ByHand();
  c.gpus = 2;
  c.replica_groups = 2;
  c.heal_time = 4;
  c.short_handed_share = 0.5;
  // At risk 25 s: 3 s into the third interval; the other group goes on at half speed for 4 s
  // after the 2 s detection (2 s of work short), and nothing is lost.
  c.arrivals = {25, 200};
  RunOutcome o = SimulateRun(c, 0);
  EXPECT_EQ(o.failures, 1);
  EXPECT_DOUBLE_EQ(o.lost, 0);
  EXPECT_DOUBLE_EQ(o.restarting, 2);
  EXPECT_DOUBLE_EQ(o.short_handed, 2);
  EXPECT_DOUBLE_EQ(o.checkpointing, 9);
  EXPECT_DOUBLE_EQ(o.wall, 113);
  // The second group fails 1 s into the healing (3 s at risk after the first, whose detection is
  // not at risk): both are out, the job restarts and loses the 4.5 s since the checkpoint.
  c.arrivals = {25, 28};
  o = SimulateRun(c, 0);
  EXPECT_EQ(o.failures, 2);
  EXPECT_DOUBLE_EQ(o.lost, 4.5);
  EXPECT_DOUBLE_EQ(o.short_handed, 1.5);
  EXPECT_DOUBLE_EQ(o.restarting, 7);
  EXPECT_DOUBLE_EQ(o.wall, 122);
  // A failure half-way through a checkpoint's stall: the save counts, the rest of its stall is
  // left out, and the other group trains on as above.
  c.arrivals = {10.5};
  o = SimulateRun(c, 0);
  EXPECT_EQ(o.failures, 1);
  EXPECT_DOUBLE_EQ(o.lost, 0);
  EXPECT_DOUBLE_EQ(o.checkpointing, 8.5);
  EXPECT_DOUBLE_EQ(o.restarting, 2);
  EXPECT_DOUBLE_EQ(o.short_handed, 2);
  EXPECT_DOUBLE_EQ(o.wall, 112.5);
  for (const RunOutcome& x : {o, SimulateRun(c, 1)}) {
    EXPECT_DOUBLE_EQ(
        x.wall, c.duration + x.lost + x.checkpointing + x.restarting + x.waiting + x.short_handed);
  }
  // The default share is the groups': one of 2 out halves the speed, as given above.
  c.short_handed_share = 0;
  c.arrivals = {25, 200};
  EXPECT_DOUBLE_EQ(SimulateRun(c, 0).wall, 113);
}

// Live recovery, where failures rarely overlap: each costs the detection plus, for as long as
// its group is out (swap + heal), 1/R of the job's throughput. So the expected wall time is
// T (1 + lambda (D + (S + H) / R)) plus the checkpoint stalls, and no work is lost.
TEST(Simulate, LiveRecoveryCostsDetectionAndAShareOfTheHealing) {
  SimulationConfig c = Config();  // Llama 3's failure rate on 2,048 nodes, 1000 spares
  c.replica_groups = 128;
  c.detect_time = 60;
  c.swap_time = 120;
  c.heal_time = 120;
  c.interval = 3 * kHour;
  c.checkpoint_cost = 10;
  c.runs = 200;
  auto r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const double lambda = 1 / r->mtbf;
  const double stalls = (std::ceil(c.duration / c.interval) - 1) * c.checkpoint_cost;
  const double expected = c.duration * (1 + lambda * (60 + 240.0 / 128)) + stalls;
  EXPECT_NEAR(r->wall.mean, expected, 0.005 * expected);
  EXPECT_EQ(r->lost.mean, 0);
  for (uint64_t i = 0; i < 20; ++i) {  // every second accounted for
    const RunOutcome o = SimulateRun(c, i);
    EXPECT_NEAR(o.wall,
                c.duration + o.lost + o.checkpointing + o.restarting + o.waiting + o.short_handed,
                1e-6 * o.wall);
  }
  EXPECT_NEAR(r->short_handed.mean, c.duration * lambda * 240.0 / 128,
              0.05 * c.duration * lambda * 240.0 / 128);
  // Restart recovery of the same job loses far more: the restart and the work since the
  // checkpoint.
  SimulationConfig restart = c;
  restart.replica_groups = 0;
  restart.restart_cost = 600;
  auto rr = Simulate(restart);
  ASSERT_TRUE(rr.ok());
  EXPECT_LT(rr->efficiency.mean + 0.05, r->efficiency.mean);
}

// With one replica group a failure takes everything out: the job restarts from its checkpoint,
// as restart recovery does (which also draws failures during restarts: a little slower).
TEST(Simulate, LiveRecoveryWithOneGroupIsRestartRecovery) {
  SimulationConfig c = Config();
  c.runs = 400;
  c.detect_time = 30;
  auto restart = Simulate(c);
  c.replica_groups = 1;
  auto live = Simulate(c);
  ASSERT_TRUE(restart.ok() && live.ok());
  EXPECT_NEAR(live->wall.mean, restart->wall.mean, 0.01 * restart->wall.mean);
  EXPECT_GT(live->lost.mean, 0);
  EXPECT_EQ(live->short_handed.mean, 0);
  // More groups than nodes cannot be.
  c.replica_groups = c.nodes() + 1;
  EXPECT_FALSE(Simulate(c).ok());
}

}  // namespace
}  // namespace tenax::plan
