// Recovery through `tenax launch --max-restarts`: injected crashes, automatic restart from the
// newest good checkpoint, and the same final weights as an uninterrupted run (bit for bit on
// CPU), with the failure recorded in the goodput file. Also: inputs that a restart cannot fix
// stop at once, and a job out of restarts stops with a report instead of looping.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace tenax::testing {
namespace {

std::string Train(const TempDir& dir, const std::string& name, const std::string& extra = "") {
  return "train --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 "
         "--set metrics.eval_interval=5 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=3 --set training.steps=12 --set training.local_batch_size=4 "
         "--set job.dump_folder=" + dir.path() + " --set job.name=" + name + " " + extra;
}

class ResilienceE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax("launch --nproc-per-node 2 -- " + Train(*dir_, "clean"), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Final(const std::string& run, int shard) {
    return ReadFile(*dir_ / (run + "/checkpoints/step_00000012/model-rank0000" +
                             std::to_string(shard) + "-of-00002.safetensors"));
  }
  static TempDir* dir_;
};
TempDir* ResilienceE2E::dir_ = nullptr;

TEST_F(ResilienceE2E, CrashedRankIsRestartedAndTrainingEndsIdentical) {
  for (const std::string how : {"kill", "exit"}) {
    const std::string name = "crash_" + how;
    const std::string goodput = *dir_ / (name + ".json");
    auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 2 --goodput-file " + goodput +
                          " --inject crash:rank=1:step=8:how=" + how + " -- " +
                          Train(*dir_, name),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("injected fault: crash (" + how + ") at step 8"), std::string::npos);
    EXPECT_NE(r.output.find("resuming from " + *dir_ / (name + "/checkpoints/step_00000006")),
              std::string::npos)
        << r.output;
    // Bit-identical final weights: the restart lost no step and changed none.
    EXPECT_EQ(Final(name, 0), Final("clean", 0)) << how;
    EXPECT_EQ(Final(name, 1), Final("clean", 1)) << how;
    auto report = nlohmann::json::parse(ReadFile(goodput));
    EXPECT_EQ(report["exit_code"], 0);
    EXPECT_EQ(report["restarts"], 1);
    ASSERT_EQ(report["failures"].size(), 1u);
    EXPECT_EQ(report["failures"][0]["rank"], 1);
    EXPECT_EQ(report["failures"][0]["exit_code"], how == "kill" ? 137 : 1);
    EXPECT_GT(report["wall_s"].get<double>(), report["failures"][0]["time_s"].get<double>());
  }
}

// A rank that stops making progress (stuck, not dead): the launcher sees no heartbeat for the
// hang timeout, stops everyone, restarts, and the run ends identical to the clean one.
TEST_F(ResilienceE2E, HungRankIsDetectedAndRestarted) {
  const std::string goodput = *dir_ / "hang.json";
  auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 1 --hang-timeout 3 "
                    "--goodput-file " + goodput + " --inject hang:rank=1:step=8 -- " +
                        Train(*dir_, "hang"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launch: hang: no rank finished a step"), std::string::npos)
      << r.output;
  EXPECT_EQ(Final("hang", 0), Final("clean", 0));
  EXPECT_EQ(Final("hang", 1), Final("clean", 1));
  auto report = nlohmann::json::parse(ReadFile(goodput));
  ASSERT_EQ(report["failures"].size(), 1u);
  EXPECT_EQ(report["failures"][0]["kind"], "hang");
  const double detection = report["failures"][0]["detection_s"].get<double>();
  EXPECT_GE(detection, 3.0);
  EXPECT_LT(detection, 10.0);
}

TEST_F(ResilienceE2E, NoRestartsLeftStopsWithAReport) {
  auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 1 "
                    "--inject crash:rank=0:step=2,crash:rank=0:step=5:gen=1 -- " +
                        Train(*dir_, "exhausted"),
                    dir_->path());
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("no restarts left (1 used)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 failure(s) and 1 restart(s)"), std::string::npos) << r.output;
}

TEST_F(ResilienceE2E, BadInputIsNotRestarted) {
  auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 3 -- " +
                        Train(*dir_, "bad", "--set optimizer.lr=-1"),
                    dir_->path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not restarting"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("generation 1"), std::string::npos) << r.output;
  auto spec = RunTenax("launch --nproc-per-node 2 --inject crash:rank=1 -- " +
                           Train(*dir_, "spec"),
                       dir_->path());
  EXPECT_EQ(spec.exit_code, 2) << spec.output;
  EXPECT_NE(spec.output.find("a crash needs rank=R and step=S"), std::string::npos)
      << spec.output;
}

}  // namespace
}  // namespace tenax::testing
