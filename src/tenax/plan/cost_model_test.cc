#include "tenax/plan/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tenax/plan/kernels.h"
#include "tenax/plan/memory_model.h"
#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }
HardwareProfile A100() { return *LoadHardwareProfile("a100-80g", testing::HardwareDirs()); }

// A MicroBatchShape with the fields a test sets named at the call (C++17 has no designated
// initializers): Shape().WithTp(8).WithRecompute(Recompute::kFull).
struct Shape : MicroBatchShape {
  Shape& WithTp(int64_t v) {
    tp = v;
    return *this;
  }
  Shape& WithCp(int64_t v) {
    cp = v;
    return *this;
  }
  Shape& WithMicroBatch(int64_t v) {
    micro_batch = v;
    return *this;
  }
  Shape& WithRecompute(Recompute v) {
    recompute = v;
    return *this;
  }
  Shape& WithFp8(bool v) {
    fp8 = v;
    return *this;
  }
};

Workload Load(const std::string& preset, int64_t seq, int64_t seqs, Kernels k = Kernels::kEager) {
  int64_t ignored = 0;
  return *MakeWorkload(*LoadPlanModel(preset, &ignored), seq, seqs * seq, k);
}

// Megatron-LM's GPT-3 175B as Narayanan et al. 2021 ran it.
Workload Gpt3(int64_t seqs) {
  ModelSpec m;
  m.name = "gpt3";
  m.n_layers = 96;
  m.dim = 12288;
  m.n_heads = 96;
  m.n_kv_heads = 96;
  m.ffn_hidden_dim = 4 * 12288;
  m.vocab_size = 51200;
  Software sw;
  sw.kernels = Kernels::kFused;
  sw.attention = AttentionKind::kMaterialized;
  sw.dropout = 0.1;
  sw.sequence_parallel = false;
  sw.dp_overlap = false;
  return *MakeWorkload(m, Architecture{false, true, true, true}, sw, 2048, seqs * 2048);
}

TEST(CostModel, FlashAttentionByHand) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-8b", 8192, 8);
  const MicroBatchCost c = EstimateMicroBatch(w, hw, Shape());
  // FlashAttention's convention: causal forward 4 s^2 d H / 2, backward 2.5 x that, at the
  // measured FlashAttention-2 throughput for 8K sequences (274.9 TFLOP/s) at the sustained clock.
  const double flops = 3.5 * 2.0 * 8192.0 * 8192 * 128 * 32;
  EXPECT_NEAR(c.layer.attention, flops / (274.9e12 * hw.sustained_clock), 1e-12);
  EXPECT_EQ(c.layer.tp_comm, 0);
  EXPECT_EQ(c.layer.cp_comm, 0);
  EXPECT_EQ(c.layer.recompute, 0);
}

// PyTorch's ring attention against Llama 3's all-gather flavour, same work: the ring adds its fp32
// merges and gradient accumulations (counted by hand from torch's _templated_ring_attention and
// its backward: 20 + 40.5 B forward and 84 + 58.5 B backward per element of the n x H d output at
// cp = 2) and moves K and V with all 32 query heads, not the 8 kv heads: its exposed traffic is
// the last fp32 dK/dV send (the gathers and the first sends hide behind a step's kernel).
TEST(CostModel, RingAttentionByHand) {
  const HardwareProfile hw = H100();
  int64_t ignored = 0;
  const ModelSpec m = *LoadPlanModel("llama3-8b", &ignored);
  Software ring;
  ring.cp_attention = CpAttention::kRing;
  const Workload wr = *MakeWorkload(m, Architecture{}, ring, 65536, 65536);
  const Workload wa = *MakeWorkload(m, Architecture{}, Software{}, 65536, 65536);
  const MicroBatchCost r = EstimateMicroBatch(wr, hw, Shape().WithCp(2));
  const MicroBatchCost a = EstimateMicroBatch(wa, hw, Shape().WithCp(2));
  const double e = 32768.0 * 4096.0;
  const double bandwidth = hw.hbm_bandwidth * hw.eff.memory_bound;
  EXPECT_NEAR(r.layer.attention - a.layer.attention,
              (e * (20.0 + 40.5) + e * (84.0 + 58.5)) / bandwidth, 1e-9);
  EXPECT_NEAR(r.layer.cp_comm, SendTime(hw, true, e * 2.0 * 4.0), 1e-12);
  // The all-gather flavour: K and V of the 8 kv heads gathered forward, reduce-scattered back.
  const double kv_bytes = 2.0 * 32768 * 2 * 1024 * 2;
  EXPECT_NEAR(a.layer.cp_comm, 2.0 * CollectiveTime(hw, Collective::kAllGather, 1, 2, kv_bytes),
              1e-12);
}

