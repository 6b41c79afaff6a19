#include "tenax/plan/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tenax/plan/kernels.h"
#include "tenax/plan/moe_model.h"

namespace tenax::plan {
namespace {

// Bytes the elementwise kernels move per token of one layer's forward, per element of each width
// (counted kernel by kernel in docs/planner.md).
struct ElementwiseBytes {
  double norms;    // both norms and residual adds, per element of the norm regions
  double q, kv;    // rotary, repeat_kv, transposes
  double f;        // the MLP activation
  double dropout;  // per dropout site (after attention, after the MLP), per norm-region element
};
// Eager PyTorch, one kernel per op. RMSNorm in fp32 (to fp32 6 B, pow 8, mean 4, multiply 8, back
// to bf16 6, times weight 4 = 36 B, twice); LayerNorm is one kernel (read 2, write 2, fp32 stats:
// 6 B); two residual adds (6 B each); rotary on q and k (20 B), GQA's repeat_kv (4 B per q element,
// 4 B per kv read), the attention output's transpose copy (4 B); SwiGLU (silu 4 + product 6) or
// GELU (4); dropout reads, writes and stores a 1-byte mask (5 B).
ElementwiseBytes EagerBytes(const Architecture& a) {
  const double norm = a.layer_norm ? 6.0 : 36.0;
  const bool rotary = !a.learned_positions;
  return {2.0 * norm + 2.0 * 6.0, rotary ? 28.0 : 4.0, rotary ? 24.0 : 0.0,
          a.gated_mlp ? 10.0 : 4.0, 5.0};
}
// Fused (torch.compile, Megatron / Transformer Engine): add+norm reads x and the residual and
// writes both (8 B, twice); rotary reads and writes q and k once (4 B); SwiGLU reads two inputs and
// writes one (6 B), bias+GELU reads and writes (4 B); bias+dropout+add adds the mask and a pass
// (3 B per site); no copies.
// With complex rotary (torchtitan's, which TorchInductor runs as fallback kernels): q and k cast
// to fp32 in a generated kernel (6 B), the complex multiply as an eager kernel (read and write
// fp32: 8 B), the cast back (read 4 B, write 2) fused with GQA's repeat of K to every query head
// (so 4 B per kv element read and 2 B per q element written), V repeated (2 B per kv read, 2 B per
// q written), and the attention output's transpose copied for the output projection (4 B per q):
// 28 B per q element and 20 B per kv element, as many as eager's.
ElementwiseBytes FusedBytes(const Architecture& a, const Software& sw) {
  const bool rotary = !a.learned_positions;
  const bool fallback = rotary && sw.complex_rotary;
  return {2.0 * 8.0, fallback ? 20.0 + 2.0 + 2.0 + 4.0 : (rotary ? 4.0 : 0.0),
          fallback ? 6.0 + 8.0 + 4.0 + 2.0 : (rotary ? 4.0 : 0.0), a.gated_mlp ? 6.0 : 4.0, 3.0};
}
// FlashAttention's FLOP convention: forward 4 s^2 d H (halved when causal), backward 2.5 x that.
constexpr double kFlashFwdBwdFactor = 3.5;
// Bytes per logit in the loss: bf16 logits read, fp32 upcast written and read by log-softmax,
// its gradient written in fp32 and cast back (20 B), forward and backward together.
constexpr double kLossBytesPerLogit = 20.0;
// Materialized attention per score element: Megatron's fused scale-mask-softmax reads and writes
// (2 + 2 B) forward and reads probabilities and their gradient, writes one (6 B) backward;
// dropout on the probabilities reads, writes and stores a mask (5 B) forward, reads gradient and
// mask and writes (5 B) backward.
constexpr double kSoftmaxFwdBytes = 4.0, kSoftmaxBwdBytes = 6.0;
constexpr double kDropoutBytes = 5.0;
// Eager PyTorch has no fused scale-mask-softmax: the scaling and the causal mask (masked_fill) are
// kernels of their own, each reading and writing the scores forward and their gradient backward
// (4 B each way per pass). Seen in place on an H100 (bench/gpu_components.py, a GPT layer): these
// passes and the softmax's took 18.5 of the layer's 32.7 ms.
constexpr double kEagerScaleMaskBytes = 8.0;
// AdamW touches fp32 parameter, gradient, m and v (read) and parameter, m and v (write), plus
// the gradient-norm pass: 8 x 4 bytes per parameter of the local shard.
constexpr double kOptimizerBytesPerParam = 32.0;
// FSDP2 around each all-gather: cast the fp32 shard to bf16 into the send buffer (small) and copy
// the gathered flat buffer out into the parameters (read 2 + write 2 bytes per parameter); around
// each reduce-scatter: copy the bf16 gradients into an fp32 send buffer (read 2 + write 4).
constexpr double kFsdpGatherCopyBytes = 4.0;
constexpr double kFsdpScatterCopyBytes = 6.0;
// Embedding lookup: write the rows (2 + 2 B read/write) forward, scatter-add fp32 gradients (8 B).
constexpr double kEmbeddingBytesPerElement = 12.0;

// A projection of this rank: weight `in` x `out`, the times of its three GEMMs and, in fp8,
// the HBM bytes of its casts.
struct Proj {
  double out, in;
  double fwd = 0, dgrad = 0, wgrad = 0;
  double cast_bytes = 0;
};

// A tensor-parallel collective and the GEMM it can hide behind when overlap is on.
struct TpCollective {
  double time;
  double pair;        // the neighbouring GEMM (TpOverlap::kFull, kAsyncTp)
  double wgrad_pair;  // > 0: an input-gradient reduction (of a sum of GEMMs' outputs), which
                      // TpOverlap::kBackward hides behind this and kAsyncTp cannot fuse
  bool forward;
  bool mlp;  // around the MLP (an MoE layer has none: its experts run on the sequence shard)
};

// What of a dense layer's LayerTime belongs to its MLP, so that an MoE layer's time is the dense
// layer's with the MLP replaced (plan/moe_model.h).
struct MlpShare {
  double matmul = 0, fwd_gemm = 0, elementwise = 0, ew_fwd = 0, tp_exposed = 0, tp_hidden = 0,
         tp_fwd_exposed = 0, tp_fwd_hidden = 0, op_recompute = 0;
};

// PyTorch's ring attention as it runs (torch/distributed/tensor/experimental/_attention.py,
// `_templated_ring_attention` and its backward; torchtitan's context parallelism), per layer on
// one GPU, for c = cp ranks with the causal load balancing (each rank holds two chunks of the
// sequence). K and V reach SDPA with every query head (torchtitan's repeat_kv runs before it), so
// what moves and what is merged is `q` wide. What it adds to one flash kernel over the same
// causal work (the per-step kernels themselves keep the FLOPs and the kernel table of S / c):
//   - Both directions first copy K and V contiguous (`key.contiguous()`: repeat_kv's output is
//     transposed to heads-first; 4 B per element of each).
//   - Forward: K and V (bf16) all-gathered once (the default rotater), waited for after the first
//     step's kernel, which does 1/c of the work. Every rank's output is merged in fp32: the first
//     block upcast (6 B per output element), then per later step the block upcast (6) and
//     `out - sigmoid(dlse) * (out - block)` (three passes over fp32 tensors, 32 B); on the steps
//     that use half the queries (half the ranks' steps, with load balancing) that is over half the
//     output and torch.cat rebuilds the whole buffer (8 B). K and V are concatenated before each
//     send (4 B per element of each). The result is cast back (6 B).
//   - Backward: K and V gathered again; dQ, dK and dV accumulated in fp32 buffers zeroed first
//     (12 B); per step the kernel's bf16 gradients are added (10 B per element, plus a torch.cat
//     of the whole buffer when only a half is updated: the two cases averaged over ranks, 11.5 B
//     for dQ and 23 B for dK + dV after the first step, 10 and 20 on it), dK and dV concatenated
//     in fp32 (16 B) and sent to the next rank point-to-point (2 x 4 B per element), each send
//     overlapping the next step's kernel; the last one is waited for after the loop; the
//     gradients cast back (18 B).
// Elementwise passes run at HBM speed and are not overlapped (one stream).
struct RingAttentionCost {
  double fwd_elementwise = 0, bwd_elementwise = 0;  // seconds
  double fwd_exposed = 0, bwd_exposed = 0;          // communication not hidden by the kernels
};
constexpr double kRingFwdFixedBytes = 20.0, kRingFwdStepBytes = 32.5 + 8.0;
constexpr double kRingBwdFixedBytes = 84.0, kRingBwdStepBytes = 8.0 + 23.0 + 16.0 + 11.5;
RingAttentionCost RingAttention(const HardwareProfile& hw, int64_t tp, int64_t cp, double n,
                                double q, double attn_fwd, double attn_bwd) {
  const double c = static_cast<double>(cp);
  const double e = n * q;  // elements of this GPU's attention output (and of K, V with every head)
  RingAttentionCost r;
  r.fwd_elementwise = StreamTime(hw, e * (kRingFwdFixedBytes + (c - 1.0) * kRingFwdStepBytes));
  r.bwd_elementwise = StreamTime(hw, e * (kRingBwdFixedBytes + (c - 1.0) * kRingBwdStepBytes));
  const double gather = CollectiveTime(hw, Collective::kAllGather, tp, cp, c * e * 2.0 * 2.0);
  const double send = SendTime(hw, PlaceGroup(hw, tp, cp).in_node, e * 2.0 * 4.0);
  const double step_fwd = attn_fwd / c, step_bwd = attn_bwd / c;
  r.fwd_exposed = std::max(0.0, gather - step_fwd);
  r.bwd_exposed =
      std::max(0.0, gather - step_bwd) + (c - 1.0) * std::max(0.0, send - step_bwd) + send;
  return r;
}

// One micro-batch as one GPU sees it: its tokens and the layer's widths after tensor parallelism,
// which every term of the layer's time is computed from. Constant after construction.
struct GpuMicroBatch {
  GpuMicroBatch(const Workload& workload, const HardwareProfile& profile, const MicroBatchShape& s)
      : w(workload),
        hw(profile),
        shape(s),
        lw(WidthsFor(workload.model, s.tp, workload.arch)),
        n(static_cast<double>(s.micro_batch * workload.seq_len / s.cp)),
        h(static_cast<double>(lw.h)),
        q(static_cast<double>(lw.q)),
        kv(static_cast<double>(lw.kv)),
        f(static_cast<double>(lw.f)),
        t(static_cast<double>(s.tp)),
        seq(static_cast<double>(workload.seq_len)),
        sp(workload.sw.sequence_parallel && s.tp > 1),
        he(sp ? h / t : h),
        prec(s.fp8 && profile.peak_fp8 > 0 ? Precision::kFp8 : Precision::kBf16) {}

