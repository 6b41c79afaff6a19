// Multi-rank training on CPU (Gloo), run through `tenax launch` as a user would: each layout
// against the single-rank run with the same global batch, resharding between layouts, memory
// per rank under FSDP, layout errors, and a rank that dies.
//
// Tolerance: ranks compute the same math as one process with the same global batch, but sums
// happen in a different order (per-rank means, then an all-reduce; reduce-scatter through
// alltoall). Float32 rounding differs at ~1e-7 relative per step; through 20 AdamW steps (whose
// update divides by sqrt(v), amplifying tiny gradient differences for near-zero v) we measured
// at most 6e-7 in the loss (DDP 5.4e-7, FSDP 5.4e-7, HSDP 6.0e-7). 1e-4 absolute on losses of
// ~3 nats leaves a wide margin for other BLAS builds while still failing for any real error (a
// wrong average, a missing shard or a skipped rank moves the loss by > 1e-2 within a few steps).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>
#include <tuple>

#include "test_util.h"

namespace tenax::testing {
namespace {

namespace fs = std::filesystem;
constexpr double kLossTolerance = 1e-4;

std::string Args(const TempDir& dir, const std::string& name, int local_batch, int steps,
                 const std::string& extra = "") {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 "
         "--set metrics.eval_interval=10 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=10 --set job.dump_folder=" +
         dir.path() + " --set job.name=" + name +
         " --set training.local_batch_size=" + std::to_string(local_batch) +
         " --set training.steps=" + std::to_string(steps) + " " + extra;
}

std::vector<double> Losses(const std::string& metrics) { return ReadMetric(metrics, "loss"); }

void ExpectSameLosses(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], kLossTolerance) << "step " << i + 1;
  }
}

class ParallelE2E : public ::testing::Test {
 protected:
  // The single-rank reference: global batch 8, 20 steps.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax(Args(*dir_, "single", 8, 20), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    reference_ = Losses(*dir_ / "single/metrics.jsonl");
    ASSERT_EQ(reference_.size(), 20u);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
  static std::vector<double> reference_;
};
TempDir* ParallelE2E::dir_ = nullptr;
std::vector<double> ParallelE2E::reference_;