// torchtitan's complex rotary under torch.compile: TorchInductor runs complex operators as eager
// fallback kernels, so the rotary, GQA's repeat and the output transpose cost 28 B per q element
// and 20 per kv element forward (twice that backward) instead of the fused 4 and 4; eager kernels
// are unchanged.
TEST(CostModel, ComplexRotaryStaysUnfusedUnderCompile) {
  const HardwareProfile hw = H100();
  int64_t ignored = 0;
  const ModelSpec m = *LoadPlanModel("llama3-8b", &ignored);
  auto layer = [&](Kernels k, bool complex_rotary) {
    Software sw;
    sw.kernels = k;
    sw.complex_rotary = complex_rotary;
    const Workload w = *MakeWorkload(m, Architecture{}, sw, 8192, 8 * 8192);
    return EstimateMicroBatch(w, hw, Shape().WithMicroBatch(2)).layer;
  };
  const double n = 16384, bandwidth = hw.hbm_bandwidth * hw.eff.memory_bound;
  EXPECT_NEAR(layer(Kernels::kFused, true).elementwise - layer(Kernels::kFused, false).elementwise,
              3.0 * n * ((28.0 - 4.0) * 4096 + (20.0 - 4.0) * 1024) / bandwidth, 1e-12);
  EXPECT_EQ(layer(Kernels::kEager, true).elementwise, layer(Kernels::kEager, false).elementwise);
  EXPECT_EQ(layer(Kernels::kFused, true).matmul, layer(Kernels::kFused, false).matmul);
}

TEST(CostModel, ProjectionsAreThreeGemmsEach) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-8b", 8192, 8);
  const MicroBatchCost c = EstimateMicroBatch(w, hw, Shape().WithMicroBatch(2));
  const double n = 16384;
  double expected = 0;
  // wq, wk, wv, wo, w1, w3, w2: forward (n x in x out), input gradient, weight gradient.
  for (auto [out, in] : {std::pair{4096.0, 4096.0},
                         {1024.0, 4096.0},
                         {1024.0, 4096.0},
                         {4096.0, 4096.0},
                         {14336.0, 4096.0},
                         {14336.0, 4096.0},
                         {4096.0, 14336.0}}) {
    expected += GemmTime(hw, n, out, in, Precision::kBf16) +
                GemmTime(hw, n, in, out, Precision::kBf16) +
                GemmTime(hw, in, out, n, Precision::kBf16);
  }
  EXPECT_NEAR(c.layer.matmul, expected, 1e-12);
  // GPT layers: a fused QKV projection and a two-matrix GELU MLP.
  const Workload g = Gpt3(16);
  const LayerTime gl = EstimateMicroBatch(g, A100(), Shape().WithTp(8)).layer;
  double gpt = 0;
  for (auto [out, in] :
       {std::pair{3.0 * 1536, 12288.0}, {12288.0, 1536.0}, {6144.0, 12288.0}, {12288.0, 6144.0}}) {
    gpt += GemmTime(A100(), 2048, out, in, Precision::kBf16) +
           GemmTime(A100(), 2048, in, out, Precision::kBf16) +
           GemmTime(A100(), in, out, 2048, Precision::kBf16);
  }
  EXPECT_NEAR(gl.matmul, gpt, 1e-12);
}

