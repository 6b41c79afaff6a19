// Mixture of experts through `tenax launch` on CPU ranks (Gloo), as a user runs it: debug-moe
// (8 experts, 2 per token, load-balancing loss on) with expert parallelism 2 and 4, alone and
// with FSDP (and activation checkpointing), pipeline and tensor parallelism, against the
// single-rank run with the same global batch; checkpoints saved under one expert-parallel degree
// resumed under another and on one rank; the sigmoid router's balancing biases across pipeline
// stages and a resume; routing metrics in metrics.jsonl and TensorBoard; layouts that cannot work.
//
// Tolerance: the ranks compute the single rank's math (the balancing loss uses the global
// batch's routing counts, so it does not depend on the layout) with sums in another order. We
// observed at most 5.4e-7 in the loss over 20 AdamW steps (EP 2: 3.6e-7, EP 4: 5.4e-7, EP 2 x
// FSDP 4: 5.4e-7, EP 2 x PP 2: 3.6e-7, EP 2 x TP 2: 4.8e-7, resumes: 4.8e-7), 1.4e-7 relative
// in the gradient norm and 1.2e-7 in the aux loss. The dense layouts' 1e-4 on the loss
// (tests/parallel_e2e_test.cc) and 1e-5 relative on the gradient norm and absolute on the aux
// loss keep a wide margin, while a wrong expert, a missing token or a rank-local balancing loss
// moves them by 1e-3 or more within a step or two.
// The pipeline runs GPipe with one micro-batch: the balancing loss is defined per micro-batch
// (the tokens one forward pass routes), so a pipeline with m micro-batches matches a single rank
// accumulating the same m micro-batches, not one that takes the batch whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "test_util.h"

