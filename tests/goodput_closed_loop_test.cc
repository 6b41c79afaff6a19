// The planner's goodput prediction against the launcher's own measurement, as a user would run
// them: `tenax launch --inject poisson:...` trains a 2-rank CPU job while failures (SIGKILL,
// SIGSTOP, NaN losses) strike at random at known rates; `tenax plan --from-run` then predicts
// the run's effective training time from its own measured costs. Checked: every failure the
// schedule drew struck, was detected with its kind and restarted from, and nothing else failed;
// the prediction for the run's own failure times lands within 2 percentage points of the
// measurement; the distribution at the rate agrees with `tenax simulate` given the flags
// --from-run prints. The same with live recovery (resilience.mode = "live") and crashes.
// bench/goodput_closed_loop.sh runs more mixes and seeds (docs/planner.md).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>

#include "test_util.h"

namespace tenax::testing {
namespace {

std::string Train(const TempDir& dir, const std::string& name) {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=400000 "
         "--set data.synthetic.vocab_size=32 --set data.synthetic.order=1 "
         "--set metrics.eval_interval=0 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=20 --set training.steps=3000 "
         "--set training.local_batch_size=4 --set training.on_nonfinite=restart "
         "--set job.dump_folder=" +
         dir.path() + " --set job.name=" + name;
}

// The launcher's flags: restarts without a practical bound, hangs found after 4 s of silence
// (the steps take ~15 ms; the margin keeps a loaded machine's pauses from being hangs the
// schedule did not cause) with half a second for the flight records (a stopped rank leaves none).
// A schedule without hangs waits 30 s: a fresh-clone CI beside two builds once took a pause
// of more than 4 s there for a hang, where the schedule's NaN was due.
std::string Launch(const std::string& schedule) {
  const bool hangs = schedule.find("hang=") != std::string::npos;
  return std::string("launch --nproc-per-node 2 --max-restarts 1000 --hang-timeout ") +
         (hangs ? "4" : "30") + " --flight-dump-timeout 0.5 ";
}

// What a scheduled failure of each kind is called once detected.
bool KindMatches(const std::string& scheduled, const std::string& detected) {
  if (scheduled == "crash") {
    // A SIGKILL may land in a step, in a checkpoint's write, or in a start-up.
    return detected == "crash" || detected == "crash-in-checkpoint" || detected == "setup";
  }
  if (scheduled == "hang") return detected == "hang";
  return scheduled == "nan" && detected == "nonfinite";
}

// `live`: resilience.mode = "live" over 2 DDP replicas, where a failure of one is trained
// through by the other and only one striking while the other heals restarts the job.
void CheckClosedLoop(const std::string& schedule, bool live = false) {
  TempDir dir;
  // Live: a checkpoint every 100 steps (for disasters only). A failure while the other replica
  // is inside a save's collectives still ends it too (a restart the model does not foresee), and
  // at every 20 steps on a loaded machine those restarts put the replay 3 pp off.
  const std::string mode = live ? " --set resilience.mode=live --set "
                                  "parallelism.data_parallel_replicate=2 --set "
                                  "parallelism.data_parallel_shard=1 --set checkpoint.interval=100"
                                : "";
  const auto run = RunTenax(
      Launch(schedule) + "--inject " + schedule + " -- " + Train(dir, "loop") + mode, dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json g = nlohmann::json::parse(ReadFile(dir / "loop/goodput.json"));
  EXPECT_EQ(g["step"], 3000);

  // Every failure the schedule drew struck, was detected as its kind and restarted (or, live,
  // recovered) from; no other failure happened.
  const nlohmann::json& injected = g["fault_schedule"]["injected"];
  ASSERT_GE(injected.size(), 3u) << g.dump(1);
  std::map<int, std::string> detected;  // schedule index -> failure kind
  auto found = [&](const nlohmann::json& f) {
    const int index = f.value("scheduled", -1);
    EXPECT_GE(index, 0) << "a failure the schedule did not cause: " << f.dump();
    EXPECT_EQ(detected.count(index), 0u) << "two failures for one injection: " << f.dump();
    detected[index] = f["kind"].get<std::string>();
  };
  for (const auto& f : g["failures"]) {
    found(f);
    EXPECT_GE(f["recovery_s"].get<double>(), 0) << f.dump();
  }
  int64_t healed = 0;
  for (const auto& r : g["live_recoveries"]) {
    found(r);
    healed += r["healed_at_s"].get<double>() >= 0 ? 1 : 0;
  }
  for (const auto& a : injected) {
    const int index = a["index"].get<int>();
    ASSERT_EQ(detected.count(index), 1u) << "injection without its failure: " << a.dump();
    EXPECT_TRUE(KindMatches(a["kind"], detected[index])) << a.dump() << " -> " << detected[index];
  }
  EXPECT_EQ(g["restarts"].get<size_t>(), g["failures"].size());
  if (live) {
    // Most failures are trained through; an arrival on the rank being replaced is skipped.
    EXPECT_GT(g["live_recoveries"].size(), g["failures"].size()) << g.dump(1);
    EXPECT_GE(healed, 2) << g.dump(1);
    for (const auto& x : g["fault_schedule"]["skipped"]) {
      EXPECT_EQ(detected.count(x["index"].get<int>()), 0u) << x.dump();
    }
  } else {
    EXPECT_TRUE(g["live_recoveries"].empty());
  }
  // The log names each strike.
  EXPECT_NE(run.output.find("fault schedule: failure 0 ("), std::string::npos) << run.output;

  // The prediction from the run's own costs.
  const auto plan = RunTenaxStdout("plan --from-run " + (dir / "loop") + " --json", dir.path());
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const nlohmann::json p = nlohmann::json::parse(plan.output);
  const double measured = g["effective_training_ratio"].get<double>();
  EXPECT_DOUBLE_EQ(p["measured"]["effective"].get<double>(), measured);
  if (live) {
    const nlohmann::json& l = p["measured"]["live"];
    EXPECT_EQ(p["measured"]["failures"].get<size_t>() + l["failures"].get<size_t>(),
              injected.size())
        << plan.output << "\n"
        << g["failures"].dump() << "\n"
        << g["live_recoveries"].dump() << "\n"
        << g["fault_schedule"].dump();
    EXPECT_EQ(l["failures"].get<size_t>(), g["live_recoveries"].size());
    EXPECT_EQ(l["heals"].get<int64_t>(), healed);
    EXPECT_EQ(l["replica_groups"], 2);
    EXPECT_GT(l["short_handed_share"].get<double>(), 0) << plan.output;
    EXPECT_GT(l["short_handed_steps"].get<int64_t>(), 0) << plan.output;
  }
  EXPECT_EQ(p["measured"]["failures"].get<size_t>(), g["failures"].size());
  EXPECT_EQ(p["rate_source"], "the run's poisson schedule");
  const double replay = p["replay"].get<double>();
  std::printf(
      "%s: measured %.2f %%, predicted %.2f %% for its own failure times (%+.2f pp), "
      "%.2f %% at the rate (5th-95th percentile %.1f - %.1f %%)\n",
      schedule.c_str(), 100 * measured, 100 * replay, 100 * (measured - replay),
      100 * p["predicted"]["mean"].get<double>(), 100 * p["predicted"]["p05"].get<double>(),
      100 * p["predicted"]["p95"].get<double>());
  // On a miss, what the run measured failure by failure (TENAX_KEEP_TEST_DIRS=1 keeps it all).
  nlohmann::json brief = nlohmann::json::array();
  for (const char* list : {"failures", "live_recoveries"}) {
    for (const auto& f : g[list]) {
      brief.push_back({{"list", list},
                       {"kind", f["kind"]},
                       {"time_s", f["time_s"]},
                       {"detection_s", f["detection_s"]},
                       {"recovery_s", f.value("recovery_s", -1.0)},
                       {"healed_at_s", f.value("healed_at_s", -1.0)},
                       {"steps_short_handed", f.value("steps_short_handed", -1)}});
    }
  }
  // Restart recovery: within issue 40's 2 percentage points. Live: within 1.2 pp in the 15 bench
  // runs of 2026-12-07 (docs/planner.md), and this test, six times in a row beside a fresh-clone
  // CI's tests after the replay learned where restarts are cut short and where failures can
  // strike, measured -0.33 to +2.00 pp from its replay (mean +0.98: the replay a point low). It
  // was 3.4 pp off once in 8 before those fixes. 4 pp here, which a broken live model (a restart
  // per failure, or none) misses by far.
  const double tolerance = live ? 0.04 : 0.02;
  EXPECT_NEAR(measured, replay, tolerance) << plan.output << "\n"
                                           << g["time_s"].dump() << "\n"
                                           << brief.dump();

  // `tenax simulate` with the flags --from-run prints: the same failure model, so its mean wall
  // time gives the same effective training time (with the run's start-up and shut-down added).
  const auto text = RunTenaxStdout("plan --from-run " + (dir / "loop"), dir.path());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text.output, m, std::regex("tenax (simulate [^\\n]*)")))
      << text.output;
  const auto sim = RunTenaxStdout(m[1].str() + " --json", dir.path());
  ASSERT_EQ(sim.exit_code, 0) << m[1].str() << "\n" << sim.output;
  // Compared as mean wall times: --from-run's effective is a mean over runs of a ratio (the
  // run's computation over each run's time), which the mean time does not give back (1.3 pp apart
  // at 720 kills an hour live, where the runs' times vary most). The flags are printed to 6
  // digits, which may move a failure of one simulated run across the end or a checkpoint: seconds
  // in that run, a few milliseconds in the mean, but a percentile may pick another run (the 95th
  // was 0.13% apart once).
  const nlohmann::json s = nlohmann::json::parse(sim.output);
  const double sim_wall = s["wall_s"]["mean"].get<double>();
  const double own_wall = p["predicted_wall_s"]["mean"].get<double>();
  EXPECT_NEAR(sim_wall, own_wall, 1e-3 * own_wall) << sim.output << "\n" << p.dump(1);
}

TEST(GoodputClosedLoop, CrashesHangsAndNaNs) {
  CheckClosedLoop("poisson:crash=480/h:hang=120/h:nan=120/h:seed=1");
}

TEST(GoodputClosedLoop, CrashesAndNaNs) { CheckClosedLoop("poisson:crash=600/h:nan=240/h:seed=2"); }

// Live recovery: the simulator's live model fed the run's own healing time and short-handed speed.
// Crashes only here (hangs add a hang timeout per failure to a test that is already the longest of
// the four; bench/goodput_closed_loop.sh's live-mixed has them).
TEST(GoodputClosedLoop, LiveRecoveryFromCrashes) {
  CheckClosedLoop("poisson:crash=720/h:seed=3", /*live=*/true);
}

// Inputs the launcher refuses before any rank starts.
TEST(GoodputClosedLoop, RefusesSchedulesThatCouldNotRun) {
  TempDir dir;
  auto r = RunTenax("launch --nproc-per-node 2 --inject poisson:crash=60/h -- " + Train(dir, "a"),
                    dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("give --max-restarts"), std::string::npos) << r.output;
  r = RunTenax("launch --nproc-per-node 2 --max-restarts 9 --inject poisson:nan=60/h -- " +
                   Train(dir, "b") + " --set training.on_nonfinite=stop",
               dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.on_nonfinite"), std::string::npos) << r.output;
  r = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 9 --inject poisson:crash=60 -- " + Train(dir, "c"),
      dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("N/h, N/min or N/s"), std::string::npos) << r.output;
  r = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 9 --inject poisson:crash=60/h:nan=60/h -- " +
          Train(dir, "d") +
          " --set resilience.mode=live --set parallelism.data_parallel_replicate=2 "
          "--set parallelism.data_parallel_shard=1",
      dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("crashes and hangs only"), std::string::npos) << r.output;
  for (const char* run : {"a", "d"}) {
    EXPECT_FALSE(std::filesystem::exists(dir / (std::string(run) + "/metrics.jsonl"))) << run;
  }
}

}  // namespace
}  // namespace tenax::testing
