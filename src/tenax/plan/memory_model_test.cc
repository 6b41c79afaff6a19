#include "tenax/plan/memory_model.h"

#include <gtest/gtest.h>

#include "tenax/plan/testing.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }

Workload Load(const std::string& preset, int64_t seq, int64_t seqs) {
  int64_t ignored = 0;
  return *MakeWorkload(*LoadPlanModel(preset, &ignored), seq, seqs * seq);
}

TEST(MemoryModel, ActivationBytesByHand) {
  // Llama 3 8B on one rank: h = q = 4096, kv = 1024, f = 14336, 32 heads.
  const Workload w = Load("llama3-8b", 8192, 8);
  // none: 8h + 4q + 4kv + 8f + 4 x heads (logsumexp) + 8 (norm rstd)
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 1, Recompute::kNone),
                   8 * 4096 + 4 * 4096 + 4 * 1024 + 8 * 14336 + 4 * 32 + 8);  // 168,072
  // Megatron's selective drops the attention core's state: flash's logsumexp.
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 1, Recompute::kSelective),
                   8 * 4096 + 4 * 4096 + 4 * 1024 + 8 * 14336 + 8);
  // torchtitan's op policy: input 2h, q 2q, v 2kv, attention out 2q, w1 out 2f, w2 out 2h, lse.
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 1, Recompute::kOp),
                   2 * 4096 + 2 * 4096 + 2 * 1024 + 2 * 4096 + 2 * 14336 + 2 * 4096 + 4 * 32);
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 1, Recompute::kFull), 2 * 4096);
  // Every second layer recomputed: the mean of none and full.
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 1, Recompute::kAlternate),
                   (ActivationBytesPerToken(w, 1, Recompute::kNone) + 2 * 4096) / 2);
  // 405B at tp 8 with sequence parallelism: every width shards by 8 (kv: one head of 128).
  const Workload big = Load("llama3-405b", 8192, 8);
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(big, 8, Recompute::kNone),
                   8 * 2048 + 4 * 2048 + 4 * 128 + 8 * 6656 + 4 * 16 + 8);
}

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
// section 4: a GPT layer with dropout and materialized attention saves
// s b h (10 + 24 / t + 5 a s / (h t)) bytes with tensor parallelism t, s b h (34 / t + 5 a s / (h
// t)) with sequence parallelism, and s b h 34 / t with selective recomputation. The planner's count
// adds only the norms' fp32 statistics (8 bytes per token).
TEST(MemoryModel, ReproducesKorthikantiFormulas) {
  ModelSpec m;
  m.name = "gpt-22b";
  m.n_layers = 48;
  m.dim = 6144;
  m.n_heads = 64;
  m.n_kv_heads = 64;
  m.ffn_hidden_dim = 4 * 6144;
  m.vocab_size = 51200;
  const Architecture gpt = {false, true, true, true};
  Software sw;
  sw.attention = AttentionKind::kMaterialized;
  sw.dropout = 0.1;
  sw.sequence_parallel = false;
  const double s = 2048, h = 6144, a = 64, t = 8;
  Workload w = *MakeWorkload(m, gpt, sw, 2048, 8 * 2048);
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 8, Recompute::kNone),
                   h * (10 + 24 / t + 5 * a * s / (h * t)) + 8);
  w.sw.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 8, Recompute::kNone),
                   h * (34 / t + 5 * a * s / (h * t)) + 8);
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 8, Recompute::kSelective), h * 34 / t + 8);
  EXPECT_DOUBLE_EQ(ActivationBytesPerToken(w, 8, Recompute::kFull), 2 * h / t);
}

TEST(MemoryModel, FsdpLayoutByHand) {
  // torchtitan's 8B run: 8 GPUs, FSDP (ZeRO-3), micro-batch 2 x 8192 tokens, selective recompute.
  int64_t seq = 0;
  auto w = *MakeWorkload(*LoadPlanModel("llama3-8b", &seq), 8192, 16 * 8192);
  Layout l;
  l.dp_shard = 8;
  l.micro_batch = 2;
  l.recompute = Recompute::kOp;
  const HardwareProfile hw = H100();
  const MemoryBreakdown m = EstimateMemory(w, hw, l);
  const double layer = 4096.0 * (2 * 4096 + 2 * 1024 + 3 * 14336) + 2 * 4096;
  const double vocab = 128256.0 * 4096;
  const double params = 32 * layer + 2 * vocab + 4096;
  EXPECT_DOUBLE_EQ(params, 8030261248.0);  // Llama 3 8B's published parameter count
  EXPECT_DOUBLE_EQ(m.optimizer, 12 * params / 8);
  const double window = 2 * vocab;  // the output projection is the largest FSDP unit
  EXPECT_DOUBLE_EQ(m.params, 2 * window);
  EXPECT_DOUBLE_EQ(m.grads, 4 * params / 8 + 4 * window);
  const double tokens = 16384;
  EXPECT_DOUBLE_EQ(m.activations, 32 * ActivationBytesPerToken(w, 1, Recompute::kOp) * tokens);
  EXPECT_DOUBLE_EQ(m.logits, tokens * 128256 * 10);
  EXPECT_DOUBLE_EQ(m.workspace, ActivationBytesPerToken(w, 1, Recompute::kNone) * tokens);
  EXPECT_DOUBLE_EQ(m.reserved, hw.reserved_bytes);
  EXPECT_STREQ(m.stage, "only");
  // torchtitan measured 82.4 GiB on a 96 GB part (allocator peak, fragmentation included).
  EXPECT_GT(m.total() / kGiB, 70);
  EXPECT_LT(m.total() / kGiB, 85);
}