namespace tenax::testing {
namespace {

namespace fs = std::filesystem;
constexpr double kLossTolerance = 1e-4;
constexpr double kGradNormRelTolerance = 1e-5;
constexpr double kAuxTolerance = 1e-5;

std::string Args(const TempDir& dir, const std::string& name, int local_batch,
                 const std::string& extra = "") {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-moe "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 "
         "--set metrics.eval_interval=10 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=10 --set training.steps=20 --set job.dump_folder=" +
         dir.path() + " --set job.name=" + name +
         " --set training.local_batch_size=" + std::to_string(local_batch) + " " + extra;
}

std::string Launch(int ranks, const std::string& args) {
  return "launch --nproc-per-node " + std::to_string(ranks) + " -- " + args;
}

struct Step {
  double loss = 0, grad_norm = 0, aux = 0;
};
std::map<int64_t, Step> Steps(const std::string& metrics) {
  std::map<int64_t, Step> out;
  for (const auto& j : ReadJsonl(metrics)) {
    if (!j.contains("loss")) continue;
    out[j["step"].get<int64_t>()] = {j["loss"].get<double>(), j["grad_norm"].get<double>(),
                                     j.value("moe_aux_loss", 0.0)};
  }
  return out;
}

// Every step of `got` against the same step of `want`; `count` steps expected.
void ExpectSameSteps(const std::map<int64_t, Step>& want, const std::map<int64_t, Step>& got,
                     size_t count) {
  ASSERT_EQ(got.size(), count);
  for (const auto& [step, g] : got) {
    ASSERT_TRUE(want.count(step)) << "step " << step;
    const Step& w = want.at(step);
    EXPECT_NEAR(g.loss, w.loss, kLossTolerance) << "step " << step;
    EXPECT_NEAR(g.grad_norm, w.grad_norm, kGradNormRelTolerance * w.grad_norm) << "step " << step;
    EXPECT_NEAR(g.aux, w.aux, kAuxTolerance) << "step " << step;
  }
}

class MoeE2E : public ::testing::Test {
 protected:
  // The single-rank references: global batch 8, 20 steps; softmax router (the preset) and the
  // sigmoid router with balancing biases and a shared expert.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax(Args(*dir_, "single", 8), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    reference_ = Steps(*dir_ / "single/metrics.jsonl");
    ASSERT_EQ(reference_.size(), 20u);
    auto s = RunTenax(Args(*dir_, "sigmoid", 8, kSigmoid), dir_->path());
    ASSERT_EQ(s.exit_code, 0) << s.output;
    sigmoid_ = Steps(*dir_ / "sigmoid/metrics.jsonl");
    ASSERT_EQ(sigmoid_.size(), 20u);
  }
  static void TearDownTestSuite() { delete dir_; }
  static constexpr const char* kSigmoid =
      "--set model.moe_router=sigmoid --set model.moe_bias_update_rate=0.01 "
      "--set model.n_shared_experts=1 ";
  static TempDir* dir_;
  static std::map<int64_t, Step> reference_, sigmoid_;
};
TempDir* MoeE2E::dir_ = nullptr;
std::map<int64_t, Step> MoeE2E::reference_, MoeE2E::sigmoid_;

TEST_F(MoeE2E, ExpertParallelTwoMatchesSingleRank) {
  auto r = RunTenax(Launch(2, Args(*dir_, "ep2", 4, "--set parallelism.expert_parallel=2")),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp_shard 2 x pp 1 x tp 1 (expert_parallel 2 within dp_shard)"),
            std::string::npos)
      << r.output;
  ExpectSameSteps(reference_, Steps(*dir_ / "ep2/metrics.jsonl"), 20);
}

// EP 4 (2 experts per rank) to step 10; its checkpoint (experts by global index) resumes under
// EP 2 and on one rank, continuing the single-rank losses.
TEST_F(MoeE2E, ExpertParallelFourMatchesAndResumesUnderOtherDegrees) {
  auto r =
      RunTenax(Launch(4, Args(*dir_, "ep4", 2,
                              "--set parallelism.expert_parallel=4 --set training.stop_at=10")),
               dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectSameSteps(reference_, Steps(*dir_ / "ep4/metrics.jsonl"), 10);
  const std::string ckpt = *dir_ / "ep4/checkpoints/step_00000010";
  auto ep2 = RunTenax(
      Launch(2, Args(*dir_, "ep4_to_ep2", 4,
                     "--set parallelism.expert_parallel=2 --set checkpoint.resume=" + ckpt)),
      dir_->path());
  ASSERT_EQ(ep2.exit_code, 0) << ep2.output;
  ExpectSameSteps(reference_, Steps(*dir_ / "ep4_to_ep2/metrics.jsonl"), 10);
  auto one =
      RunTenax(Args(*dir_, "ep4_to_one", 8, "--set checkpoint.resume=" + ckpt), dir_->path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ExpectSameSteps(reference_, Steps(*dir_ / "ep4_to_one/metrics.jsonl"), 10);
}

// Expert parallelism composed with the other axes on 4 ranks.
TEST_F(MoeE2E, ExpertParallelWithFsdpPipelineAndTensorParallelMatches) {
  struct Case {
    std::string name, flags, layout;
    int local_batch;
  };
  const std::vector<Case> cases = {
      // Experts FSDP-sharded over the 2 shard ranks holding the same experts; blocks recomputed.
      {"ep2_fsdp4_ac",
       "--set parallelism.expert_parallel=2 --set parallelism.activation_checkpoint=full",
       "dp_replicate 1 x dp_shard 4 x pp 1 x tp 1 (expert_parallel 2", 2},
      {"ep2_pp2",
       "--set parallelism.expert_parallel=2 --set parallelism.pipeline_parallel=2 "
       "--set parallelism.pipeline_schedule=gpipe --set parallelism.microbatches=1",
       "dp_replicate 1 x dp_shard 2 x pp 2 x tp 1 (expert_parallel 2", 4},
      {"ep2_tp2", "--set parallelism.expert_parallel=2 --set parallelism.tensor_parallel=2",
       "dp_replicate 1 x dp_shard 2 x pp 1 x tp 2 (expert_parallel 2", 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = RunTenax(Launch(4, Args(*dir_, c.name, c.local_batch, c.flags)), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(c.layout), std::string::npos) << r.output;
    ExpectSameSteps(reference_, Steps(*dir_ / (c.name + "/metrics.jsonl")), 20);
  }
}

// The sigmoid router's biases move every step; under EP 2 x PP 2 each stage holds one layer's,
// and the checkpoint must gather both (train_state.json) so that one rank resumes exactly.
TEST_F(MoeE2E, SigmoidRouterBiasesSurviveStagesAndResume) {
  auto r = RunTenax(
      Launch(4,
             Args(*dir_, "sig_ep2_pp2", 4,
                  std::string(kSigmoid) +
                      "--set parallelism.expert_parallel=2 --set parallelism.pipeline_parallel=2 "
                      "--set parallelism.pipeline_schedule=gpipe "
                      "--set parallelism.microbatches=1 --set training.stop_at=10")),
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectSameSteps(sigmoid_, Steps(*dir_ / "sig_ep2_pp2/metrics.jsonl"), 10);
  const std::string ckpt = *dir_ / "sig_ep2_pp2/checkpoints/step_00000010";
  const auto state = nlohmann::json::parse(ReadFile(ckpt + "/train_state.json"));
  const auto single =
      nlohmann::json::parse(ReadFile(*dir_ / "sigmoid/checkpoints/step_00000010/train_state.json"));
  ASSERT_TRUE(state.contains("moe_expert_bias")) << state.dump();
  EXPECT_EQ(state["moe_expert_bias"], single["moe_expert_bias"]);
  double moved = 0;
  for (const auto& row : state["moe_expert_bias"]) {
    for (const auto& b : row) moved += std::abs(b.get<double>());
  }
  EXPECT_GT(moved, 0.0) << "the biases never moved";
  auto one = RunTenax(
      Args(*dir_, "sig_to_one", 8, std::string(kSigmoid) + "--set checkpoint.resume=" + ckpt),
      dir_->path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ExpectSameSteps(sigmoid_, Steps(*dir_ / "sig_to_one/metrics.jsonl"), 10);
}

// Routing statistics per step: every token counted once per chosen expert (8 x 32 tokens x 2
// experts = 512 per layer), the imbalance is max / mean of those counts, and TensorBoard has them.
TEST_F(MoeE2E, RoutingMetricsInJsonlAndTensorBoard) {
  int rows = 0;
  for (const auto& j : ReadJsonl(*dir_ / "single/metrics.jsonl")) {
    if (!j.contains("loss")) continue;
    ++rows;
    ASSERT_TRUE(j.contains("moe_expert_tokens")) << j;
    for (const char* layer : {"0", "1"}) {
      const auto tokens = j["moe_expert_tokens"][layer].get<std::vector<double>>();
      ASSERT_EQ(tokens.size(), 8u);
      double sum = 0, most = 0;
      for (double t : tokens) {
        sum += t;
        most = std::max(most, t);
      }
      EXPECT_EQ(sum, 512.0);
      EXPECT_DOUBLE_EQ(j["moe_imbalance"][layer].get<double>(), most / (sum / 8));
      EXPECT_GE(j["moe_layer_aux_loss"][layer].get<double>(), 1.0 - 1e-6);  // 1 at balance
      EXPECT_EQ(j["moe_remote_rows"][layer].get<double>(), 0.0);  // one rank: nothing leaves
    }
    EXPECT_GT(j["moe_max_imbalance"].get<double>(), 1.0);
  }
  EXPECT_EQ(rows, 20);
  // With expert parallelism some rows do leave their rank.
  const auto ep2 = ReadJsonl(*dir_ / "ep2/metrics.jsonl");
  if (!ep2.empty()) EXPECT_GT(ep2.front()["moe_remote_rows"]["0"].get<double>(), 0.0);

  std::string events;
  for (const auto& e : fs::directory_iterator(*dir_ / "single/tb")) events = e.path().string();
  ASSERT_FALSE(events.empty());
  auto dump = RunCommand(Python() + " " + SourceDir() + "/tests/tools/read_tfevents.py " + events);
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  std::map<std::string, int> tags;
  std::istringstream lines(dump.output);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("tag")) ++tags[j["tag"].get<std::string>()];
  }
  for (const char* tag : {"moe/aux_loss", "moe/max_imbalance", "moe/layer_1/imbalance",
                          "moe/layer_0/aux_loss", "moe/layer_1/expert_7_tokens"}) {
    EXPECT_EQ(tags[tag], 20) << tag;
  }
}

// Layouts that cannot hold the experts stop before any work (exit 2), naming every factor.
TEST_F(MoeE2E, ImpossibleExpertLayoutsNameEveryFactor) {
  auto shard = RunTenax(
      Launch(2, Args(*dir_, "bad_ep", 4,
                     "--set parallelism.expert_parallel=4 --set parallelism.tensor_parallel=2")),
      dir_->path());
  EXPECT_EQ(shard.exit_code, 2) << shard.output;
  EXPECT_NE(shard.output.find("data_parallel_shard (1) is not divisible by expert_parallel (4): "
                              "expert parallelism borrows its ranks from data_parallel_shard "
                              "(world 2 = data_parallel_replicate(1) * data_parallel_shard(1) * "
                              "pipeline_parallel(1) * tensor_parallel(2))"),
            std::string::npos)
      << shard.output;
  auto experts =
      RunTenax(Launch(2, Args(*dir_, "bad_experts", 4,
                              "--set parallelism.expert_parallel=2 "
                              "--set model.n_experts=3 --set model.n_experts_per_token=1")),
               dir_->path());
  EXPECT_EQ(experts.exit_code, 2) << experts.output;
  EXPECT_NE(experts.output.find("model.n_experts (3) is not divisible by expert_parallel (2)"),
            std::string::npos)
      << experts.output;
  auto dense = RunTenax(
      Args(*dir_, "bad_dense", 8, "--set model.preset=debug-tiny --set model.moe_router=sigmoid"),
      dir_->path());
  EXPECT_EQ(dense.exit_code, 2) << dense.output;
  EXPECT_NE(dense.output.find("model.moe_router is set but model.n_experts is 0"),
            std::string::npos)
      << dense.output;
}

}  // namespace
}  // namespace tenax::testing
