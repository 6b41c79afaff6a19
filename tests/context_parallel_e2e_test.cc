// Context parallelism in `tenax train`, run through `tenax launch` as a user would: CP 2 and 4
// alone and with FSDP, DDP, HSDP, TP and PP (and activation recomputation, and TP x PP together)
// against the single-rank run with the same global batch; resuming across CP degrees
// (2 -> 4 -> 1) continues the same trajectory; layouts CP cannot take are refused before any rank
// trains.
//
// Data: the synthetic source of order 3 (each token depends on the three before it), so that
// attention across the chunks matters. Tolerance 2e-5 on losses of ~3 nats over 20 AdamW steps:
// the ranks sum in other orders (the ring's blocks, per-rank means, the reduce-scatter), measured
// at most 4.8e-7 (printed by each test); giving every rank's tokens RoPE positions from 0 instead
// of their global ones moved the loss by 2.3e-4 to 3.1e-4 (a lost block or a wrong average moves
// it by far more).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "test_util.h"

namespace tenax::testing {
namespace {

namespace fs = std::filesystem;
constexpr double kLossTolerance = 2e-5;

std::string Args(const TempDir& dir, const std::string& name, int local_batch, int steps,
                 const std::string& extra = "") {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=3 --set metrics.eval_tokens=2048 "
         "--set metrics.eval_interval=10 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=5 --set job.dump_folder=" +
         dir.path() + " --set job.name=" + name +
         " --set training.local_batch_size=" + std::to_string(local_batch) +
         " --set training.steps=" + std::to_string(steps) + " " + extra;
}

void ExpectSame(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], kLossTolerance) << what << " " << i + 1;
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  std::cout << "largest |loss - single rank's| per " << what << ": " << worst << "\n";
}

class ContextParallelE2E : public ::testing::Test {
 protected:
  // The single-rank reference: global batch 4, 20 steps.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax(Args(*dir_, "single", 4, 20), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    losses_ = ReadMetric(*dir_ / "single/metrics.jsonl", "loss");
    val_losses_ = ReadMetric(*dir_ / "single/metrics.jsonl", "val_loss");
    ASSERT_EQ(losses_.size(), 20u);
    ASSERT_EQ(val_losses_.size(), 2u);
  }
  static void TearDownTestSuite() { delete dir_; }

  // Runs `name` on `ranks` ranks with `layout` and checks every loss and validation loss.
  void ExpectMatches(int ranks, const std::string& name, int local_batch, const std::string& layout,
                     const std::string& describe) {
    auto r = RunTenax("launch --nproc-per-node " + std::to_string(ranks) + " -- " +
                          Args(*dir_, name, local_batch, 20, layout),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(describe), std::string::npos) << r.output;
    ExpectSame(ReadMetric(*dir_ / (name + "/metrics.jsonl"), "loss"), losses_, "step");
    ExpectSame(ReadMetric(*dir_ / (name + "/metrics.jsonl"), "val_loss"), val_losses_,
               "evaluation");
  }

  static TempDir* dir_;
  static std::vector<double> losses_, val_losses_;
};
TempDir* ContextParallelE2E::dir_ = nullptr;
std::vector<double> ContextParallelE2E::losses_;
std::vector<double> ContextParallelE2E::val_losses_;

TEST_F(ContextParallelE2E, TwoRanksMatchSingleRank) {
  ExpectMatches(2, "cp2", 4, "--set parallelism.context_parallel=2",
                "dp_replicate 1 x dp_shard 1 x pp 1 x cp 2 x tp 1");
}

TEST_F(ContextParallelE2E, FourRanksMatchSingleRank) {
  ExpectMatches(4, "cp4", 4, "--set parallelism.context_parallel=4",
                "dp_replicate 1 x dp_shard 1 x pp 1 x cp 4 x tp 1");
}

// FSDP shards over data_parallel_shard x context: 4 shards of every unit.
TEST_F(ContextParallelE2E, WithFsdpAndRecomputationMatchesSingleRank) {
  ExpectMatches(4, "cp2_fsdp2", 2,
                "--set parallelism.context_parallel=2 --set parallelism.data_parallel_shard=2 "
                "--set parallelism.activation_checkpoint=full",
                "dp_replicate 1 x dp_shard 2 x pp 1 x cp 2 x tp 1");
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(fs::exists(*dir_ / ("cp2_fsdp2/checkpoints/step_00000020/model-rank0000" +
                                    std::to_string(s) + "-of-00004.safetensors")));
  }
}