TEST(CostModel, MaterializedAttentionByHand) {
  const HardwareProfile hw = A100();
  const Workload w = Gpt3(16);
  const LayerTime t = EstimateMicroBatch(w, hw, Shape().WithTp(8)).layer;
  // 12 heads per rank, s = 2048, d = 128: QK^T and PV forward, four GEMMs backward, and the
  // softmax (4 B forward, 6 B backward) and dropout (5 B each way) passes over the scores.
  const double b = 12, s = 2048, d = 128;
  const double fwd = GemmTime(hw, s, s, d, Precision::kBf16, b) +
                     GemmTime(hw, s, d, s, Precision::kBf16, b) + StreamTime(hw, b * s * s * 9);
  const double bwd = 3 * GemmTime(hw, s, d, s, Precision::kBf16, b) +
                     GemmTime(hw, s, s, d, Precision::kBf16, b) + StreamTime(hw, b * s * s * 11);
  EXPECT_NEAR(t.attention, fwd + bwd, 1e-12);
  // Selective recomputation (Megatron) redoes exactly the attention core's forward.
  const LayerTime sel =
      EstimateMicroBatch(w, hw, Shape().WithTp(8).WithRecompute(Recompute::kSelective)).layer;
  EXPECT_NEAR(sel.recompute, fwd, 1e-12);
}

TEST(CostModel, RecomputeCostsTimeInOrder) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-8b", 8192, 8);
  auto layer = [&](Recompute r) {
    return EstimateMicroBatch(w, hw, Shape().WithRecompute(r)).layer;
  };
  const double none = layer(Recompute::kNone).total();
  EXPECT_LT(none, layer(Recompute::kSelective).total());
  EXPECT_LT(layer(Recompute::kOp).total(), layer(Recompute::kAlternate).total());
  EXPECT_LT(layer(Recompute::kAlternate).total(), layer(Recompute::kFull).total());
  // Every second layer recomputed costs half of recomputing them all.
  EXPECT_NEAR(layer(Recompute::kAlternate).recompute, layer(Recompute::kFull).recompute / 2, 1e-12);
  // Full recomputation redoes the forward: about a third more than none.
  EXPECT_NEAR(layer(Recompute::kFull).total() / none, 4.0 / 3.0, 0.05);
}

TEST(CostModel, FusedKernelsAndFp8AreFaster) {
  const HardwareProfile hw = H100();
  const Workload eager = Load("llama3-8b", 8192, 8, Kernels::kEager);
  const Workload fused = Load("llama3-8b", 8192, 8, Kernels::kFused);
  const LayerTime e = EstimateMicroBatch(eager, hw, Shape().WithMicroBatch(2)).layer;
  const LayerTime f = EstimateMicroBatch(fused, hw, Shape().WithMicroBatch(2)).layer;
  EXPECT_LT(f.elementwise, e.elementwise / 3);
  EXPECT_EQ(f.matmul, e.matmul);
  const LayerTime f8 = EstimateMicroBatch(eager, hw, Shape().WithMicroBatch(2).WithFp8(true)).layer;
  EXPECT_LT(f8.matmul, e.matmul);
  EXPECT_GT(f8.elementwise, e.elementwise);  // the casts
}

