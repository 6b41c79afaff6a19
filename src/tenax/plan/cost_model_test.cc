#include "tenax/plan/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }

Workload Load(const std::string& preset, int64_t seq, int64_t seqs, Kernels k = Kernels::kEager) {
  int64_t ignored = 0;
  return *MakeWorkload(*LoadPlanModel(preset, &ignored), seq, seqs * seq, k);
}

TEST(CostModel, GemmEfficiencyByHand) {
  // M = N = K = 4096, bf16: intensity = 2 M N K / (2 (MK + KN + MN)) = 4096 / 3 FLOP/byte.
  const double i = 4096.0 / 3.0;
  EXPECT_DOUBLE_EQ(GemmEfficiency(4096, 4096, 4096, 2, 0.8, 150), 0.8 * i / (i + 150));
  // Smaller GEMMs reach less of the peak; fp8 (1 byte) doubles the intensity.
  EXPECT_LT(GemmEfficiency(256, 256, 256, 2, 0.8, 150),
            GemmEfficiency(4096, 4096, 4096, 2, 0.8, 150));
  EXPECT_GT(GemmEfficiency(512, 512, 512, 1, 0.8, 150), GemmEfficiency(512, 512, 512, 2, 0.8, 150));
}

TEST(CostModel, RingCollectivesPickTheLink) {
  const HardwareProfile hw = H100();
  // 8 ranks inside a node: 7 hops of NVLink latency + 7/8 of the bytes at 80% of 450 GB/s.
  EXPECT_DOUBLE_EQ(RingCollectiveTime(hw, 1, 8, 1e9), 7 * 5e-6 + 7.0 / 8 * 1e9 / (450e9 * 0.8));
  // The same group with stride 2 spans 16 GPUs: two nodes, so the network (50 GB/s, 10 us).
  EXPECT_DOUBLE_EQ(RingCollectiveTime(hw, 2, 8, 1e9), 7 * 10e-6 + 7.0 / 8 * 1e9 / (50e9 * 0.8));
  EXPECT_EQ(RingCollectiveTime(hw, 1, 1, 1e9), 0);
}

TEST(CostModel, AttentionByHand) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-8b", 8192, 8);
  const MicroBatchCost c = EstimateMicroBatch(w, hw, 1, 1, 1, Recompute::kNone, false);
  // Causal: 8192 queries x 4096 keys on average x 2 matmuls x 2 FLOPs x head_dim x 32 heads,
  // forward; backward 2.5 x that.
  const double fwd = 2.0 * 2.0 * 8192 * 4096 * 128 * 32 / (hw.peak_bf16 * hw.eff.attention);
  EXPECT_NEAR(c.layer.attention, 3.5 * fwd, 1e-12);
  EXPECT_EQ(c.layer.tp_comm, 0);
  EXPECT_EQ(c.layer.cp_comm, 0);
  EXPECT_EQ(c.layer.recompute, 0);
}

TEST(CostModel, RecomputeCostsTimeInOrder) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-8b", 8192, 8);
  const double none = EstimateMicroBatch(w, hw, 1, 1, 1, Recompute::kNone, false).layer.total();
  const double sel = EstimateMicroBatch(w, hw, 1, 1, 1, Recompute::kSelective, false).layer.total();
  const double full = EstimateMicroBatch(w, hw, 1, 1, 1, Recompute::kFull, false).layer.total();
  EXPECT_LT(none, sel);
  EXPECT_LT(sel, full);
  // Full recomputation redoes the forward: about a third more than none.
  EXPECT_NEAR(full / none, 4.0 / 3.0, 0.05);
}

