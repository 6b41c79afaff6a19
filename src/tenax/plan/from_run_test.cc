// `tenax plan --from-run`: the costs read from a run folder, on a goodput.json written by hand
// whose time split the model reproduces exactly, and the runs it refuses.
#include "tenax/plan/from_run.h"

#include <gtest/gtest.h>

#include "tenax/core/temp_dir.h"

namespace tenax::plan {
namespace {

using testing::TempDir;

// 100 steps of 0.1 s (0.095 s of it the step's own time), a checkpoint every 10 steps stalling
// 0.05 s. Generation 0 is ready at 1.0 s and saves steps 10, 20, 30; a SIGKILL at 4.7 s (3.7 s of
// exposure) is seen at 5.0 s; generation 1 resumes from step 30, ready at 5.5 s, and saves steps
// 40..100, its last step done at 12.8 s (the final save after it), the launch ends at 13.0 s.
nlohmann::json Goodput() {
  return {{"format", "tenax-goodput"},
          {"launches", 1},
          {"exit_code", 0},
          {"wall_s", 13.0},
          {"effective_training_ratio", 9.5 / 13.0},
          {"time_s", {{"productive", 9.5}}},
          {"generations",
           {{{"generation", 0},
             {"start_s", 0.0},
             {"ready_s", 1.0},
             {"resume_step", 0},
             {"last_step", 35},
             {"last_step_at", 4.65},
             {"checkpoint_s", 0.15}},
            {{"generation", 1},
             {"start_s", 5.0},
             {"ready_s", 5.5},
             {"resume_step", 30},
             {"last_step", 100},
             {"last_step_at", 12.8},
             {"checkpoint_s", 0.35}}}},
          {"failures",
           {{{"kind", "crash"}, {"time_s", 5.0}, {"detection_s", 0.3}, {"recovery_s", 0.5}}}},
          {"fault_schedule",
           {{"spec", "poisson:crash=360/h:seed=1"},
            {"rates_per_hour", {{"crash", 360.0}, {"hang", 0.0}, {"nan", 0.0}}},
            {"ranks", 2},
            {"exposure_s", 11.3},
            {"injected", {{{"exposure_s", 3.69}, {"applied_exposure_s", 3.7}}}}}}};
}

std::string Config(const std::string& extra = "") {
  return "[training]\nsteps = 100\n[checkpoint]\ninterval = 10\n" + extra;
}

TEST(FromRun, ReadsTheRunsCostsAndTheReplayReproducesIt) {
  TempDir dir;
  dir.Write("goodput.json", Goodput().dump());
  dir.Write("config.toml", Config());
  Result<RunCosts> c = ReadRunCosts(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->steps, 100);
  EXPECT_EQ(c->checkpoint_every, 10);
  EXPECT_EQ(c->checkpoints, 10);  // 10, 20, 30, then 40..100
  EXPECT_NEAR(c->checkpoint_s, 0.05, 1e-12);
  // (3.65 + 7.3 - (0.5 - 0.05)) / (35 + 70): the final save's stall is after the last step.
  EXPECT_NEAR(c->step_s, 0.1, 1e-12);
  EXPECT_NEAR(c->fixed_s, 1.0 + 0.2, 1e-12);
  EXPECT_EQ(c->failures, 1);
  EXPECT_DOUBLE_EQ(c->detect_s, 0.3);
  EXPECT_DOUBLE_EQ(c->restart_s, 0.5);
  EXPECT_EQ(c->ranks, 2);
  EXPECT_DOUBLE_EQ(c->schedule_rate_per_hour, 360);
  ASSERT_EQ(c->arrivals.size(), 1u);
  EXPECT_DOUBLE_EQ(c->arrivals[0], 3.7);

  Result<RunPrediction> p = PredictRun(*c, std::nullopt, 500, 1);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->rate_source, "the run's poisson schedule");
  EXPECT_DOUBLE_EQ(p->config.interval, 1.0);
  EXPECT_DOUBLE_EQ(p->config.duration, 10.0);
  // Without the jitter the replay is the run itself: 1.2 + 10 + 0.55 lost + 0.45 of stalls +
  // 0.8 = 13.0 s. The jitter moves the failure by up to half an interval either way; the mean
  // work lost stays near 0.55 s.
  ASSERT_TRUE(p->replay_effective);
  EXPECT_NEAR(*p->replay_effective, 9.5 / 13.0, 0.01);
  EXPECT_EQ(p->replay.failures, 1);
  EXPECT_NEAR(p->replay.restarting, 0.8, 1e-9);
  // At the rate (one failure per 10 s of exposure): below the run without failures.
  EXPECT_LT(p->effective.mean, 9.5 / (1.2 + 10 + 0.45));
  EXPECT_GT(p->effective.mean, 0.3);
  EXPECT_GT(p->daly_interval_steps, 0);

