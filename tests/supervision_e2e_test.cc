// Supervision you can trust, tried from outside the program the way an operator or a cluster
// would: a rank killed with SIGKILL ten times at random is named every time and the run still
// ends bit-identical; a stopped rank is named and killed at once; a killed launcher leaves no
// process behind and its successor resumes, with the gap in goodput.json; a second launch into a
// running folder is refused without touching it; a finished run launched again succeeds; a rank
// stuck in its teardown after finishing is named and killed without a restart; a fault that never
// fires is an error. Every wait is for an event (a file, a status field, a
// process ending) with a deadline only as a bound for a broken run.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <random>

#include "test_util.h"

namespace tenax::testing {
namespace {

std::string Train(const TempDir& dir, const std::string& name, int steps, int ranks_batch = 4) {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=200000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=1024 "
         "--set metrics.eval_interval=1000 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=4 --set training.steps=" +
         std::to_string(steps) + " --set training.local_batch_size=" + std::to_string(ranks_batch) +
         " --set job.dump_folder=" + dir.path() + " --set job.name=" + name;
}

std::string Shard(const TempDir& dir, const std::string& run, int steps, int shard, int ranks) {
  char name[128];
  std::snprintf(name, sizeof(name), "/checkpoints/step_%08d/model-rank%05d-of-%05d.safetensors",
                steps, shard, ranks);
  return ReadFile(dir / (run + name));
}

nlohmann::json ReadJson(const std::string& path) {
  const auto j = nlohmann::json::parse(ReadFile(path), nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json() : j;
}

constexpr int kShortSteps = 48;

class SupervisionE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax("launch --nproc-per-node 2 -- " + Train(*dir_, "clean2", kShortSteps),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  // The run's final weights equal the clean 2-rank run's, bit for bit.
  static void ExpectClean(const std::string& run) {
    for (int shard = 0; shard < 2; ++shard) {
      const std::string want = Shard(*dir_, "clean2", kShortSteps, shard, 2);
      ASSERT_FALSE(want.empty());
      EXPECT_TRUE(Shard(*dir_, run, kShortSteps, shard, 2) == want) << run << " shard " << shard;
    }
  }
  static TempDir* dir_;
};
TempDir* SupervisionE2E::dir_ = nullptr;

// The folder named on the line of `output` that starts with `prefix`, up to the next space.
std::string FolderAfter(const std::string& output, const std::string& prefix) {
  const size_t at = output.find(prefix);
  if (at == std::string::npos) return "";
  const size_t from = at + prefix.size();
  return output.substr(from, output.find_first_of(" \n", from) - from);
}

// The launcher is killed while its job is held at step 10 by a stopped rank (the injected
// `stop`, with a hang timeout far beyond the test's), so the kill lands mid-run however fast the
// steps are, and the family includes a rank that runs no signal handler. With memory replicas
// the ranks' RAM folder outlives the killed launcher only until the next launcher on the host.
TEST_F(SupervisionE2E, KilledLauncherLeavesNoProcessAndItsSuccessorResumes) {
  const std::string train =
      Train(*dir_, "orphans", kShortSteps) + " --set checkpoint.memory_replicas=true";
  const std::string cmd = "launch --nproc-per-node 2 --spares 1 -- " + train;
  std::string ram;
  {
    Background launcher(Words("launch --nproc-per-node 2 --spares 1 --hang-timeout 3600 "
                              "--inject stop:rank=1:step=10 -- " +
                              train),
                        dir_->path(), *dir_ / "orphans.log");
    ASSERT_TRUE(WaitFor(
        [&] {
          return launcher.output().find("[rank 1] injected fault: SIGSTOP at step 10") !=
                     std::string::npos &&
                 std::filesystem::exists(*dir_ / "orphans/checkpoints/step_00000008/COMMITTED");
        },
        120))
        << launcher.output();
    ram = FolderAfter(launcher.output(), "launch: memory replicas in ");
    ASSERT_EQ(ram.rfind("/dev/shm/tenax-ram-orphans-" + std::to_string(launcher.pid()) + "-", 0),
              0u)
        << launcher.output();
    ASSERT_FALSE(std::filesystem::is_empty(ram)) << "no checkpoint copies in " << ram;
    const std::vector<pid_t> family = Descendants(launcher.pid());
    ASSERT_GE(family.size(), 3u) << "2 ranks and a spare";
    ASSERT_EQ(::kill(launcher.pid(), SIGKILL), 0);
    EXPECT_EQ(launcher.Wait(30), 128 + SIGKILL);
    const bool all_gone = WaitFor(
        [&] {
          for (pid_t p : family) {
            if (Alive(p)) return false;
          }
          return true;
        },
        30);
    EXPECT_TRUE(all_gone) << "processes of a killed launcher are still running";
  }
  // The command again (without the fault): it takes the run folder over, resumes from step 8,
  // records the lost launcher. The killed launcher's RAM folder is gone once it started (its
  // sweep, or another launcher's on this host), and its own once it ended.
  auto r = RunTenax(cmd, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launch 2 of this run"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(ram)) << ram;
  EXPECT_FALSE(std::filesystem::exists(ram + ".owner")) << ram;
  const std::string own = FolderAfter(r.output, "launch: memory replicas in ");
  ASSERT_FALSE(own.empty()) << r.output;
  EXPECT_NE(own, ram);
  EXPECT_FALSE(std::filesystem::exists(own)) << own;
  EXPECT_FALSE(std::filesystem::exists(own + ".owner")) << own;
  ExpectClean("orphans");
  const nlohmann::json report = ReadJson(*dir_ / "orphans/goodput.json");
  EXPECT_EQ(report["launches"], 2) << report.dump(2);
  ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "launcher-lost");
  EXPECT_EQ(report["failures"][0]["resumed_from"].get<int>(), 8);
  EXPECT_GT(report["time_s"]["down"].get<double>(), 0.0);
  double sum = 0;
  for (const auto& [k, v] : report["time_s"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, report["wall_s"].get<double>(), 0.05);
}

TEST_F(SupervisionE2E, ASecondLaunchIntoARunningFolderIsRefused) {
  Background first(Words("launch --nproc-per-node 2 -- " + Train(*dir_, "busy", 100000)),
                   dir_->path(), *dir_ / "busy.log");
  const std::string owner = *dir_ / "busy/.tenax.owner";
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(*dir_ / "busy/metrics.jsonl"); }, 120))
      << first.output();
  const std::string owner_before = ReadFile(owner);
  for (const std::string& second :
       {"launch --nproc-per-node 2 -- " + Train(*dir_, "busy", 10), Train(*dir_, "busy", 10)}) {
    auto r = RunTenax(second, dir_->path());
    EXPECT_EQ(r.exit_code, 12) << r.output;
    EXPECT_NE(r.output.find("is in use by pid " + std::to_string(first.pid())), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("generation 0"), std::string::npos) << r.output;
  }
  EXPECT_EQ(ReadFile(owner), owner_before);  // untouched
  EXPECT_EQ(first.Wait(0), -1) << "the first launch must still be running";
}

TEST_F(SupervisionE2E, AFinishedRunLaunchedAgainSucceeds) {
  const std::string train = Train(*dir_, "again", 8);
  ASSERT_EQ(RunTenax(train, dir_->path()).exit_code, 0);
  auto plain = RunTenax(train, dir_->path());
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("already complete"), std::string::npos) << plain.output;
  auto launched = RunTenax("launch --nproc-per-node 2 -- " + train, dir_->path());
  EXPECT_EQ(launched.exit_code, 0) << launched.output;
  EXPECT_NE(launched.output.find("already complete"), std::string::npos) << launched.output;
}