  const Workload& w;
  const HardwareProfile& hw;
  const MicroBatchShape& shape;
  const LayerWidths lw;
  const double n;            // tokens on this GPU
  const double h, q, kv, f;  // lw's widths
  const double t, seq;       // tp and the sequence length
  const bool sp;             // sequence parallelism (tp > 1 only)
  const double he;           // norm / residual / dropout width per token on this GPU
  const Precision prec;      // of the projections' GEMMs
};

// The forward parts of a layer's time: what full recomputation redoes, and what gradient
// reduction cannot hide behind.
struct LayerForward {
  double gemm = 0;         // the projections' forward GEMMs
  double attention = 0;    // the attention core (with ring attention's forward merges)
  double elementwise = 0;  // the elementwise kernels
  double tp_exposed = 0;   // tensor-parallel traffic, exposed
  double tp_hidden = 0;    // ... and overlapped with GEMMs
  double cp = 0;           // context-parallel traffic, exposed
};

// The layer's projections on this GPU with their GEMM times, and their sums per block, which
// the tensor-parallel collectives overlap with.
struct Projections {
  std::vector<Proj> proj;  // in execution order
  // Indices of the projections that start and end the attention and MLP blocks.
  size_t o_idx = 0, fc1 = 0, fc2 = 0;
  double cast_bytes = 0;                             // fp8: the dynamic-scaling casts
  double qkv_fwd = 0, qkv_dgrad = 0, qkv_wgrad = 0;  // the projections before the attention
  double fc1_fwd = 0, fc1_dgrad = 0, fc1_wgrad = 0;  // the MLP's input projections
};

// The projections: forward, input-gradient and weight-gradient GEMMs.
Projections ProjectionGemms(const GpuMicroBatch& g, LayerTime* lt, LayerForward* fwd,
                            MlpShare* mlp) {
  const HardwareProfile& hw = g.hw;
  const double n = g.n, h = g.h, q = g.q, kv = g.kv, f = g.f;
  const Precision prec = g.prec;
  Projections ps;
  // Projections in execution order. GPT-style models (Megatron) fuse Q, K and V into one GEMM.
  ps.proj = g.w.arch.gated_mlp
                ? std::vector<Proj>{{q, h}, {kv, h}, {kv, h}, {h, q}, {f, h}, {f, h}, {h, f}}
                : std::vector<Proj>{{q + 2.0 * kv, h}, {h, q}, {f, h}, {h, f}};
  std::vector<Proj>& proj = ps.proj;
  for (Proj& p : proj) {
    const LinearGemms t = LinearGemmTimes(hw, n, p.in, p.out, prec);
    p.fwd = t.fwd;
    p.dgrad = t.dgrad;
    p.wgrad = t.wgrad;
    fwd->gemm += p.fwd;
    if (prec == Precision::kFp8) p.cast_bytes = Fp8LinearCastBytes(n, p.in, p.out);
    ps.cast_bytes += p.cast_bytes;
  }
  const size_t qkv0 = 0;
  ps.o_idx = g.w.arch.gated_mlp ? 3 : 1;
  ps.fc1 = g.w.arch.gated_mlp ? 4 : 2;
  ps.fc2 = proj.size() - 1;
  for (size_t i = qkv0; i < ps.o_idx; ++i) {
    ps.qkv_fwd += proj[i].fwd;
    ps.qkv_dgrad += proj[i].dgrad;
    ps.qkv_wgrad += proj[i].wgrad;
  }
  for (size_t i = ps.fc1; i < ps.fc2; ++i) {
    ps.fc1_fwd += proj[i].fwd;
    ps.fc1_dgrad += proj[i].dgrad;
    ps.fc1_wgrad += proj[i].wgrad;
  }

  for (const Proj& p : proj) lt->matmul += p.fwd + p.dgrad + p.wgrad;
  for (size_t i = ps.fc1; i <= ps.fc2; ++i) {
    mlp->matmul += proj[i].fwd + proj[i].dgrad + proj[i].wgrad;
    mlp->fwd_gemm += proj[i].fwd;
    if (proj[i].cast_bytes > 0) mlp->elementwise += StreamTime(hw, proj[i].cast_bytes);
  }
  return ps;
}

// Attention core.
void AttentionCore(const GpuMicroBatch& g, LayerTime* lt, LayerForward* fwd) {
  const HardwareProfile& hw = g.hw;
  const Software& sw = g.w.sw;
  const double seq = g.seq;
  if (sw.attention == AttentionKind::kMaterialized) {
    // Scores materialized for every (query, key) pair, the causal mask applied afterwards.
    const double batch = static_cast<double>(g.shape.micro_batch) * static_cast<double>(g.lw.heads);
    const double d = static_cast<double>(g.lw.head_dim);
    const double scores = batch * seq * seq;
    const double drop = sw.dropout > 0 ? kDropoutBytes : 0.0;
    const double unfused = sw.kernels == Kernels::kEager ? kEagerScaleMaskBytes : 0.0;
    fwd->attention = GemmTime(hw, seq, seq, d, Precision::kBf16, batch) +
                     GemmTime(hw, seq, d, seq, Precision::kBf16, batch) +
                     StreamTime(hw, scores * (kSoftmaxFwdBytes + drop + unfused));
    const double bwd = 3.0 * GemmTime(hw, seq, d, seq, Precision::kBf16, batch) +
                       GemmTime(hw, seq, seq, d, Precision::kBf16, batch) +
                       StreamTime(hw, scores * (kSoftmaxBwdBytes + drop + unfused));
    lt->attention = fwd->attention + bwd;
  } else {
    // Causal: each local query sees seq / 2 keys on average (context parallelism balances the
    // causal triangle across ranks); QK^T and PV are 2 FLOPs per multiply-add each.
    const double fa_fwd = 2.0 * 2.0 * g.n * (seq / 2.0) * g.q;
    lt->attention = FlashAttentionTime(hw, sw.attention, seq / static_cast<double>(g.shape.cp),
                                       kFlashFwdBwdFactor * fa_fwd);
    fwd->attention = lt->attention / kFlashFwdBwdFactor;
  }
}

// Norms, rotary, activation, residuals, dropout: memory-bound kernels at HBM speed, plus the fp8
// casts of the projections.
void Elementwise(const GpuMicroBatch& g, const Projections& ps, LayerTime* lt, LayerForward* fwd,
                 MlpShare* mlp) {
  const HardwareProfile& hw = g.hw;
  const Architecture& a = g.w.arch;
  const Software& sw = g.w.sw;
  const double n = g.n, he = g.he, q = g.q, kv = g.kv, f = g.f;
  const ElementwiseBytes eb = sw.kernels == Kernels::kEager ? EagerBytes(a) : FusedBytes(a, sw);
  fwd->elementwise = StreamTime(hw, n * (eb.norms * he + eb.q * q + eb.kv * kv + eb.f * f +
                                         (sw.dropout > 0 ? 2.0 * eb.dropout * he : 0.0)));
  lt->elementwise =
      fwd->elementwise * (1.0 + kBackwardElementwiseFactor) + StreamTime(hw, ps.cast_bytes);
  mlp->ew_fwd = StreamTime(hw, n * eb.f * f);
  mlp->elementwise += mlp->ew_fwd * (1.0 + kBackwardElementwiseFactor);
}

// Tensor parallelism. With sequence parallelism: all-gather before attention and MLP,
// reduce-scatter after, mirrored in backward; without: an all-reduce after each block forward
// and after each column-parallel input gradient backward. Each moves the n x h bf16 activation.
// What the run's overlap option hides behind the neighbouring GEMM goes to tp_hidden.
// With fp8 projections the all-gathers move fp8 (1 B per element): the block's input is cast
// before it is gathered forward, the row-parallel output's gradient before it is gathered backward
// (torchao's Float8ColwiseParallel, Float8RowwiseParallel and PrepareFloat8ModuleInput, which
// torchtitan applies whenever Float8 meets tensor parallelism: parallelize_llama.py `apply_tp`,
// 9dec370 of Dec 2024 and later). The reduce-scatters and all-reduces sum bf16 outputs.
void TensorParallelComm(const GpuMicroBatch& g, const Projections& ps, LayerTime* lt,
                        LayerForward* fwd, MlpShare* mlp) {
  const HardwareProfile& hw = g.hw;
  const int64_t tp = g.shape.tp;
  const std::vector<Proj>& proj = ps.proj;
  std::vector<TpCollective> tpc;
  if (tp > 1) {
    const double bytes = g.n * g.h * 2.0;
    const double gathered = g.prec == Precision::kFp8 ? g.n * g.h * 1.0 : bytes;
    const double ag = CollectiveTime(hw, Collective::kAllGather, 1, tp, gathered);
    const double rs = CollectiveTime(hw, Collective::kReduceScatter, 1, tp, bytes);
    const double ar = CollectiveTime(hw, Collective::kAllReduce, 1, tp, bytes);
    const double o_fwd = proj[ps.o_idx].fwd, fc2_fwd = proj[ps.fc2].fwd;
    // Built whole and moved in (copy-assigning a list trips GCC 12's -Wnonnull).
    tpc = g.sp ? std::vector<TpCollective>{{ag, ps.qkv_fwd, 0, true, false},
                                           {rs, o_fwd, 0, true, false},
                                           {ag, ps.fc1_fwd, 0, true, true},
                                           {rs, fc2_fwd, 0, true, true},
                                           {ag, proj[ps.fc2].dgrad, 0, false, true},
                                           {rs, ps.fc1_dgrad, ps.fc1_wgrad, false, true},
                                           {ag, proj[ps.o_idx].dgrad, 0, false, false},
                                           {rs, ps.qkv_dgrad, ps.qkv_wgrad, false, false}}
               : std::vector<TpCollective>{{ar, o_fwd, 0, true, false},
                                           {ar, fc2_fwd, 0, true, true},
                                           {ar, ps.fc1_dgrad, ps.fc1_wgrad, false, true},
                                           {ar, ps.qkv_dgrad, ps.qkv_wgrad, false, false}};
  }
  const TpOverlap overlap = g.w.sw.tp_overlap;
  for (const TpCollective& x : tpc) {
    double exposed = x.time;
    if (overlap == TpOverlap::kFull || (overlap == TpOverlap::kAsyncTp && x.wgrad_pair == 0)) {
      exposed = std::max(0.0, x.time - x.pair);
    } else if (overlap == TpOverlap::kBackward && x.wgrad_pair > 0) {
      exposed = std::max(0.0, x.time - x.wgrad_pair);
    }
    lt->tp_comm += exposed;
    lt->tp_hidden += x.time - exposed;
    if (x.forward) {
      fwd->tp_exposed += exposed;
      fwd->tp_hidden += x.time - exposed;
    }
    if (x.mlp) {
      mlp->tp_exposed += exposed;
      mlp->tp_hidden += x.time - exposed;
      if (x.forward) {
        mlp->tp_fwd_exposed += exposed;
        mlp->tp_fwd_hidden += x.time - exposed;
      }
    }
  }
}

// Context parallelism: exposed communication forward (`fwd->cp`, redone by full recompute) and
// backward. Ring attention also adds its merges to the attention core, so this follows it.
void ContextParallelComm(const GpuMicroBatch& g, LayerTime* lt, LayerForward* fwd) {
  const HardwareProfile& hw = g.hw;
  const int64_t tp = g.shape.tp, cp = g.shape.cp;
  double cp_bwd = 0;
  if (cp > 1 && g.w.sw.cp_attention == CpAttention::kAllGather) {
    // Llama 3's: gather K and V forward, reduce-scatter their gradients backward.
    fwd->cp = CollectiveTime(hw, Collective::kAllGather, tp, cp,
                             static_cast<double>(cp) * g.n * 2.0 * g.kv * 2.0);
    cp_bwd = fwd->cp;
  } else if (cp > 1) {  // ring (flash attention: LayoutProblem refuses CP with materialized scores)
    const RingAttentionCost ring =
        RingAttention(hw, tp, cp, g.n, g.q, fwd->attention, lt->attention - fwd->attention);
    lt->attention += ring.fwd_elementwise + ring.bwd_elementwise;
    fwd->attention += ring.fwd_elementwise;
    fwd->cp = ring.fwd_exposed;
    cp_bwd = ring.bwd_exposed;
  }
  lt->cp_comm = fwd->cp + cp_bwd;
}

// The forward work the recompute policy repeats in backward (docs/planner.md): needs every
// forward part, so it follows them.
void RecomputeCost(const GpuMicroBatch& g, const Projections& ps, const LayerForward& fwd,
                   LayerTime* lt, MlpShare* mlp) {
  const Recompute r = g.shape.recompute;
  // the forward recomputed by full recompute
  const double full = fwd.gemm + fwd.attention + fwd.elementwise;
  switch (r) {
    case Recompute::kNone:
      break;
    case Recompute::kSelective:
      lt->recompute = fwd.attention;
      break;
    case Recompute::kOp: {
      for (size_t i = 1; i < ps.proj.size(); i += 2) {
        lt->recompute += ps.proj[i].fwd;
        if (i >= ps.fc1) mlp->op_recompute += ps.proj[i].fwd;
      }
      lt->recompute += fwd.elementwise;
      mlp->op_recompute += mlp->ew_fwd;
      break;
    }
    case Recompute::kAlternate:
    case Recompute::kFull: {
      const double share = r == Recompute::kFull ? 1.0 : 0.5;
      lt->recompute = share * full;
      lt->tp_comm += share * fwd.tp_exposed;
      lt->tp_hidden += share * fwd.tp_hidden;
      lt->cp_comm += share * fwd.cp;
      break;
    }
  }
}

// An MoE layer: the dense layer with its MLP (GEMMs, activation, the tensor-parallel
// collectives around it) replaced by the MoE half; the model's layer is the mean of both.
// Takes the finished dense layer, so it comes last of the layer's terms.
void MixInMoeLayers(const GpuMicroBatch& g, const MlpShare& mlp, MicroBatchCost* c) {
  const Workload& w = g.w;
  const MicroBatchShape& s = g.shape;
  const Recompute r = s.recompute;
  LayerTime& lt = c->layer;
  const MoeFeedForwardTime moe =
      EstimateMoeFeedForward(w, g.hw, s.tp, s.cp, s.micro_batch, s.ep, s.fp8);
  LayerTime m = lt;
  m.matmul += moe.matmul - mlp.matmul;
  m.elementwise += moe.elementwise - mlp.elementwise;
  m.tp_comm -= mlp.tp_exposed;
  m.tp_hidden -= mlp.tp_hidden;
  m.ep_comm = moe.all_to_all;
  const double mlp_fwd = mlp.fwd_gemm + mlp.ew_fwd + mlp.tp_fwd_exposed;
  switch (r) {
    case Recompute::kNone:
    case Recompute::kSelective:
      break;
    case Recompute::kOp:  // about half of the MoE half's forward (every second GEMM)
      m.recompute += 0.5 * moe.forward - mlp.op_recompute;
      break;
    case Recompute::kAlternate:
    case Recompute::kFull: {
      const double share = r == Recompute::kFull ? 1.0 : 0.5;
      m.recompute += share * (moe.forward - mlp.fwd_gemm - mlp.ew_fwd);
      m.tp_comm -= share * mlp.tp_fwd_exposed;
      m.tp_hidden -= share * mlp.tp_fwd_hidden;
      break;
    }
  }
  m.forward += moe.forward - mlp_fwd;
  const double f_moe = MoeFraction(w), f_dense = 1.0 - f_moe;
  auto mix = [&](double LayerTime::*field) { lt.*field = f_dense * lt.*field + f_moe * m.*field; };
  for (double LayerTime::*field :
       {&LayerTime::matmul, &LayerTime::attention, &LayerTime::elementwise, &LayerTime::recompute,
        &LayerTime::tp_comm, &LayerTime::cp_comm, &LayerTime::ep_comm, &LayerTime::tp_hidden,
        &LayerTime::forward}) {
    mix(field);
  }
  c->layer_params = LayerParamsOnGpu(w, s.tp, s.ep, &c->expert_params);
  c->a2a_bytes_sent = f_moe * moe.bytes_sent;
}

// Output projection (bf16; torchtitan keeps it out of fp8) and a vocabulary-parallel loss.
double OutputAndLoss(const GpuMicroBatch& g) {
  const HardwareProfile& hw = g.hw;
  const int64_t tp = g.shape.tp;
  const double n = g.n, h = g.h;
  const double v = static_cast<double>(g.w.model.vocab_size) / g.t;
  double output =
      GemmTime(hw, n, v, h, Precision::kBf16) + GemmTime(hw, n, h, v, Precision::kBf16) +
      GemmTime(hw, h, v, n, Precision::kBf16) + StreamTime(hw, n * v * kLossBytesPerLogit);
  if (tp > 1) {
    const double gathered = n * h * 2.0;  // the final norm's output, gathered (sequence parallel)
    output += g.sp ? CollectiveTime(hw, Collective::kAllGather, 1, tp, gathered) +
                         CollectiveTime(hw, Collective::kReduceScatter, 1, tp, gathered)
                   : 0.0;
    // Vocabulary-parallel cross-entropy: max, sum of exponentials, target logit (fp32 per token).
    output += 3.0 * CollectiveTime(hw, Collective::kAllReduce, 1, tp, n * 4.0);
  }
  return output;
}

// The embedding lookup and its backward scatter (and a learned position table's).
double Embedding(const GpuMicroBatch& g) {
  const HardwareProfile& hw = g.hw;
  const int64_t tp = g.shape.tp;
  const double n = g.n, h = g.h;
  const double tables = g.w.arch.learned_positions ? 2.0 : 1.0;
  double embedding = StreamTime(hw, tables * n * h * kEmbeddingBytesPerElement);
  if (tp > 1) {  // vocabulary-parallel embedding: sum the partial lookups
    embedding += g.sp ? CollectiveTime(hw, Collective::kReduceScatter, 1, tp, n * h * 2.0)
                      : CollectiveTime(hw, Collective::kAllReduce, 1, tp, n * h * 2.0);
  }
  return embedding;
}

}  // namespace

int64_t StageSplit::max_layers() const { return std::max({first, middle, last}); }

StageSplit SplitStages(int64_t L, const Layout& l) {
  StageSplit s;
  if (l.pp == 1) {
    s.first = s.last = L;
    return s;
  }
  const int64_t even = CeilDiv(L, l.pp);
  s.first = l.first_layers > 0 ? l.first_layers : even;
  if (l.pp == 2) {
    s.last = l.last_layers > 0 ? l.last_layers : L - s.first;
    return s;
  }
  s.last = l.last_layers > 0 ? l.last_layers : even;
  s.middle = CeilDiv(std::max<int64_t>(0, L - s.first - s.last), l.pp - 2);
  return s;
}

std::string StageSplitProblem(int64_t L, const Layout& l) {
  if (l.pp == 1) {
    return l.first_layers > 0 || l.last_layers > 0 ? "first / last layers need pp > 1" : "";
  }
  const StageSplit s = SplitStages(L, l);
  if (s.first < 1 || s.last < 1) return "every pipeline rank needs at least one layer";
  if (l.pp == 2 && s.first + s.last != L) {
    return fmt::format("pp = 2: first ({}) + last ({}) != n_layers ({})", s.first, s.last, L);
  }
  if (l.pp > 2 && L - s.first - s.last < l.pp - 2) {
    return fmt::format(
        "first ({}) + last ({}) leave {} layers for {} middle pipeline ranks (need >= 1 each)",
        s.first, s.last, L - s.first - s.last, l.pp - 2);
  }
  return "";
}

double RecomputeFlopsPerToken(const Workload& w, Recompute r) {
  const ModelSpec& m = w.model;
  const double h = static_cast<double>(m.dim), s = static_cast<double>(w.seq_len);
  const double layer_fwd = 2.0 * w.params.per_layer + 4.0 * s * h;  // matmuls + attention
  const double L = static_cast<double>(m.n_layers);
  const LayerWidths lw = WidthsFor(m, 1, w.arch);
  switch (r) {
    case Recompute::kNone:
      return 0;
    case Recompute::kSelective:
      return L * 4.0 * s * h;  // QK^T and PV again
    case Recompute::kOp: {
      // Every second projection: Llama's wk, wo, w3; GPT's wo and fc2.
      const double hh = static_cast<double>(lw.h);
      const double per = w.arch.gated_mlp
                             ? hh * (static_cast<double>(lw.kv) + static_cast<double>(lw.q) +
                                     static_cast<double>(lw.f))
                             : hh * (static_cast<double>(lw.q) + static_cast<double>(lw.f));
      return L * 2.0 * per;
    }
    case Recompute::kAlternate:
      return 0.5 * L * layer_fwd;
    case Recompute::kFull:
      return L * layer_fwd;
  }
  return 0;
}

MicroBatchShape MicroBatchShapeOf(const Layout& l) {
  MicroBatchShape s;
  s.tp = l.tp;
  s.cp = l.cp;
  s.micro_batch = l.micro_batch;
  s.recompute = l.recompute;
  s.fp8 = l.fp8;
  s.ep = l.ep;
  return s;
}

MicroBatchCost EstimateMicroBatch(const Workload& w, const HardwareProfile& hw,
                                  const MicroBatchShape& shape) {
  const GpuMicroBatch g(w, hw, shape);
  MicroBatchCost c;
  LayerTime& lt = c.layer;
  LayerForward fwd;  // the forward parts, for recomputation and LayerTime::forward
  MlpShare mlp;      // the MLP's part, which an MoE layer replaces
  // One dense layer: compute, then the communication around it (ring attention adds to the
  // attention core), then what recomputation repeats of all that forward.
  const Projections ps = ProjectionGemms(g, &lt, &fwd, &mlp);
  AttentionCore(g, &lt, &fwd);
  Elementwise(g, ps, &lt, &fwd, &mlp);
  TensorParallelComm(g, ps, &lt, &fwd, &mlp);
  ContextParallelComm(g, &lt, &fwd);
  RecomputeCost(g, ps, fwd, &lt, &mlp);
  lt.forward = fwd.gemm + fwd.attention + fwd.elementwise + fwd.tp_exposed + fwd.cp;
  c.layer_params = g.lw.params;
  if (IsMoe(w)) MixInMoeLayers(g, mlp, &c);
  // Once per micro-batch on the last and the first pipeline rank.
  c.output = OutputAndLoss(g);
  c.recompute_flops_per_token = RecomputeFlopsPerToken(w, shape.recompute);
  c.embedding = Embedding(g);
  return c;
}

void EstimatePipeline(const Workload& w, const Layout& l, const MicroBatchCost& mb, StepTime* s) {
  const int64_t L = w.model.n_layers;
  const double layer = mb.layer.total();
  const double v = static_cast<double>(l.vpp);
  const double m = static_cast<double>(l.micro_batches);
  // Pipeline ranks as they are built: the first runs the embedding, the last the output layer and
  // the loss; uneven splits move layers off them.
  s->split = SplitStages(L, l);
  double sum = 0;
  if (l.pp == 1) {
    s->stage_first = s->stage_last = s->stage =
        static_cast<double>(L) * layer + mb.embedding + mb.output;
    sum = s->stage;
  } else {
    s->stage_first = static_cast<double>(s->split.first) * layer + mb.embedding;
    s->stage_last = static_cast<double>(s->split.last) * layer + mb.output;
    s->stage_middle = static_cast<double>(s->split.middle) * layer;
    s->stage = std::max({s->stage_first, s->stage_last, s->stage_middle});
    sum = static_cast<double>(L) * layer + mb.embedding + mb.output;
  }
  // 1F1B is a flow shop: the slowest rank runs every micro-batch back to back, and the others'
  // work adds the fill and drain once; interleaving cuts every rank's work into v chunks, so the
  // fill and drain shrink by v (Narayanan et al. 2021: bubble (p - 1) / (v m) of equal stages).
  s->compute = m * s->stage;
  s->bubble = (sum - s->stage) / v;
  // The V schedules (two chunks per rank, split backward; parallel/pipeline_schedule.h's
  // BubbleFraction under F = I = W): zbv's bubble is interleaving's at v = 2, dualpipev's
  // (2p - 3) / (6 (p - 1)) of 1F1B's.
  if (l.schedule == PipeSchedule::kDualPipeV && l.pp > 1) {
    const double p = static_cast<double>(l.pp);
    s->bubble = (sum - s->stage) * (2 * p - 3) / (6 * (p - 1));
  }
}

StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l,
                          const MicroBatchCost& mb) {
  StepTime s;
  s.mb = mb;
  const ModelSpec& model = w.model;
  const int64_t L = model.n_layers;
  const double layer = mb.layer.total();
  const double pp = static_cast<double>(l.pp), v = static_cast<double>(l.vpp);
  const double m = static_cast<double>(l.micro_batches);
  EstimatePipeline(w, l, mb, &s);
  const double layers_run = m * static_cast<double>(s.split.max_layers());
  s.tp_comm = layers_run * mb.layer.tp_comm;
  s.cp_comm = layers_run * mb.layer.cp_comm;
  s.ep_comm = layers_run * mb.layer.ep_comm;

  const double tokens = static_cast<double>(l.micro_batch * w.seq_len / l.cp);
  const double layer_params = mb.layer_params;
  double pp_send = 0;  // one activation (or gradient) send between stages
  if (l.pp > 1) {
    const GroupPlacement g = PlaceGroup(hw, l.tp * l.cp * l.dp(), l.pp);
    // Each tensor-parallel rank sends its 1/tp of the activation (sequence-parallel shards, or
    // Megatron's scatter/gather optimization, which then all-gathers the full activation over
    // NVLink on the receiving side because every tensor-parallel rank needs all of it).
    const double full = tokens * static_cast<double>(model.dim) * 2.0;
    pp_send = SendTime(hw, g.in_node, full / static_cast<double>(l.tp));
    if (l.tp > 1 && !w.sw.sequence_parallel) {
      pp_send += CollectiveTime(hw, Collective::kAllGather, 1, l.tp, full);
    }
    // Fill and drain put one send per hop on the critical path in each direction; in the steady
    // state each micro-batch sends v activations and v gradients.
    const double steady = m * 2.0 * v * pp_send;
    s.pp_comm = 2.0 * (pp - 1.0) * pp_send + (w.sw.pp_overlap ? 0.0 : steady);
    s.pp_hidden = w.sw.pp_overlap ? steady : 0.0;
  }

  // Parameters on the busiest rank's stage (after tensor parallelism), the unit FSDP moves.
  const double vocab =
      static_cast<double>(model.vocab_size * model.dim) / static_cast<double>(l.tp);
  const double positions =
      w.arch.learned_positions ? static_cast<double>(w.seq_len * model.dim) : 0.0;
  double params;
  if (l.pp == 1) {
    params = static_cast<double>(L) * layer_params + (model.tie_embeddings ? 1.0 : 2.0) * vocab +
             positions;
  } else {
    params = std::max({static_cast<double>(s.split.first) * layer_params + vocab + positions,
                       static_cast<double>(s.split.last) * layer_params + vocab,
                       static_cast<double>(s.split.middle) * layer_params});
  }
  // Gradient reduction can hide behind backward compute, parameter gathers behind forward: of one
  // micro-batch on the slowest rank (its last backward, its first forward) when they happen once
  // per step, of every micro-batch for FSDP's per-micro-batch traffic. One layer's share cannot
  // hide (the first gather, the last reduction).
  const double fwd_share = layer > 0 ? mb.layer.forward / layer : 0.5;
  const double fwd_mb = s.stage * fwd_share, bwd_mb = s.stage * (1.0 - fwd_share);
  const double unit = std::min(1.0, layer_params / params);
  const bool overlap = w.sw.dp_overlap;
  // MoE: of the stage's parameters on this GPU, the routed experts (E / ep per layer) are sharded
  // over the shard / ep ranks holding the same experts; the rest over the whole shard group.
  // Sharded state per GPU is the same either way: (rest + experts x ep) / shard.
  const double stage_layers =
      l.pp == 1 ? static_cast<double>(L) : static_cast<double>(s.split.max_layers());
  const double experts = stage_layers * mb.expert_params;
  const double state_params = params + experts * static_cast<double>(l.ep - 1);
  auto exposed = [&](double comm, double behind) {
    if (!overlap) return comm;
    return unit * comm + std::max(0.0, (1.0 - unit) * comm - behind);
  };
  const double mem_bw = hw.hbm_bandwidth * hw.eff.memory_bound;
  double dp = 0, dp_exposed = 0, copies = 0;
  const int64_t shard = l.shard();  // dp_shard x cp: the CP ranks share parameters
  if (shard > 1) {
    // Without expert parallelism the experts travel with their layer (one unit, tenax train's
    // Fsdp); with it they are a unit of their own over the shard / ep ranks (ep x tp x cp apart).
    const int64_t eshard = shard / l.ep;
    const double apart = l.ep > 1 ? experts : 0.0;
    auto both = [&](Collective kind, double bytes_per_param) {
      return CollectiveTime(hw, kind, l.tp, shard, bytes_per_param * (params - apart)) +
             (apart > 0
                  ? CollectiveTime(hw, kind, l.tp * l.cp * l.ep, eshard, bytes_per_param * apart)
                  : 0.0);
    };
    const double gather = both(Collective::kAllGather, 2.0);       // bf16
    const double scatter = both(Collective::kReduceScatter, 4.0);  // fp32
    if (l.reshard) {  // ZeRO-3: gather for forward, again for backward, reduce per micro-batch
      dp = m * (2.0 * gather + scatter);
      dp_exposed = m * (exposed(gather, fwd_mb) + exposed(gather + scatter, bwd_mb));
      copies = m * (2.0 * kFsdpGatherCopyBytes + kFsdpScatterCopyBytes) * params / mem_bw;
    } else {  // distributed optimizer: one reduce-scatter, one all-gather per step
      dp = gather + scatter;
      dp_exposed = exposed(gather, fwd_mb) + exposed(scatter, bwd_mb);
      copies = (kFsdpGatherCopyBytes + kFsdpScatterCopyBytes) * params / mem_bw;
    }
  }
  if (l.dp_replicate > 1) {  // DDP / HSDP: all-reduce the fp32 gradient (shard) across replicas
    const int64_t stride = l.tp * l.cp * l.dp_shard;
    const double ar = CollectiveTime(hw, Collective::kAllReduce, stride, l.dp_replicate,
                                     4.0 * state_params / static_cast<double>(shard));
    dp += ar;
    dp_exposed += exposed(ar, shard > 1 ? 0.0 : bwd_mb);
  }
  s.dp_comm = dp;
  s.dp_exposed = dp_exposed;
  s.dp_copies = copies;
  const double tp_hidden = layers_run * mb.layer.tp_hidden;
  s.interference = hw.eff.comm_interference * ((dp - dp_exposed) + tp_hidden + s.pp_hidden);
  s.optimizer = kOptimizerBytesPerParam * state_params / static_cast<double>(shard) / mem_bw;

  s.step =
      s.compute + s.bubble + s.pp_comm + s.dp_exposed + s.dp_copies + s.interference + s.optimizer;
  const double gpus = static_cast<double>(l.gpus());
  const double batch = static_cast<double>(w.global_batch_tokens);
  s.tokens_per_s_per_gpu = batch / s.step / gpus;
  s.tflops_per_gpu = s.tokens_per_s_per_gpu * w.flops_per_token / 1e12;
  s.hardware_tflops_per_gpu =
      s.tokens_per_s_per_gpu * (w.flops_per_token + mb.recompute_flops_per_token) / 1e12;
  s.mfu = s.tflops_per_gpu * 1e12 / hw.peak_bf16;
  s.hfu = s.hardware_tflops_per_gpu * 1e12 / hw.peak_bf16;
  return s;
}

StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l) {
  return EstimateStepTime(w, hw, l, EstimateMicroBatch(w, hw, MicroBatchShapeOf(l)));
}

double SdcReplaySeconds(const StepTime& t) {
  return std::max(0.0, t.step - t.dp_exposed - t.optimizer);
}

double SdcOverhead(const StepTime& t, int64_t interval) {
  if (interval <= 0 || !(t.step > 0)) return 0;
  return SdcReplaySeconds(t) / (static_cast<double>(interval) * t.step);
}

}  // namespace tenax::plan
