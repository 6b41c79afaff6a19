// Goodput arithmetic on synthetic launches: the time split adds up to the wall time, a crash's
// lost work and restart time are where they belong, and a run launched again after its launcher
// was killed keeps the earlier segment, records the lost launcher and counts the gap as down.
#include "tenax/launch/goodput.h"

#include <gtest/gtest.h>

namespace tenax::launch {
namespace {

using protocol::Beat;
using protocol::Phase;

constexpr double kStart = 1.7e9;  // the first launch's wall clock

Beat LeadBeat(int generation, Phase phase, int64_t step, double wall_s, double steps_s,
              int64_t resume_step = 0) {
  Beat b;
  b.generation = generation;
  b.phase = phase;
  b.step = step;
  b.wall_s = wall_s;
  b.steps_s = steps_s;
  b.resume_step = resume_step;
  b.run_dir = "/runs/x";
  return b;
}

double Sum(const nlohmann::json& r) {
  double s = 0;
  for (const auto& [k, v] : r["time_s"].items()) s += v.get<double>();
  return s;
}

// One launch: generation 0 is ready at 2 s, trains 10 steps (1 s each) until 12 s, crashes at
// 12.5 s (detected then); generation 1 resumes from step 6 at 15 s and trains steps 7..20 until
// 29 s, then ends at 30 s.
TEST(GoodputTest, ACrashSplitsTheWallTime) {
  Goodput g(kStart, nullptr, "host", 1);
  g.GenerationStarted(0, 0);
  g.LeadBeat(LeadBeat(0, Phase::kReady, 0, kStart + 2, 0), 2, kStart + 2);
  g.LeadBeat(LeadBeat(0, Phase::kTrain, 10, kStart + 12, 10), 12, kStart + 12);
  g.GenerationEnded(12.6, 137);
  FailureRecord f;
  f.time_s = 12.5;
  f.rank = 1;
  f.kind = "crash";
  f.exit_code = 137;
  f.detection_s = 0.05;
  g.AddFailure(f);
  g.GenerationStarted(1, 12.6);
  g.LeadBeat(LeadBeat(1, Phase::kReady, 6, kStart + 15, 0, 6), 15, kStart + 15);
  g.LeadBeat(LeadBeat(1, Phase::kTrain, 20, kStart + 29, 14, 6), 29, kStart + 29);
  g.GenerationEnded(30, 0);
  const nlohmann::json r = g.Report(30, 0, true);
  const auto& t = r["time_s"];
  EXPECT_DOUBLE_EQ(r["wall_s"].get<double>(), 30);
  EXPECT_NEAR(Sum(r), 30, 1e-9);
  EXPECT_EQ(r["steps_redone"], 4);                           // steps 7..10 ran twice
  EXPECT_NEAR(t["productive"].get<double>(), 6 + 14, 1e-9);  // 6 kept + 14 new
  EXPECT_NEAR(t["lost"].get<double>(), 4 + 0.45, 1e-9);      // redone + 12..12.45 in flight
  EXPECT_NEAR(t["detection"].get<double>(), 0.05, 1e-9);
  EXPECT_NEAR(t["restart"].get<double>(), 15 - 12.5, 1e-9);  // detection to ready
  EXPECT_NEAR(t["down"].get<double>(), 0, 1e-9);
  EXPECT_EQ(r["restarts"], 1);
  EXPECT_EQ(r["failures"][0]["resumed_from"], 6);
  EXPECT_NEAR(r["failures"][0]["recovery_s"].get<double>(), 2.5, 1e-9);
  EXPECT_NEAR(r["effective_training_ratio"].get<double>(), 20.0 / 30, 1e-9);
}

// The first launcher is killed at about 12 s (its last goodput write); the run is launched
// again at 40 s and resumes from step 6.
TEST(GoodputTest, AKilledLauncherIsRecordedAndTheGapIsDownTime) {
  Goodput first(kStart, nullptr, "host", 100);
  first.GenerationStarted(0, 0);
  first.LeadBeat(LeadBeat(0, Phase::kReady, 0, kStart + 2, 0), 2, kStart + 2);
  first.LeadBeat(LeadBeat(0, Phase::kTrain, 10, kStart + 12, 10), 12, kStart + 12);
  const nlohmann::json left = first.Report(12, 0, /*ended=*/false);  // its last write
  EXPECT_FALSE(left["segments"][0]["ended"].get<bool>());

  Goodput second(kStart + 40, &left, "host", 200);
  EXPECT_EQ(second.segment(), 1);
  second.GenerationStarted(0, 0);
  second.LeadBeat(LeadBeat(0, Phase::kReady, 6, kStart + 43, 0, 6), 3, kStart + 43);
  second.LeadBeat(LeadBeat(0, Phase::kTrain, 20, kStart + 57, 14, 6), 17, kStart + 57);
  second.GenerationEnded(18, 0);
  const nlohmann::json r = second.Report(18, 0, true);
  EXPECT_DOUBLE_EQ(r["wall_s"].get<double>(), 58);  // from the first launch's start
  EXPECT_NEAR(Sum(r), 58, 1e-9);
  EXPECT_EQ(r["launches"], 2);
  EXPECT_EQ(r["restarts"], 0);  // a relaunch is not a restart
  ASSERT_EQ(r["failures"].size(), 1u);
  const auto& f = r["failures"][0];
  EXPECT_EQ(f["kind"], "launcher-lost");
  EXPECT_EQ(f["segment"], 0);
  EXPECT_DOUBLE_EQ(f["time_s"].get<double>(), 12);
  EXPECT_EQ(f["resumed_from"], 6);
  EXPECT_NEAR(f["recovery_s"].get<double>(), 43 - 12, 1e-9);
  const auto& t = r["time_s"];
  EXPECT_NEAR(t["down"].get<double>(), 40 - 12, 1e-9);
  EXPECT_NEAR(t["restart"].get<double>(), 3, 1e-9);  // the new launch's start-up
  EXPECT_EQ(r["steps_redone"], 4);
  EXPECT_NEAR(t["productive"].get<double>(), 6 + 14, 1e-9);
  EXPECT_NEAR(t["lost"].get<double>(), 4, 1e-9);
  EXPECT_TRUE(r["segments"][0]["ended"].get<bool>());
  EXPECT_EQ(r["segments"][0]["exit_code"], -1);

  // A third launch that finds the second one closed records no new loss.
  Goodput third(kStart + 100, &r, "host", 300);
  EXPECT_EQ(third.Report(1, 0, true)["failures"].size(), 1u);
  EXPECT_NEAR(third.Report(1, 0, true)["time_s"]["down"].get<double>(), 28 + (100 - 58), 1e-9);
}

// A rank stuck in its teardown after the last step is killed by the launcher (exit-timeout):
// the run ends with code 0, nothing is lost or redone, and the fault is kept across launches.
TEST(GoodputTest, ATeardownHangAfterFinishingLosesNothing) {
  Goodput g(kStart, nullptr, "host", 1);
  g.GenerationStarted(0, 0);
  g.LeadBeat(LeadBeat(0, Phase::kReady, 0, kStart + 2, 0), 2, kStart + 2);
  g.LeadBeat(LeadBeat(0, Phase::kTrain, 10, kStart + 12, 10), 12, kStart + 12);
  g.LeadBeat(LeadBeat(0, Phase::kFinish, 10, kStart + 12.5, 10), 12.5, kStart + 12.5);
  g.AddExitFault({{"time_s", 72.5},
                  {"generation", 0},
                  {"rank", 1},
                  {"slot", 1},
                  {"host", "h1"},
                  {"step", 10},
                  {"kind", "hang"},
                  {"detail", "did not exit"}});
  g.GenerationEnded(72.6, 0);
  const nlohmann::json r = g.Report(73, 0, true);
  EXPECT_EQ(r["restarts"], 0);
  EXPECT_TRUE(r["failures"].empty());
  EXPECT_EQ(r["steps_redone"], 0);
  EXPECT_NEAR(r["time_s"]["lost"].get<double>(), 0, 1e-9);
  EXPECT_NEAR(r["time_s"]["productive"].get<double>(), 10, 1e-9);
  EXPECT_NEAR(Sum(r), 73, 1e-9);
  ASSERT_EQ(r["exit_faults"].size(), 1u);
  EXPECT_EQ(r["exit_faults"][0]["rank"], 1);
  EXPECT_EQ(r["exit_faults"][0]["segment"], 0);
  EXPECT_NE(Goodput::Summary(r).find("after finishing: rank 1 on h1 (step 10): hang"),
            std::string::npos)
      << Goodput::Summary(r);
  Goodput again(kStart + 100, &r, "host", 2);  // the next launch of the run keeps it
  EXPECT_EQ(again.Report(1, 0, true)["exit_faults"].size(), 1u);
}

// Live recovery: the record is on run seconds (healed_at_s too, once it is known; -1 before),
// grows in place as the replacement heals, ends no generation, and stays with the run.
TEST(GoodputTest, ALiveRecoveryIsRecordedWithoutAGeneration) {
  Goodput g(kStart, nullptr, "host", 1);
  g.GenerationStarted(0, 0);
  g.LeadBeat(LeadBeat(0, Phase::kReady, 0, kStart + 2, 0), 2, kStart + 2);
  nlohmann::json e = {{"time_s", 5.0},        {"rank", 2},        {"kind", "crash"}, {"step", 3},
                      {"members", {0, 1, 3}}, {"healed_at_s", -1}};
  const int index = g.AddLiveRecovery(e);
  EXPECT_EQ(g.Report(6, 0, false)["live_recoveries"][0]["healed_at_s"], -1);
  e["ready_at_s"] = 6.25;
  e["healed_at_s"] = 7.5;
  e["healed_from"] = 0;
  e["healed_bytes"] = 1000;
  EXPECT_EQ(g.AddLiveRecovery(e, index), index);
  g.LeadBeat(LeadBeat(0, Phase::kTrain, 10, kStart + 12, 10), 12, kStart + 12);
  g.GenerationEnded(12.5, 0);
  const nlohmann::json r = g.Report(13, 0, true);
  EXPECT_EQ(r["restarts"], 0);
  EXPECT_TRUE(r["failures"].empty());
  EXPECT_EQ(r["generations"].size(), 1u);
  ASSERT_EQ(r["live_recoveries"].size(), 1u);
  EXPECT_EQ(r["live_recoveries"][0]["time_s"], 5.0);
  EXPECT_EQ(r["live_recoveries"][0]["healed_at_s"], 7.5);
  EXPECT_NE(Goodput::Summary(r).find("live recovery: rank 2 crash at step 3; the other 3 rank(s) "
                                     "trained on, healed 2.50s later (its replacement ready after "
                                     "1.25s) from rank 0 (1000 bytes)"),
            std::string::npos)
      << Goodput::Summary(r);
  Goodput again(kStart + 100, &r, "host", 2);  // the next launch: on its clock, kept as it was
  EXPECT_EQ(again.Report(1, 0, true)["live_recoveries"], r["live_recoveries"]);
  nlohmann::json later = {{"time_s", 1.0}, {"rank", 0}, {"ready_at_s", 1.5}, {"healed_at_s", 2.0}};
  again.AddLiveRecovery(later);
  const nlohmann::json r2 = again.Report(3, 0, true);
  ASSERT_EQ(r2["live_recoveries"].size(), 2u);
  EXPECT_NEAR(r2["live_recoveries"][1]["time_s"].get<double>(), 101, 1e-6);
  EXPECT_NEAR(r2["live_recoveries"][1]["ready_at_s"].get<double>(), 101.5, 1e-6);
  EXPECT_NEAR(r2["live_recoveries"][1]["healed_at_s"].get<double>(), 102, 1e-6);
  EXPECT_EQ(r2["live_recoveries"][1]["segment"], 1);
}

// The record closes from the healed beat's healed_step, not its step: a replacement's beat that
// says its epoch may still carry the step of its start-up (0), which made steps_short_handed -5.
TEST(GoodputTest, AHealedRecordCountsItsStepsFromTheStateReceived) {
  nlohmann::json e = {{"time_s", 5.0}, {"rank", 2}, {"step", 5}, {"healed_at_s", -1}};
  protocol::Beat b;
  b.step = 0;
  b.live_epoch = 2;
  b.healed_from = 3;
  b.healed_bytes = 1000;
  b.healed_s = 0.125;
  b.healed_step = 6;
  CloseHealedLiveRecovery(b, 2, 8.5, &e);
  EXPECT_EQ(e["healed_at_s"], 8.5);
  EXPECT_EQ(e["healed_from"], 3);
  EXPECT_EQ(e["healed_bytes"], 1000);
  EXPECT_EQ(e["transfer_s"], 0.125);
  EXPECT_EQ(e["joined_epoch"], 2);
  EXPECT_EQ(e["joined_at_step"], 6);
  EXPECT_EQ(e["steps_short_handed"], 1);
}

TEST(GoodputTest, StaleBeatsOfAnotherGenerationAreIgnored) {
  Goodput g(kStart, nullptr, "host", 1);
  g.GenerationStarted(1, 0);
  g.LeadBeat(LeadBeat(0, Phase::kTrain, 50, kStart + 1, 9), 1, kStart + 1);
  EXPECT_EQ(g.step(), 0);
  EXPECT_NEAR(Sum(g.Report(5, 0, false)), 5, 1e-9);
}

}  // namespace
}  // namespace tenax::launch