  // Another rate: no replay (the run's failures were drawn at its own).
  Result<FailureRate> rate = ParseFailureRate("36/node-hour", 2);
  ASSERT_TRUE(rate.ok());
  p = PredictRun(*c, *rate, 500, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->replay_effective);
  EXPECT_GT(p->effective.mean, 9.5 / 13.0);

  const nlohmann::json j = FromRunJson(*c, *p);
  EXPECT_EQ(j["measured"]["failures"], 1);
  EXPECT_TRUE(j["replay"].is_null());
  EXPECT_NE(FromRunText(*c, *p).find("tenax simulate --gpus 1"), std::string::npos);
}

// A failure during a restart starts it over: the first restart's recovery_s runs to the ready
// of the second, so only the second is a whole restart. Goodput() with a rank failing in
// generation 1's setup at 5.5 s (seen at 5.6 s); generation 2 is ready at 6.5 s.
TEST(FromRun, ARestartCutShortByAFailureIsNotARestartsCost) {
  nlohmann::json g = Goodput();
  g["failures"][0]["recovery_s"] = 1.5;  // from 5.0 s to generation 2's ready
  g["failures"].push_back(
      {{"kind", "setup"}, {"time_s", 5.6}, {"detection_s", 0.1}, {"recovery_s", 0.9}});
  g["generations"][1] = {{"generation", 1},   {"start_s", 5.0},  {"ready_s", -1.0},
                         {"resume_step", 30}, {"last_step", -1}, {"checkpoint_s", 0.0}};
  g["generations"].push_back({{"generation", 2},
                              {"start_s", 5.6},
                              {"ready_s", 6.5},
                              {"resume_step", 30},
                              {"last_step", 100},
                              {"last_step_at", 13.8},
                              {"checkpoint_s", 0.35}});
  g["wall_s"] = 14.0;
  TempDir dir;
  dir.Write("goodput.json", g.dump());
  dir.Write("config.toml", Config());
  Result<RunCosts> c = ReadRunCosts(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->failures, 2);
  EXPECT_DOUBLE_EQ(c->detect_s, 0.2);
  // Not (1.5 + 0.9) / 2: 1.5 s holds the second restart; the first ran 0.5 s, less than 0.9.
  EXPECT_DOUBLE_EQ(c->restart_s, 0.9);
  EXPECT_EQ(c->restarts_cut_short, 1);
  EXPECT_NEAR(c->step_s, 0.1, 1e-12);
  Result<RunPrediction> p = PredictRun(*c, std::nullopt, 100, 1);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_NE(FromRunText(*c, *p).find(
                "restart 0.900 s on average (a whole one; 1 cut short by a failure during it)"),
            std::string::npos)
      << FromRunText(*c, *p);
  EXPECT_EQ(FromRunJson(*c, *p)["measured"]["restarts_cut_short"], 1);

  // A failure after the next generation was ready cuts nothing short.
  g["failures"][1]["time_s"] = 6.7;
  dir.Write("goodput.json", g.dump());
  c = ReadRunCosts(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->restarts_cut_short, 0);
  EXPECT_DOUBLE_EQ(c->restart_s, (1.5 + 0.9) / 2);
}

// Restarts cut short are censored: they say only that a whole one would have taken longer.
TEST(FromRun, RestartCostCountsARestartCutShortAsLongerThanItRan) {
  EXPECT_DOUBLE_EQ(RestartCost({}), 0);
  EXPECT_DOUBLE_EQ(RestartCost({{1.0, true}, {3.0, true}}), 2.0);  // none cut: the mean
  // 1 s and 3 s whole, one cut at 2 s: a third of the restarts end at 1 s, the other two thirds
  // (the cut one counted as one of the 3 s ones) at 3 s: 1 + 2 x 2/3. The whole ones alone say 2.
  EXPECT_NEAR(RestartCost({{3.0, true}, {2.0, false}, {1.0, true}}), 1.0 + 2.0 * 2.0 / 3.0, 1e-12);
  // Cut before every whole one ended: no information, the mean of the whole ones.
  EXPECT_DOUBLE_EQ(RestartCost({{0.2, false}, {1.0, true}, {3.0, true}}), 2.0);
  // A tie: the whole one ended first.
  EXPECT_DOUBLE_EQ(RestartCost({{1.0, false}, {1.0, true}}), 1.0);
}

// A live run by hand: 100 steps of 0.1 s with 2 replicas, a checkpoint every 10 steps stalling
// 0.05 s. Ready at 1.0 s; a replica fails at 3.0 s after step 20 (2.0 s of exposure), the
// verdict comes 0.3 s later, its replacement heals 1.025 s after that and joins at step 25: 1.325
// s short-handed, 0.025 s of it a checkpoint's stall, for 5 steps (half a full quorum's speed).
// The last step at 12.25 s (9.5 s of full-quorum steps, the stretch, 0.425 s of other stalls),
// the final save, the launch ends at 12.5 s.
nlohmann::json LiveGoodput() {
  return {{"format", "tenax-goodput"},
          {"launches", 1},
          {"exit_code", 0},
          {"wall_s", 12.5},
          {"effective_training_ratio", 10.0 / 12.5},
          {"time_s", {{"productive", 10.0}}},
          {"generations",
           {{{"generation", 0},
             {"start_s", 0.0},
             {"ready_s", 1.0},
             {"resume_step", 0},
             {"last_step", 100},
             {"last_step_at", 12.25},
             {"checkpoint_s", 0.5}}}},
          {"failures", nlohmann::json::array()},
          {"live_recoveries",
           {{{"kind", "crash"},
             {"generation", 0},
             {"time_s", 3.3},
             {"detection_s", 0.3},
             {"step", 20},
             {"healed_at_s", 4.325},
             {"steps_short_handed", 5},
             {"scheduled", 0}}}},
          {"fault_schedule",
           {{"spec", "poisson:crash=360/h:seed=1"},
            {"rates_per_hour", {{"crash", 360.0}, {"hang", 0.0}, {"nan", 0.0}}},
            {"ranks", 2},
            {"exposure_s", 11.0},
            {"injected", {{{"exposure_s", 1.99}, {"applied_exposure_s", 2.0}}}}}}};
}

TEST(FromRun, LiveRunsFeedTheLiveModelTheirHealingAndShortHandedSpeed) {
  TempDir dir;
  dir.Write("goodput.json", LiveGoodput().dump());
  const std::string live =
      "[resilience]\nmode = \"live\"\n[parallelism]\ndata_parallel_replicate = 2\n"
      "data_parallel_shard = 1\n";
  dir.Write("config.toml", Config() + live);
  Result<RunCosts> c = ReadRunCosts(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->live);
  EXPECT_EQ(c->replica_groups, 2);
  EXPECT_EQ(c->failures, 0);  // none restarted from
  EXPECT_EQ(c->live_failures, 1);
  EXPECT_EQ(c->heals, 1);
  EXPECT_DOUBLE_EQ(c->detect_s, 0.3);
  EXPECT_NEAR(c->heal_s, 1.025, 1e-12);
  EXPECT_NEAR(c->checkpoint_s, 0.05, 1e-12);
  // (11.25 - 0.45 - 1.3) / 95: the short-handed stretch is no full quorum's.
  EXPECT_NEAR(c->step_s, 0.1, 1e-12);
  EXPECT_EQ(c->short_handed_steps, 5);
  EXPECT_NEAR(c->short_handed_s, 1.3, 1e-12);
  EXPECT_NEAR(c->short_handed_share, 0.5, 1e-12);  // 5 x 0.1 s of work in 1.0 s

  Result<RunPrediction> p = PredictRun(*c, std::nullopt, 500, 1);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.replica_groups, 2);
  EXPECT_EQ(p->config.gpus, 2);
  EXPECT_DOUBLE_EQ(p->config.rate.per_node_hour, 180);  // the job's 360/h over 2 groups
  EXPECT_DOUBLE_EQ(p->config.heal_time, c->heal_s);
  EXPECT_DOUBLE_EQ(p->config.short_handed_share, 0.5);
  // The replay: 10 s of work, 0.45 s of stalls, 0.3 s of detection, 1.025 s at half speed
  // (0.5125 s), and the 1.25 s of start-up and shut-down: 0.79923, 0.1 pp off the run's 0.8;
  // the jitter puts a few failures into a stall (a restart, the interval lost).
  ASSERT_TRUE(p->replay_effective);
  EXPECT_NEAR(*p->replay_effective, 10.0 / (1.25 + 11.2625), 0.01);
  EXPECT_EQ(p->replay.failures, 1);
  const std::string text = FromRunText(*c, *p);
  EXPECT_NE(text.find("live recovery over 2 replica groups: 1 failure(s) trained through"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("--replica-groups 2 --heal-time 1.025s --short-handed-share 0.5"),
            std::string::npos)
      << text;
  const nlohmann::json j = FromRunJson(*c, *p);
  EXPECT_EQ(j["measured"]["live"]["heals"], 1);

  // One replica is no live run.
  dir.Write("config.toml", Config() +
                               "[resilience]\nmode = \"live\"\n[parallelism]\n"
                               "data_parallel_replicate = 1\n");
  Result<RunCosts> one = ReadRunCosts(dir.path());
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("at least 2 data-parallel replicas"), std::string::npos);
}