TEST(CostModel, TensorParallelOverlapIsASoftwareOption) {
  const HardwareProfile hw = H100();
  Workload w = Load("llama3-405b", 8192, 64);
  auto tp = [&](TpOverlap o) {
    w.sw.tp_overlap = o;
    return EstimateMicroBatch(w, hw, Shape().WithTp(8)).layer;
  };
  const LayerTime none = tp(TpOverlap::kNone), bwd = tp(TpOverlap::kBackward),
                  full = tp(TpOverlap::kFull), async = tp(TpOverlap::kAsyncTp);
  // With sequence parallelism: 4 all-gathers and 4 reduce-scatters of the n x h bf16 activation.
  const double one = CollectiveTime(hw, Collective::kAllGather, 1, 8, 8192.0 * 16384 * 2);
  EXPECT_NEAR(none.tp_comm, 8 * one, 1e-12);
  EXPECT_EQ(none.tp_hidden, 0);
  // Overlap hides traffic without creating or losing any.
  for (const LayerTime& t : {bwd, full, async}) {
    EXPECT_NEAR(t.tp_comm + t.tp_hidden, 8 * one, 1e-12);
  }
  // These GEMMs outlast their collectives: full overlap hides all; AsyncTP all but the two
  // input-gradient reduce-scatters, whose input is a sum of GEMMs (wq + wk + wv, w1 + w3).
  EXPECT_NEAR(full.tp_comm, 0, 1e-12);
  EXPECT_NEAR(async.tp_comm, 2 * one, 1e-12);
  EXPECT_LT(full.tp_comm, bwd.tp_comm);
  EXPECT_LT(bwd.tp_comm, none.tp_comm);
  // Backward overlap hides the two input-gradient reduce-scatters behind the weight gradients.
  EXPECT_NEAR(bwd.tp_comm, 6 * one, 1e-12);
  // tp = 16 spans two nodes: the network's latency and 8 NICs per node (340 GB/s) instead of
  // NVLink's 360 GB/s.
  w.sw.tp_overlap = TpOverlap::kNone;
  const LayerTime t16 = EstimateMicroBatch(w, hw, Shape().WithTp(16)).layer;
  const double one16 = CollectiveTime(hw, Collective::kAllGather, 1, 16, 8192.0 * 16384 * 2);
  EXPECT_NEAR(one16, 15 * 10e-6 + 15.0 / 16 * 8192.0 * 16384 * 2 / (8 * 50e9 * 0.85), 1e-12);
  EXPECT_NEAR(t16.tp_comm, 8 * one16, 1e-12);
  EXPECT_GT(one16, one);
}

// Float8 projections gather their inputs (forward) and their output gradients (backward) in fp8
// (torchao's tensor-parallel styles, which torchtitan applies with Float8); the reduce-scatters sum
// bf16 outputs. The casts are one pass over each GEMM's three operands plus one layout copy of
// each for backward: 7 B per element.
TEST(CostModel, Fp8TensorParallelGathersMoveOneBytePerElement) {
  const HardwareProfile hw = H100();
  Workload w = Load("llama3-405b", 8192, 64);
  const LayerTime t = EstimateMicroBatch(w, hw, Shape().WithTp(8).WithFp8(true)).layer;
  const double ag = CollectiveTime(hw, Collective::kAllGather, 1, 8, 8192.0 * 16384 * 1);
  const double rs = CollectiveTime(hw, Collective::kReduceScatter, 1, 8, 8192.0 * 16384 * 2);
  EXPECT_LT(ag, 0.6 * rs);
  EXPECT_NEAR(t.tp_comm, 4 * ag + 4 * rs, 1e-12);
  // Without sequence parallelism the all-reduces stay bf16.
  w.sw.sequence_parallel = false;
  const LayerTime ar = EstimateMicroBatch(w, hw, Shape().WithTp(8).WithFp8(true)).layer;
  EXPECT_NEAR(ar.tp_comm, 4 * CollectiveTime(hw, Collective::kAllReduce, 1, 8, 8192.0 * 16384 * 2),
              1e-12);
  EXPECT_EQ(Fp8LinearCastBytes(2, 3, 5), 7.0 * (2 * 3 + 3 * 5 + 2 * 5));
}