// A rank stopped with SIGSTOP (the injected `stop`, so that it lands inside training however
// fast the steps run): no rank progresses, and the stopped one cannot dump its flight record, so
// the records name it; every rank is killed at once and the run recovers.
TEST_F(SupervisionE2E, AStoppedRankIsNamedAndKilled) {
  auto r = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 2 --hang-timeout 2 --inject stop:rank=1:step=10 "
      "-- " +
          Train(*dir_, "stopped", kShortSteps),
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] injected fault: SIGSTOP at step 10"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("flight records: rank(s) 1 left no flight record"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("killing every rank of generation 0"), std::string::npos) << r.output;
  ExpectClean("stopped");
  const nlohmann::json report = ReadJson(*dir_ / "stopped/goodput.json");
  ASSERT_EQ(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "hang");
  EXPECT_EQ(report["failures"][0]["rank"], 1) << r.output;
}

// A rank whose teardown never returns (the injected exit-hang: it blocks after its `finish` beat,
// like a communicator whose destruction hangs) is named and killed once --exit-timeout has passed,
// and the run ends done: exit code 0, no restart, no failure, nothing redone, the clean weights.
TEST_F(SupervisionE2E, ARankStuckInItsTeardownIsNamedAndTheRunEndsDone) {
  auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 2 --exit-timeout " +
                        std::to_string(kTeardownTimeoutS) + " --inject exit-hang:rank=1 -- " +
                        Train(*dir_, "teardown", kShortSteps),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] injected fault: hang in the teardown after step 48"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("launch: rank(s) 1 finished training (step 48, checkpoints committed) "
                          "but did not exit within --exit-timeout " +
                          std::to_string(kTeardownTimeoutS) + "s"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("generation 1:"), std::string::npos) << r.output;  // no restart
  ExpectClean("teardown");
  const nlohmann::json report = ReadJson(*dir_ / "teardown/goodput.json");
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["restarts"], 0);
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_EQ(report["steps_redone"], 0);
  EXPECT_DOUBLE_EQ(report["time_s"]["lost"].get<double>(), 0);
  ASSERT_EQ(report["exit_faults"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["exit_faults"][0]["rank"], 1);
  EXPECT_EQ(report["exit_faults"][0]["kind"], "hang");
  EXPECT_EQ(report["exit_faults"][0]["step"], kShortSteps);
  EXPECT_NE(ReadFile(*dir_ / "teardown/report.html").find("id=\"exit-faults\""), std::string::npos);
}