TEST(FromRun, RefusesWhatItCannotModel) {
  auto refused = [](const nlohmann::json& goodput, const std::string& config) {
    TempDir dir;
    if (!goodput.is_null()) dir.Write("goodput.json", goodput.dump());
    dir.Write("config.toml", config);
    Result<RunCosts> c = ReadRunCosts(dir.path());
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_NE(refused(nullptr, Config()).find("give the folder of a run started with tenax launch"),
            std::string::npos);
  nlohmann::json g = Goodput();
  g["launches"] = 2;
  EXPECT_NE(refused(g, Config()).find("took 2 launches"), std::string::npos);
  g = Goodput();
  g["exit_code"] = 7;
  EXPECT_NE(refused(g, Config()).find("did not finish"), std::string::npos);
  g = Goodput();
  g.erase("generations");
  EXPECT_NE(refused(g, Config()).find("no usable \"generations\""), std::string::npos);
  EXPECT_NE(refused(Goodput(), Config("enable = false\n")).find("took no checkpoints"),
            std::string::npos);
  g = Goodput();
  g["generations"][1]["last_step"] = 90;
  EXPECT_NE(refused(g, Config()).find("reaching its last step"), std::string::npos);
}

TEST(FromRun, WithoutAScheduleTheRateIsObservedOrGiven) {
  TempDir dir;
  nlohmann::json g = Goodput();
  g.erase("fault_schedule");
  dir.Write("goodput.json", g.dump());
  dir.Write("config.toml", Config());
  Result<RunCosts> c = ReadRunCosts(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  Result<RunPrediction> p = PredictRun(*c, std::nullopt, 200, 1);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->rate_source, "observed");
  // One failure in 13.0 - 1.2 - 0.3 = 11.5 s exposed.
  EXPECT_NEAR(p->rate.per_node_hour, 3600 / 11.5, 1e-9);
  EXPECT_FALSE(p->replay_effective);
}

}  // namespace
}  // namespace tenax::plan