// The zero-bubble schedules as built (parallel/pipeline_schedule.h's BubbleFraction under
// F = I = W): zbv's bubble is interleaving's at v = 2, dualpipev's (2p - 3) / (6 (p - 1)) of
// 1F1B's; zbv holds 1F1B's 2p chunks where interleaving holds up to 3p - 1, dualpipev one more.
TEST(CostModel, ZeroBubbleSchedulesAsBuilt) {
  const HardwareProfile hw = H100();
  int64_t ignored = 0;
  ModelSpec m = *LoadPlanModel("llama3-405b", &ignored);
  m.n_layers = 128;
  const Workload w = *MakeWorkload(m, 8192, 2048 * 8192, Kernels::kFused);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.vpp = 2;
  l.dp_shard = 64;
  l.micro_batches = 32;
  l.recompute = Recompute::kFull;
  const StepTime one = [&] {
    Layout flat = l;
    flat.vpp = 1;
    return EstimateStepTime(w, hw, flat);
  }();
  const StepTime interleaved = EstimateStepTime(w, hw, l);
  l.schedule = PipeSchedule::kZbv;
  const StepTime zbv = EstimateStepTime(w, hw, l);
  const double zbv_memory = EstimateMemory(w, hw, l).total();
  l.schedule = PipeSchedule::kDualPipeV;
  const StepTime dpv = EstimateStepTime(w, hw, l);
  const double dpv_memory = EstimateMemory(w, hw, l).total();
  EXPECT_NEAR(zbv.bubble, interleaved.bubble, 1e-12);
  EXPECT_NEAR(zbv.bubble, one.bubble / 2, 1e-9 * one.bubble);
  EXPECT_NEAR(dpv.bubble, one.bubble * (2 * 16 - 3) / (6.0 * 15), 1e-9 * one.bubble);
  Layout il = l;
  il.schedule = PipeSchedule::k1F1B;
  EXPECT_LT(zbv_memory, EstimateMemory(w, hw, il).total());
  EXPECT_GT(dpv_memory, zbv_memory);
  EXPECT_EQ(LayoutName(l), "tp8 pp16v2 dualpipev fsdp64 mbs1x32 ac=full bf16");
}

// The pipeline bug: with 128 layers on 16 stages (8 each) the output layer and loss sit on
// the last rank, which is therefore the slowest; spreading them over all ranks hid that.
TEST(CostModel, PipelineRanksAsTheyAreBuilt) {
  const HardwareProfile hw = H100();
  int64_t ignored = 0;
  ModelSpec m = *LoadPlanModel("llama3-405b", &ignored);
  m.n_layers = 128;
  const Workload w = *MakeWorkload(m, 8192, 2048 * 8192, Kernels::kFused);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.vpp = 4;
  l.dp_shard = 64;
  l.micro_batches = 32;
  l.recompute = Recompute::kOp;
  l.reshard = false;
  const StepTime s = EstimateStepTime(w, hw, l);
  const double layer = s.mb.layer.total();
  EXPECT_NEAR(s.stage_first, 8 * layer + s.mb.embedding, 1e-12);
  EXPECT_NEAR(s.stage_last, 8 * layer + s.mb.output, 1e-12);
  EXPECT_NEAR(s.stage, s.stage_last, 1e-12);
  EXPECT_NEAR(s.compute, 32 * s.stage, 1e-9);
  // Fill and drain: every other rank's work once, cut into v chunks.
  EXPECT_NEAR(s.bubble, (128 * layer + s.mb.embedding + s.mb.output - s.stage) / 4, 1e-9);
  EXPECT_NEAR(
      s.step,
      s.compute + s.bubble + s.pp_comm + s.dp_exposed + s.dp_copies + s.interference + s.optimizer,
      1e-9);
  // With 128 layers every middle rank already has 8: moving a layer off the last rank only makes
  // a middle one slower.
  l.last_layers = 7;
  EXPECT_EQ(EstimateStepTime(w, hw, l).split.middle, 9);  // (128 - 8 - 7) / 14, rounded up
  // Llama 3 405B's 126 layers: the even split gives 8 to the first and last ranks and leaves the
  // middle ones 110 / 14 (8 at most); taking one off each end (Meta's choice) balances them.
  const Workload w126 =
      *MakeWorkload(*LoadPlanModel("llama3-405b", &ignored), 8192, 2048 * 8192, Kernels::kFused);
  l.last_layers = 0;
  const StepTime even = EstimateStepTime(w126, hw, l);
  l.first_layers = 7;
  l.last_layers = 7;
  const StepTime balanced = EstimateStepTime(w126, hw, l);
  EXPECT_EQ(balanced.split.middle, 8);
  EXPECT_NEAR(balanced.stage, 8 * balanced.mb.layer.total(), 1e-12);
  EXPECT_LT(balanced.stage, even.stage);
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
  l.recompute = Recompute::kOp;
  l.reshard = false;
  const StepTime s = EstimateStepTime(w, hw, l);
  EXPECT_EQ(s.split.first, 8);   // 126 layers: ceil(126 / 16)
  EXPECT_EQ(s.split.middle, 8);  // ceil(110 / 14)
  EXPECT_NEAR(s.tokens_per_s_per_gpu * 8192 * s.step, 2048.0 * 8192, 1e-3);
  EXPECT_NEAR(s.tflops_per_gpu, s.tokens_per_s_per_gpu * w.flops_per_token / 1e12, 1e-9);
  EXPECT_NEAR(s.mfu, s.tflops_per_gpu * 1e12 / hw.peak_bf16, 1e-12);
  EXPECT_GT(s.hfu, s.mfu);  // recomputation is work the hardware does
  // Interleaving shrinks the bubble.
  l.vpp = 1;
  EXPECT_GT(EstimateStepTime(w, hw, l).bubble, 3 * s.bubble);
}