// A rank that fails in its teardown (the injected exit-crash: code 3 after its `finish` beat) had
// nothing left to lose: it is recorded, and the run ends done without a restart.
TEST_F(SupervisionE2E, ARankThatCrashesAfterFinishingIsNoFailure) {
  auto r =
      RunTenax("launch --nproc-per-node 2 --max-restarts 2 --inject exit-crash:rank=1:code=3 -- " +
                   Train(*dir_, "exitcrash", kShortSteps),
               dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launch: rank 1 exited with code 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("generation 1:"), std::string::npos) << r.output;  // no restart
  ExpectClean("exitcrash");
  const nlohmann::json report = ReadJson(*dir_ / "exitcrash/goodput.json");
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_EQ(report["restarts"], 0);
  ASSERT_EQ(report["exit_faults"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["exit_faults"][0]["rank"], 1);
  EXPECT_EQ(report["exit_faults"][0]["kind"], "crash");
  EXPECT_EQ(report["exit_faults"][0]["step"], kShortSteps);
}

TEST_F(SupervisionE2E, AFaultThatNeverFiresIsAnError) {
  auto r = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 1 "
      "--inject crash:rank=1:step=5:gen=1 -- " +
          Train(*dir_, "unfired", 8),
      dir_->path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the injected fault 'crash:rank=1:step=5:gen=1' never fired"),
            std::string::npos)
      << r.output;
}

// The acceptance run: 4 ranks and a spare with default flags and --max-restarts 20; a
// random rank is killed with SIGKILL from outside ten times, each time after its generation
// trained. Every failure names the killed rank, and the run ends bit-identical.
TEST(SupervisionSoak, TenRandomKillsAreNamedAndTheRunEndsIdentical) {
  TempDir dir;
  constexpr int kSteps = 400;
  auto clean =
      RunTenax("launch --nproc-per-node 4 -- " + Train(dir, "clean4", kSteps, 2), dir.path());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  const std::string status = dir / "status.json";
  Background run(Words("launch --nproc-per-node 4 --spares 1 --max-restarts 20 --status-file " +
                       status + " -- " + Train(dir, "killed", kSteps, 2)),
                 dir.path(), dir / "killed.log");
  std::mt19937 rng(20261125);
  std::vector<int> killed;
  for (int k = 0; k < 10; ++k) {
    pid_t victim = -1;
    const int rank = std::uniform_int_distribution<int>(0, 3)(rng);
    ASSERT_TRUE(WaitFor(
        [&] {
          const nlohmann::json s = ReadJson(status);
          if (!s.is_object() || s.value("generation", -1) != k || s["ranks"].size() != 4) {
            return false;
          }
          for (const auto& r : s["ranks"]) {  // every rank trained in this generation
            if (!r.value("alive", false) || r.value("phase", std::string()) != "train") {
              return false;
            }
          }
          victim = s["ranks"][rank].value("pid", -1);
          return victim > 0;
        },
        180))
        << "kill " << k << "\n"
        << run.output();
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    killed.push_back(rank);
  }
  ASSERT_EQ(run.Wait(600), 0) << run.output();
  for (int shard = 0; shard < 4; ++shard) {
    const std::string want = Shard(dir, "clean4", kSteps, shard, 4);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(Shard(dir, "killed", kSteps, shard, 4) == want) << "shard " << shard;
  }
  const nlohmann::json report = ReadJson(dir / "killed/goodput.json");
  ASSERT_EQ(report["failures"].size(), 10u) << report.dump(2);
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(report["failures"][k]["rank"], killed[k]) << k << "\n" << report.dump(2);
    // A kill can land while the rank writes a checkpoint: that is a crash in a checkpoint.
    const std::string kind = report["failures"][k]["kind"];
    EXPECT_TRUE(kind == "crash" || kind == "crash-in-checkpoint") << k << ": " << kind;
    EXPECT_EQ(report["failures"][k]["exit_code"], 137) << k;
  }
  EXPECT_EQ(report["restarts"], 10);
}

}  // namespace
}  // namespace tenax::testing