TEST(CostModel, FusedKernelsAndFp8AreFaster) {
  const HardwareProfile hw = H100();
  const Workload eager = Load("llama3-8b", 8192, 8, Kernels::kEager);
  const Workload fused = Load("llama3-8b", 8192, 8, Kernels::kFused);
  const LayerTime e = EstimateMicroBatch(eager, hw, 1, 1, 2, Recompute::kNone, false).layer;
  const LayerTime f = EstimateMicroBatch(fused, hw, 1, 1, 2, Recompute::kNone, false).layer;
  EXPECT_LT(f.elementwise, e.elementwise / 3);
  EXPECT_EQ(f.matmul, e.matmul);
  const LayerTime f8 = EstimateMicroBatch(eager, hw, 1, 1, 2, Recompute::kNone, true).layer;
  EXPECT_LT(f8.matmul, e.matmul);
  EXPECT_GT(f8.elementwise, e.elementwise);  // the casts
}

TEST(CostModel, TensorParallelTrafficCrossesNodesBeyondEight) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-405b", 8192, 64);
  const LayerTime t8 = EstimateMicroBatch(w, hw, 8, 1, 1, Recompute::kNone, false).layer;
  const LayerTime t16 = EstimateMicroBatch(w, hw, 16, 1, 1, Recompute::kNone, false).layer;
  // 8 collectives of the 8192 x 16384 bf16 activations, 7/8 of them moved over NVLink.
  const double one = 7 * 5e-6 + 7.0 / 8 * 8192.0 * 16384 * 2 / (450e9 * 0.8);
  EXPECT_NEAR(t8.tp_comm, 8 * one * (1 - hw.eff.tp_overlap), 1e-12);
  EXPECT_GT(t16.tp_comm, 4 * t8.tp_comm);
}

TEST(CostModel, StepAddsUpAndThroughputFollows) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-405b", 8192, 2048, Kernels::kFused);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.vpp = 4;
  l.dp_shard = 64;
  l.micro_batch = 1;
  l.micro_batches = 32;
  l.recompute = Recompute::kSelective;
  l.reshard = false;
  const StepTime s = EstimateStepTime(w, hw, l);
  EXPECT_NEAR(
      s.step,
      s.compute + s.bubble + s.pp_comm + s.dp_exposed + s.dp_copies + s.interference + s.optimizer,
      1e-9);
  EXPECT_NEAR(s.compute, 32 * s.stage, 1e-9);
  EXPECT_NEAR(s.bubble, 15.0 / 4.0 * s.stage, 1e-9);  // (pp - 1) / v stage-times
  EXPECT_DOUBLE_EQ(s.stage_load, 8);                  // 126 layers: 4 chunks of 2 per rank
  EXPECT_NEAR(s.tokens_per_s_per_gpu * 8192 * s.step, 2048.0 * 8192, 1e-3);
  EXPECT_NEAR(s.tflops_per_gpu, s.tokens_per_s_per_gpu * w.flops_per_token / 1e12, 1e-9);
  EXPECT_NEAR(s.mfu, s.tflops_per_gpu * 1e12 / hw.peak_bf16, 1e-12);
  // Interleaving shrinks the bubble.
  l.vpp = 1;
  EXPECT_GT(EstimateStepTime(w, hw, l).bubble, 3 * s.bubble);
}

TEST(CostModel, DataParallelTrafficGrowsWithReshardingAndIsPartlyHidden) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-8b", 8192, 128);
  Layout l;
  l.dp_shard = 64;
  l.micro_batch = 1;
  l.micro_batches = 2;
  l.recompute = Recompute::kSelective;
  l.reshard = false;
  const StepTime z2 = EstimateStepTime(w, hw, l);
  l.reshard = true;
  const StepTime z3 = EstimateStepTime(w, hw, l);
  // ZeRO-3 gathers twice per micro-batch and reduce-scatters per micro-batch.
  EXPECT_GT(z3.dp_comm, 2 * z2.dp_comm);
  EXPECT_GE(z2.dp_exposed, z2.dp_comm * (1 - hw.eff.dp_overlap) - 1e-12);
  EXPECT_LT(z2.dp_exposed, z2.dp_comm);
}

}  // namespace
}  // namespace tenax::plan