TEST_F(ParallelE2E, DdpFourRanksMatchesSingleRank) {
  auto r = RunTenax("launch --nproc-per-node 4 -- " +
                        Args(*dir_, "ddp", 2, 20, "--set parallelism.data_parallel_replicate=4"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp_replicate 4 x dp_shard 1"), std::string::npos) << r.output;
  ExpectSameLosses(Losses(*dir_ / "ddp/metrics.jsonl"), reference_);
}

TEST_F(ParallelE2E, FsdpFourRanksMatchesSingleRank) {
  auto r = RunTenax("launch --nproc-per-node 4 -- " + Args(*dir_, "fsdp", 2, 20), dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp_replicate 1 x dp_shard 4"), std::string::npos) << r.output;
  ExpectSameLosses(Losses(*dir_ / "fsdp/metrics.jsonl"), reference_);
  for (int s = 0; s < 4; ++s) {
    EXPECT_TRUE(fs::exists(*dir_ / ("fsdp/checkpoints/step_00000020/model-rank0000" +
                                    std::to_string(s) + "-of-00004.safetensors")));
  }
}

// Recomputing every block in backward (on gathered FSDP parameters) changes nothing numerically.
TEST_F(ParallelE2E, FsdpWithFullActivationCheckpointMatches) {
  auto r =
      RunTenax("launch --nproc-per-node 2 -- " +
                   Args(*dir_, "fsdp_ac", 4, 20, "--set parallelism.activation_checkpoint=full"),
               dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectSameLosses(Losses(*dir_ / "fsdp_ac/metrics.jsonl"), reference_);
}

TEST_F(ParallelE2E, HsdpTwoByTwoMatchesSingleRank) {
  auto r = RunTenax("launch --nproc-per-node 4 -- " +
                        Args(*dir_, "hsdp", 2, 20, "--set parallelism.data_parallel_replicate=2"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp_replicate 2 x dp_shard 2"), std::string::npos) << r.output;
  ExpectSameLosses(Losses(*dir_ / "hsdp/metrics.jsonl"), reference_);
}

// Megatron tensor parallelism with sequence parallelism, alone and with DDP replicas.
TEST_F(ParallelE2E, TensorParallelTwoMatchesSingleRank) {
  auto r =
      RunTenax("launch --nproc-per-node 2 -- " + Args(*dir_, "tp2", 8, 20,
                                                      "--set parallelism.tensor_parallel=2 "
                                                      "--set parallelism.data_parallel_shard=1"),
               dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pp 1 x tp 2"), std::string::npos) << r.output;
  ExpectSameLosses(Losses(*dir_ / "tp2/metrics.jsonl"), reference_);
}

// Float8 block matmuls (training.mixed_precision = "fp8") under FSDP and under tensor
// parallelism. Not the single rank's numbers bit for bit, even in float8: scales are per tensor
// as each rank sees it (a rank's own micro-batch of activations and output gradients; under TP
// its shard of each weight: finer than one scale, as accurate), so the runs stay within
// float8's rounding of the fp32 reference: measured at most 0.05% apart over the 20 steps
// (2026-12-05), bound 1%.
TEST_F(ParallelE2E, Fp8UnderFsdpAndTensorParallelStaysWithinFloat8Rounding) {
  for (const auto& [name, local_batch, layout] :
       {std::tuple{"fsdp_fp8", 4, ""},
        std::tuple{
            "tp_fp8", 8,
            "--set parallelism.tensor_parallel=2 --set parallelism.data_parallel_shard=1"}}) {
    SCOPED_TRACE(name);
    auto r = RunTenax("launch --nproc-per-node 2 -- " +
                          Args(*dir_, name, local_batch, 20,
                               std::string("--set training.mixed_precision=fp8 ") + layout),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("float8 block matmuls"), std::string::npos) << r.output;
    const std::vector<double> losses = Losses(*dir_ / (std::string(name) + "/metrics.jsonl"));
    ASSERT_EQ(losses.size(), reference_.size());
    bool parted = false;
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], reference_[i], 0.01 * reference_[i]) << "step " << i + 1;
      parted = parted || std::abs(losses[i] - reference_[i]) > kLossTolerance;
    }
    EXPECT_TRUE(parted) << "fp32's losses: were the float8 matmuls used?";
  }
}

TEST_F(ParallelE2E, TensorParallelTimesDdpMatchesSingleRankAndReshards) {
  auto r =
      RunTenax("launch --nproc-per-node 4 -- " + Args(*dir_, "tp2dp2", 4, 20,
                                                      "--set parallelism.tensor_parallel=2 "
                                                      "--set parallelism.data_parallel_shard=1 "
                                                      "--set parallelism.data_parallel_replicate=2 "
                                                      "--set training.stop_at=10"),
               dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp_replicate 2 x dp_shard 1 x pp 1 x tp 2"), std::string::npos)
      << r.output;
  ExpectSameLosses(Losses(*dir_ / "tp2dp2/metrics.jsonl"),
                   std::vector<double>(reference_.begin(), reference_.begin() + 10));
  // The TP x DP checkpoint resumes as FSDP 2 and matches the uninterrupted run.
  auto fsdp =
      RunTenax("launch --nproc-per-node 2 -- " +
                   Args(*dir_, "tp_to_fsdp", 4, 20,
                        "--set checkpoint.resume=" + *dir_ / "tp2dp2/checkpoints/step_00000010"),
               dir_->path());
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.output;
  ExpectSameLosses(Losses(*dir_ / "tp_to_fsdp/metrics.jsonl"),
                   std::vector<double>(reference_.begin() + 10, reference_.end()));
}

// Pipeline stages (2 layers over 2 ranks), 4 micro-batches, GPipe and 1F1B; then 1F1B with DDP
// replicas, whose step-10 checkpoint resumes on one rank.
TEST_F(ParallelE2E, PipelineSchedulesMatchSingleRank) {
  for (const std::string sch : {"gpipe", "1f1b"}) {
    auto r =
        RunTenax("launch --nproc-per-node 2 -- " + Args(*dir_, "pp_" + sch, 8, 20,
                                                        "--set parallelism.pipeline_parallel=2 "
                                                        "--set parallelism.data_parallel_shard=1 "
                                                        "--set parallelism.microbatches=4 "
                                                        "--set parallelism.pipeline_schedule=" +
                                                            sch),
                 dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("pp 2 x tp 1"), std::string::npos) << r.output;
    ExpectSameLosses(Losses(*dir_ / ("pp_" + sch + "/metrics.jsonl")), reference_);
  }
}

TEST_F(ParallelE2E, PipelineTimesDdpMatchesAndReshards) {
  auto r = RunTenax("launch --nproc-per-node 4 -- " +
                        Args(*dir_, "pp2dp2", 4, 20,
                             "--set parallelism.pipeline_parallel=2 "
                             "--set parallelism.data_parallel_shard=1 "
                             "--set parallelism.data_parallel_replicate=2 "
                             "--set parallelism.microbatches=2 --set training.stop_at=10"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectSameLosses(Losses(*dir_ / "pp2dp2/metrics.jsonl"),
                   std::vector<double>(reference_.begin(), reference_.begin() + 10));
  auto one = RunTenax(Args(*dir_, "pp_to_one", 8, 20,
                           "--set checkpoint.resume=" + *dir_ / "pp2dp2/checkpoints/step_00000010"),
                      dir_->path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ExpectSameLosses(Losses(*dir_ / "pp_to_one/metrics.jsonl"),
                   std::vector<double>(reference_.begin() + 10, reference_.end()));
}

// Interleaved 1F1B needs layers for p x v stages: its own 4-layer reference.
TEST_F(ParallelE2E, InterleavedPipelineMatchesSingleRank) {
  const std::string layers = "--set model.n_layers=4 ";
  auto single = RunTenax(Args(*dir_, "ref4", 8, 8, layers), dir_->path());
  ASSERT_EQ(single.exit_code, 0) << single.output;
  auto r = RunTenax("launch --nproc-per-node 2 -- " +
                        Args(*dir_, "pp_interleaved", 8, 8,
                             layers + "--set parallelism.pipeline_parallel=2 "
                                      "--set parallelism.data_parallel_shard=1 "
                                      "--set parallelism.microbatches=4 "
                                      "--set parallelism.virtual_stages=2 "
                                      "--set parallelism.pipeline_schedule=interleaved_1f1b"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectSameLosses(Losses(*dir_ / "pp_interleaved/metrics.jsonl"),
                   Losses(*dir_ / "ref4/metrics.jsonl"));
}

// The zero-bubble schedules against gpipe on the same two pipeline ranks and layers (four: a V of
// two chunks per rank), then inside 2D layouts: zbv over TP 2 and dualpipev under FSDP 2. The
// split backward reorders only the weight-gradient sums, so the losses agree within the suite's
// tolerance.
TEST_F(ParallelE2E, ZeroBubblePipelinesMatchGpipe) {
  const std::string common = "--set model.n_layers=4 --set parallelism.data_parallel_shard=1 ";
  auto run = [&](const std::string& name, int nproc, int local_batch, const std::string& flags) {
    auto r = RunTenax("launch --nproc-per-node " + std::to_string(nproc) + " -- " +
                          Args(*dir_, name, local_batch, 8, common + flags),
                      dir_->path());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return Losses(*dir_ / (name + "/metrics.jsonl"));
  };
  const std::string pp2 = "--set parallelism.pipeline_parallel=2 --set parallelism.microbatches=4 ";
  const std::vector<double> gpipe =
      run("zb_gpipe", 2, 8, pp2 + "--set parallelism.pipeline_schedule=gpipe");
  ASSERT_EQ(gpipe.size(), 8u);
  for (const char* schedule : {"zbv", "dualpipev"}) {
    SCOPED_TRACE(schedule);
    ExpectSameLosses(run(std::string("zb_") + schedule, 2, 8,
                         pp2 +
                             "--set parallelism.virtual_stages=2 "
                             "--set parallelism.pipeline_schedule=" +
                             schedule),
                     gpipe);
  }
  ExpectSameLosses(run("tp2_zbv", 4, 8,
                       pp2 + "--set parallelism.tensor_parallel=2 "
                             "--set parallelism.virtual_stages=2 "
                             "--set parallelism.pipeline_schedule=zbv"),
                   gpipe);
  ExpectSameLosses(run("fsdp2_dualpipev", 4, 4,
                       "--set parallelism.pipeline_parallel=2 --set parallelism.microbatches=4 "
                       "--set parallelism.data_parallel_shard=2 "
                       "--set parallelism.virtual_stages=2 "
                       "--set parallelism.pipeline_schedule=dualpipev"),
                   gpipe);
  // Too few micro-batches for the V: refused before training, with what to change.
  auto few = RunTenax(
      "launch --nproc-per-node 2 -- " + Args(*dir_, "zbv_few", 8, 2,
                                             common + "--set parallelism.pipeline_parallel=2 "
                                                      "--set parallelism.microbatches=2 "
                                                      "--set parallelism.virtual_stages=2 "
                                                      "--set parallelism.pipeline_schedule=zbv"),
      dir_->path());
  EXPECT_EQ(few.exit_code, 2) << few.output;
  EXPECT_NE(few.output.find("microbatches (2) < 2 x pipeline_parallel (2)"), std::string::npos)
      << few.output;
}

// The zero-bubble schedules with what changes a chunk's backward: recomputed blocks (the
// input-gradient pass recomputes them, the weight-gradient pass must not see stale ones) and an
// MoE model (router, experts and the load-balancing loss per micro-batch). Same losses as gpipe
// on the same layout (measured: bit for bit).
TEST_F(ParallelE2E, ZeroBubblePipelinesWithRecomputationAndExperts) {
  auto run = [&](const std::string& name, const std::string& flags) {
    auto r = RunTenax("launch --nproc-per-node 2 -- " +
                          Args(*dir_, name, 8, 6,
                               "--set model.n_layers=4 --set parallelism.data_parallel_shard=1 "
                               "--set parallelism.pipeline_parallel=2 "
                               "--set parallelism.microbatches=4 " +
                                   flags),
                      dir_->path());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return Losses(*dir_ / (name + "/metrics.jsonl"));
  };
  const std::string v = "--set parallelism.virtual_stages=2 --set parallelism.pipeline_schedule=";
  const std::vector<double> gpipe = run("ac_gpipe", "--set parallelism.pipeline_schedule=gpipe");
  ASSERT_EQ(gpipe.size(), 6u);
  ExpectSameLosses(run("ac_zbv", v + "zbv --set parallelism.activation_checkpoint=full"), gpipe);
  ExpectSameLosses(
      run("ac_dualpipev", v + "dualpipev --set parallelism.activation_checkpoint=selective"),
      gpipe);
  const std::string moe = "--set model.preset=debug-moe --set model.n_layers=4 ";
  const std::vector<double> moe_gpipe =
      run("moe_gpipe", moe + "--set parallelism.pipeline_schedule=gpipe");
  ASSERT_EQ(moe_gpipe.size(), 6u);
  ExpectSameLosses(run("moe_zbv", moe + v + "zbv"), moe_gpipe);
  ExpectSameLosses(run("moe_dualpipev", moe + v + "dualpipev"), moe_gpipe);
}

// 2D combinations on 4 ranks: FSDP over TP shards (with activation checkpointing inside the TP
// blocks), TP x PP, and FSDP over pipeline stages. Each matches the single-rank losses.
TEST_F(ParallelE2E, TwoDimensionalCombinationsMatchSingleRank) {
  struct Case {
    std::string name, flags, layout;
    int local_batch;
  };
  const std::vector<Case> cases = {
      {"fsdp2tp2",
       "--set parallelism.tensor_parallel=2 --set parallelism.data_parallel_shard=2 "
       "--set parallelism.activation_checkpoint=full",
       "dp_replicate 1 x dp_shard 2 x pp 1 x tp 2", 4},
      {"tp2pp2",
       "--set parallelism.tensor_parallel=2 --set parallelism.pipeline_parallel=2 "
       "--set parallelism.data_parallel_shard=1 --set parallelism.microbatches=2",
       "dp_replicate 1 x dp_shard 1 x pp 2 x tp 2", 8},
      {"fsdp2pp2",
       "--set parallelism.pipeline_parallel=2 --set parallelism.data_parallel_shard=2 "
       "--set parallelism.microbatches=2",
       "dp_replicate 1 x dp_shard 2 x pp 2 x tp 1", 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r =
        RunTenax("launch --nproc-per-node 4 -- " + Args(*dir_, c.name, c.local_batch, 20, c.flags),
                 dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(c.layout), std::string::npos) << r.output;
    ExpectSameLosses(Losses(*dir_ / (c.name + "/metrics.jsonl")), reference_);
  }
}

// 3D on 8 ranks: FSDP 2 x PP 2 x TP 2 (Llama 3 405B's recipe in miniature). Its step-10
// checkpoint (every rank's own pieces: FSDP slices of TP blocks of its stage's layers) resumes
// as TP 2 x PP 2 on 4 ranks, and the losses continue the single-rank run.
TEST_F(ParallelE2E, ThreeDimensionalLayoutMatchesAndReshards) {
  auto r = RunTenax("launch --nproc-per-node 8 -- " +
                        Args(*dir_, "3d", 4, 20,
                             "--set parallelism.tensor_parallel=2 "
                             "--set parallelism.pipeline_parallel=2 "
                             "--set parallelism.data_parallel_shard=2 "
                             "--set parallelism.microbatches=2 --set training.stop_at=10"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp_replicate 1 x dp_shard 2 x pp 2 x tp 2"), std::string::npos)
      << r.output;
  ExpectSameLosses(Losses(*dir_ / "3d/metrics.jsonl"),
                   std::vector<double>(reference_.begin(), reference_.begin() + 10));
  const std::string ckpt = *dir_ / "3d/checkpoints/step_00000010";
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_TRUE(
        fs::exists(ckpt + "/model-rank0000" + std::to_string(rank) + "-of-00008.safetensors"))
        << "rank " << rank << " wrote no shard";
  }
  auto tp_pp = RunTenax("launch --nproc-per-node 4 -- " +
                            Args(*dir_, "3d_to_tppp", 8, 20,
                                 "--set parallelism.tensor_parallel=2 "
                                 "--set parallelism.pipeline_parallel=2 "
                                 "--set parallelism.data_parallel_shard=1 "
                                 "--set parallelism.microbatches=2 --set checkpoint.resume=" +
                                     ckpt),
                        dir_->path());
  ASSERT_EQ(tp_pp.exit_code, 0) << tp_pp.output;
  ExpectSameLosses(Losses(*dir_ / "3d_to_tppp/metrics.jsonl"),
                   std::vector<double>(reference_.begin() + 10, reference_.end()));
}

// Save with FSDP 4, resume on one rank and as HSDP 2x2: the same losses as the uninterrupted
// single-rank run, and export-hf reads the sharded checkpoint.
TEST_F(ParallelE2E, ReshardingBetweenLayouts) {
  auto saved = RunTenax(
      "launch --nproc-per-node 4 -- " + Args(*dir_, "save4", 2, 20, "--set training.stop_at=10"),
      dir_->path());
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const std::string ckpt = *dir_ / "save4/checkpoints/step_00000010";
  auto one =
      RunTenax(Args(*dir_, "resume1", 8, 20, "--set checkpoint.resume=" + ckpt), dir_->path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto hsdp =
      RunTenax("launch --nproc-per-node 4 -- " + Args(*dir_, "resume_hsdp", 2, 20,
                                                      "--set parallelism.data_parallel_replicate=2 "
                                                      "--set checkpoint.resume=" +
                                                          ckpt),
               dir_->path());
  ASSERT_EQ(hsdp.exit_code, 0) << hsdp.output;
  const std::vector<double> tail(reference_.begin() + 10, reference_.end());
  ExpectSameLosses(Losses(*dir_ / "resume1/metrics.jsonl"), tail);
  ExpectSameLosses(Losses(*dir_ / "resume_hsdp/metrics.jsonl"), tail);
  auto hf = RunTenax("export-hf " + ckpt + " --out " + *dir_ / "hf", dir_->path());
  EXPECT_EQ(hf.exit_code, 0) << hf.output;
}

int64_t StateBytes(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m,
                         std::regex(R"(optimizer state per rank: [0-9.]+ GiB \((\d+) bytes\))"))) {
    return -1;
  }
  return std::stoll(m[1]);
}

// FSDP: parameters + gradients + optimizer state per rank shrink as 1 / shard degree (exactly,
// up to the padding of the flat vector to a multiple of the degree).
TEST_F(ParallelE2E, FsdpStateBytesShrinkWithShardDegree) {
  const int64_t one = StateBytes(RunTenax(Args(*dir_, "m1", 8, 1), dir_->path()).output);
  ASSERT_GT(one, 0);
  for (int n : {2, 4}) {
    auto r = RunTenax("launch --nproc-per-node " + std::to_string(n) + " -- " +
                          Args(*dir_, "m" + std::to_string(n), 8 / n, 1),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const int64_t bytes = StateBytes(r.output);
    EXPECT_GE(bytes * n, one) << n;
    EXPECT_LE(bytes * n, one + 16 * n) << n;  // at most n - 1 padding floats, x4 tensors
  }
}

TEST_F(ParallelE2E, ImpossibleLayoutsNameEveryFactor) {
  auto product =
      RunTenax("launch --nproc-per-node 4 -- " + Args(*dir_, "bad1", 2, 2,
                                                      "--set parallelism.data_parallel_replicate=3 "
                                                      "--set parallelism.data_parallel_shard=2"),
               dir_->path());
  EXPECT_EQ(product.exit_code, 2) << product.output;
  EXPECT_NE(product.output.find("data_parallel_replicate(3) * data_parallel_shard(2) * "
                                "tensor_parallel(1) * pipeline_parallel(1) = 6 != world size 4"),
            std::string::npos)
      << product.output;
  auto heads =
      RunTenax("launch --nproc-per-node 2 -- " + Args(*dir_, "bad2", 4, 2,
                                                      "--set parallelism.tensor_parallel=2 "
                                                      "--set parallelism.pipeline_parallel=1 "
                                                      "--set model.n_kv_heads=1"),
               dir_->path());
  EXPECT_EQ(heads.exit_code, 2) << heads.output;
  EXPECT_NE(heads.output.find("model.n_kv_heads (1) is not divisible by tensor_parallel (2)"),
            std::string::npos)
      << heads.output;
  auto layers = RunTenax(Args(*dir_, "bad3", 2, 2,
                              "--set parallelism.pipeline_parallel=1 "
                              "--set parallelism.virtual_stages=3 "
                              "--set parallelism.pipeline_schedule=interleaved_1f1b"),
                         dir_->path());
  EXPECT_EQ(layers.exit_code, 2) << layers.output;
  EXPECT_NE(layers.output.find("model.n_layers (2) is not divisible by pipeline_parallel (1) * "
                               "virtual_stages (3) = 3"),
            std::string::npos)
      << layers.output;
}

// A rank killed mid-run: the launcher stops the others and exits non-zero within seconds,
// naming the rank and the signal (--max-restarts 0: by default it would restart).
TEST_F(ParallelE2E, DeadRankEndsTheJobNamingIt) {
  const std::string log = *dir_ / "dead.log";
  const std::string cmd = "'" + TenaxBinary() + "' launch --nproc-per-node 3 --max-restarts 0 -- " +
                          Args(*dir_, "dead", 2, 100000, "--set checkpoint.enable=false") + " > " +
                          log + " 2>&1";
  pid_t launcher = ::fork();
  if (launcher == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // This run's processes only: their command lines name this test's own dump folder (another
  // checkout's suite may be running the same test on this host at the same time).
  std::string folder;  // as a regular expression: each '.' literal
  for (char c : dir_->path()) folder += c == '.' ? std::string("[.]") : std::string(1, c);
  const std::string pgrep = "pgrep -f 'job[.]dump_folder=" + folder + " --set job[.]name=dead'";
  // Wait until training runs, then SIGKILL rank 1 (slot 1: the launcher assigns ranks to slots in
  // order at the first start; found by its TENAX_SLOT=1 environment).
  std::string victim;
  for (int i = 0; i < 300 && victim.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (ReadFile(log).find("step 2/") == std::string::npos) continue;
    victim = RunCommand("for p in $(" + pgrep +
                        "); do "
                        "tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx TENAX_SLOT=1 && "
                        "echo $p; done | head -1")
                 .output;
  }
  ASSERT_FALSE(victim.empty()) << ReadFile(log);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(std::stoi(victim), SIGKILL);
  int status = 0;
  for (int i = 0; i < 300; ++i) {
    if (::waitpid(launcher, &status, WNOHANG) == launcher) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << "launcher did not exit; " << ReadFile(log);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_LT(seconds, 15.0);
  const std::string out = ReadFile(log);
  EXPECT_NE(out.find("rank 1 was killed by signal 9"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(pgrep + " || true").output, "") << "ranks left behind";
}

}  // namespace
}  // namespace tenax::testing