TEST(MemoryModel, ContextParallelRanksJoinTheShards) {
  // torchtitan shards FSDP over dp_shard x cp (its dp_shard_cp mesh; cp alone turns FSDP on), as
  // Megatron-LM's distributed optimizer does over its data-parallel group with context parallel.
  int64_t seq = 0;
  auto w = *MakeWorkload(*LoadPlanModel("llama3-8b", &seq), 131072, 2 * 131072);
  Layout l;
  l.cp = 4;
  l.dp_shard = 2;
  l.recompute = Recompute::kFull;
  const HardwareProfile hw = H100();
  const double params = 8030261248.0;
  EXPECT_EQ(l.shard(), 8);
  EXPECT_DOUBLE_EQ(EstimateMemory(w, hw, l).optimizer, 12 * params / 8);
  l.dp_shard = 1;
  l.dp_replicate = 2;  // HSDP: replicas of a shard group of the 4 CP ranks
  EXPECT_EQ(l.shard(), 4);
  EXPECT_DOUBLE_EQ(EstimateMemory(w, hw, l).optimizer, 12 * params / 4);
  l.cp = 1;  // plain DDP: nothing sharded
  EXPECT_EQ(l.shard(), 1);
  EXPECT_DOUBLE_EQ(EstimateMemory(w, hw, l).optimizer, 12 * params);
}

TEST(MemoryModel, PipelineSchedulesHoldMicroBatchesInFlight) {
  int64_t seq = 0;
  auto w = *MakeWorkload(*LoadPlanModel("llama3-405b", &seq), 8192, 2048 * 8192);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.dp_shard = 64;
  l.micro_batches = 32;
  l.recompute = Recompute::kSelective;
  const HardwareProfile hw = H100();
  // 1F1B: the first stage holds pp micro-batches of its ceil(126 / 16) = 8 layers.
  MemoryBreakdown m = EstimateMemory(w, hw, l);
  EXPECT_EQ(m.inflight_sets, 16 * 8);
  EXPECT_STREQ(m.stage, "first");
  // Interleaved, v = 4: rank 0 holds (v + 1) pp - 1 = 79 chunks of ceil(126 / 64) = 2 layers.
  l.vpp = 4;
  m = EstimateMemory(w, hw, l);
  EXPECT_EQ(m.inflight_sets, 79 * 2);
  // Fewer micro-batches than the warm-up needs: all of them are in flight.
  l.micro_batches = 16;
  m = EstimateMemory(w, hw, l);
  EXPECT_EQ(m.inflight_sets, 16 * 4 * 2);
}

TEST(MemoryModel, UnevenSplitMovesTheFirstRanksLayers) {
  const Workload w = Load("llama3-405b", 8192, 2048);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.dp_shard = 64;
  l.micro_batches = 32;
  l.recompute = Recompute::kOp;
  l.first_layers = 7;
  l.last_layers = 7;
  const MemoryBreakdown m = EstimateMemory(w, H100(), l);
  // First rank: 16 micro-batches of 7 layers; the second: 15 of ceil(112 / 14) = 8 layers.
  EXPECT_EQ(m.inflight_sets, 16 * 8 - 8);
  EXPECT_STREQ(m.stage, "second");
  EXPECT_EQ(m.layers_held, 8);
}

TEST(MemoryModel, MoreRecomputeLessMemoryMoreShardsLessState) {
  int64_t seq = 0;
  auto w = *MakeWorkload(*LoadPlanModel("llama3-70b", &seq), 8192, 256 * 8192);
  const HardwareProfile hw = H100();
  Layout l;
  l.tp = 8;
  l.dp_shard = 32;
  l.micro_batch = 1;
  l.micro_batches = 8;
  double last = 1e30;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kAlternate,
                      Recompute::kOp, Recompute::kFull}) {
    l.recompute = r;
    const double act = EstimateMemory(w, hw, l).activations;
    EXPECT_LT(act, last) << RecomputeName(r);
    last = act;
  }
  const double sharded = EstimateMemory(w, hw, l).optimizer;
  l.dp_shard = 8;
  l.dp_replicate = 4;
  EXPECT_DOUBLE_EQ(EstimateMemory(w, hw, l).optimizer, 4 * sharded);
  // The distributed optimizer keeps gathered parameters and unsharded fp32 gradients for the step.
  l.reshard = false;
  const MemoryBreakdown z2 = EstimateMemory(w, hw, l);
  l.reshard = true;
  const MemoryBreakdown z3 = EstimateMemory(w, hw, l);
  EXPECT_GT(z2.params, z3.params);
  EXPECT_GT(z2.grads, z3.grads);
}

}  // namespace
}  // namespace tenax::plan