TEST_F(ContextParallelE2E, WithDdpMatchesSingleRank) {
  ExpectMatches(4, "cp2_ddp2", 2,
                "--set parallelism.context_parallel=2 --set parallelism.data_parallel_replicate=2 "
                "--set parallelism.data_parallel_shard=1",
                "dp_replicate 2 x dp_shard 1 x pp 1 x cp 2 x tp 1");
}

TEST_F(ContextParallelE2E, WithTensorParallelMatchesSingleRank) {
  ExpectMatches(4, "cp2_tp2", 4,
                "--set parallelism.context_parallel=2 --set parallelism.tensor_parallel=2 "
                "--set parallelism.data_parallel_shard=1",
                "dp_replicate 1 x dp_shard 1 x pp 1 x cp 2 x tp 2");
}

TEST_F(ContextParallelE2E, WithPipelineMatchesSingleRank) {
  ExpectMatches(4, "cp2_pp2", 4,
                "--set parallelism.context_parallel=2 --set parallelism.pipeline_parallel=2 "
                "--set parallelism.data_parallel_shard=1 --set parallelism.microbatches=2",
                "dp_replicate 1 x dp_shard 1 x pp 2 x cp 2 x tp 1");
}

// Every axis at once on 8 ranks: CP 2 inside TP 2 inside PP 2, and HSDP (2 replicas of 2 shards)
// around CP 2.
TEST_F(ContextParallelE2E, WithTensorAndPipelineParallelMatchesSingleRank) {
  ExpectMatches(8, "cp2_tp2_pp2", 4,
                "--set parallelism.context_parallel=2 --set parallelism.tensor_parallel=2 "
                "--set parallelism.pipeline_parallel=2 --set parallelism.data_parallel_shard=1 "
                "--set parallelism.microbatches=2",
                "dp_replicate 1 x dp_shard 1 x pp 2 x cp 2 x tp 2");
}

TEST_F(ContextParallelE2E, WithHsdpMatchesSingleRank) {
  ExpectMatches(8, "cp2_hsdp", 1,
                "--set parallelism.context_parallel=2 --set parallelism.data_parallel_replicate=2 "
                "--set parallelism.data_parallel_shard=2",
                "dp_replicate 2 x dp_shard 2 x pp 1 x cp 2 x tp 1");
}

// Saved under CP 2, resumed under CP 4, then on one rank: the uninterrupted run's losses.
TEST_F(ContextParallelE2E, ResumesAcrossContextParallelDegrees) {
  auto two = RunTenax("launch --nproc-per-node 2 -- " +
                          Args(*dir_, "cp_resume", 4, 20,
                               "--set parallelism.context_parallel=2 --set training.stop_at=10"),
                      dir_->path());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto four = RunTenax("launch --nproc-per-node 4 -- " +
                           Args(*dir_, "cp_resume", 4, 20,
                                "--set parallelism.context_parallel=4 --set training.stop_at=15"),
                       dir_->path());
  ASSERT_EQ(four.exit_code, 0) << four.output;
  EXPECT_NE(four.output.find("step_00000010"), std::string::npos) << four.output;
  auto one = RunTenax(Args(*dir_, "cp_resume", 4, 20), dir_->path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("step_00000015"), std::string::npos) << one.output;
  // metrics.jsonl holds every step once, from the three runs.
  ExpectSame(ReadMetric(*dir_ / "cp_resume/metrics.jsonl", "loss"), losses_, "step");
}

TEST_F(ContextParallelE2E, LayoutsItCannotTakeAreRefusedBeforeTraining) {
  auto odd = RunTenax("launch --nproc-per-node 4 -- " +
                          Args(*dir_, "cp_odd", 4, 20,
                               "--set parallelism.context_parallel=4 --set training.seq_len=36"),
                      dir_->path());
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("training.seq_len (36) is not divisible by 2 * context_parallel (4)"),
            std::string::npos)
      << odd.output;
  EXPECT_EQ(odd.output.find("step 1"), std::string::npos) << odd.output;
  auto world =
      RunTenax("launch --nproc-per-node 2 -- " + Args(*dir_, "cp_world", 4, 20,
                                                      "--set parallelism.context_parallel=4 "
                                                      "--set parallelism.data_parallel_shard=1"),
               dir_->path());
  EXPECT_NE(world.exit_code, 0);
  EXPECT_NE(world.output.find("context_parallel(4) = 4 != world size 2"), std::string::npos)
      << world.output;
}

}  // namespace
}  // namespace tenax::testing