// Megatron-LM's TFLOP/s (Narayanan et al. 2021, eq. 3) count hardware FLOPs with full
// recomputation: 96 B s l h^2 (1 + s / 6h + V / 16lh) per step, i.e. per token
// 96 l h^2 + 16 s l h + 6 h V. The planner's model + recompute FLOPs must agree (to within the
// biases and norms Megatron's formula leaves out).
TEST(CostModel, HardwareFlopsMatchMegatronsFormula) {
  const Workload w = Gpt3(16);
  const double l = 96, h = 12288, s = 2048, V = 51200;
  const double megatron = 96 * l * h * h + 16 * s * l * h + 6 * h * V;
  const double planner = w.flops_per_token + RecomputeFlopsPerToken(w, Recompute::kFull);
  EXPECT_NEAR(planner / megatron, 1.0, 1e-3);
  // Model FLOPs: 72 l h^2 + 12 s l h + 6 h V.
  EXPECT_NEAR(w.flops_per_token / (72 * l * h * h + 12 * s * l * h + 6 * h * V), 1.0, 1e-3);
}

TEST(CostModel, DataParallelTrafficByKindAndOverlap) {
  const HardwareProfile hw = H100();
  Workload w = Load("llama3-8b", 8192, 128);
  Layout l;
  l.dp_shard = 64;
  l.micro_batch = 1;
  l.micro_batches = 2;
  l.recompute = Recompute::kOp;
  l.reshard = false;
  const StepTime opt = EstimateStepTime(w, hw, l);
  l.reshard = true;
  const StepTime fsdp = EstimateStepTime(w, hw, l);
  // 8B unsharded: 32 layers + embedding + output, bf16 gathers and fp32 reduce-scatters over
  // 64 ranks in 8 nodes (8 ranks per node: 8 NICs in parallel).
  const double p = 32 * WidthsFor(w.model, 1).params + 2 * 128256.0 * 4096;
  const double ag = CollectiveTime(hw, Collective::kAllGather, 1, 64, 2 * p);
  const double rs = CollectiveTime(hw, Collective::kReduceScatter, 1, 64, 4 * p);
  EXPECT_NEAR(opt.dp_comm, ag + rs, 1e-9);             // once per step
  EXPECT_NEAR(fsdp.dp_comm, 2 * (2 * ag + rs), 1e-9);  // per micro-batch, gathered twice
  EXPECT_LT(fsdp.dp_exposed, fsdp.dp_comm);
  w.sw.dp_overlap = false;
  EXPECT_NEAR(EstimateStepTime(w, hw, l).dp_exposed, fsdp.dp_comm, 1e-9);
}

}  // namespace
}  // namespace tenax::plan
