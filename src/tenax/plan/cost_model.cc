#include "tenax/plan/cost_model.h"

#include <algorithm>
#include <cmath>

namespace tenax::plan {
namespace {

// Bytes the elementwise kernels move per token of one layer's forward, per element of each
// width (counted kernel by kernel in docs/planner.md).
struct ElementwiseBytes {
  double h, q, kv, f;
};
// Eager PyTorch, one kernel per op:
//   h (sequence-parallel regions): two RMSNorms computed in fp32 (36 B each), two residual adds;
//   q: rotary embedding (20 B), repeat_kv's expanded k and v (4 B), the output transpose copy;
//   kv: rotary embedding on k (20 B), repeat_kv's reads (4 B);
//   f: SwiGLU's silu and product (10 B).
constexpr ElementwiseBytes kEagerBytes = {2 * 36.0 + 2 * 6.0, 20.0 + 4.0 + 4.0, 20.0 + 4.0, 10.0};
// Fused: add+RMSNorm reads x and the residual and writes both outputs (8 B, twice); rotary reads
// and writes q and k once (4 B); SwiGLU reads two inputs and writes one (6 B); no copies.
constexpr ElementwiseBytes kFusedBytes = {2 * 8.0, 4.0, 4.0, 6.0};
// An elementwise op's backward reads its saved inputs and the incoming gradient and writes the
// outgoing one: about twice its forward traffic.
constexpr double kBackwardElementwiseFactor = 2.0;
// Flash attention's backward does 2.5x the forward's matmul FLOPs (it recomputes the scores).
constexpr double kAttentionBackwardFactor = 2.5;
// Bytes per logit in the loss: bf16 logits read, fp32 upcast written and read by log-softmax,
// its gradient written in fp32 and cast back (20 B), forward and backward together.
constexpr double kLossBytesPerLogit = 20.0;
// AdamW touches fp32 parameter, gradient, m and v (read) and parameter, m and v (write), plus
// the gradient-norm pass: 8 x 4 bytes per parameter of the local shard.
constexpr double kOptimizerBytesPerParam = 32.0;
// FSDP2 around each all-gather: cast the fp32 shard to bf16 into the send buffer (small) and copy
// the gathered flat buffer out into the parameters (read 2 + write 2 bytes per parameter); around
// each reduce-scatter: copy the bf16 gradients into an fp32 send buffer (read 2 + write 4).
constexpr double kFsdpGatherCopyBytes = 4.0;
constexpr double kFsdpScatterCopyBytes = 6.0;
// Dynamic-scaling fp8 casts per GEMM: read bf16 (2), find amax (2), write fp8 (1) for X and W in
// forward and dY, W^T, X^T in backward.
constexpr double kFp8CastBytesPerElement = 5.0;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Gemm {
  double n, k;  // weight is k x n on this rank; m (tokens) is shared
};

}  // namespace

double GemmEfficiency(double m, double n, double k, double bytes_per_element, double max_eff,
                      double half_intensity) {
  const double intensity = 2.0 * m * n * k / (bytes_per_element * (m * k + k * n + m * n));
  return max_eff * intensity / (intensity + half_intensity);
}

double RingCollectiveTime(const HardwareProfile& hw, int64_t stride, int64_t ranks, double bytes) {
  if (ranks <= 1) return 0;
  const int64_t span = stride * ranks;
  const bool in_node = span <= hw.gpus_per_node && hw.gpus_per_node % span == 0;
  const Link& link = in_node ? hw.nvlink : hw.network;
  const double eff = in_node ? hw.eff.collective_nvlink : hw.eff.collective_network;
  const double r = static_cast<double>(ranks);
  return (r - 1.0) * link.latency + (r - 1.0) / r * bytes / (link.bandwidth * eff);
}

MicroBatchCost EstimateMicroBatch(const Workload& w, const HardwareProfile& hw, int64_t tp,
                                  int64_t cp, int64_t micro_batch, Recompute r, bool fp8) {
  const ModelSpec& model = w.model;
  const LayerWidths lw = WidthsFor(model, tp);
  const double n = static_cast<double>(micro_batch * w.seq_len / cp);  // tokens on this GPU
  const double h = static_cast<double>(lw.h), q = static_cast<double>(lw.q);
  const double kv = static_cast<double>(lw.kv), f = static_cast<double>(lw.f);
  const double mem_bw = hw.hbm_bandwidth * hw.eff.memory_bound;

  // wq, wk, wv, wo, w1, w3, w2 in execution order; the selective policy recomputes the 2nd,
  // 4th and 6th (wk, wo, w3).
  const Gemm gemms[7] = {{q, h}, {kv, h}, {kv, h}, {h, q}, {f, h}, {f, h}, {h, f}};
  double fwd[7];
  double cast_bytes = 0;
  for (int i = 0; i < 7; ++i) {
    const double flops = 2.0 * n * gemms[i].n * gemms[i].k;
    if (fp8 && hw.peak_fp8 > 0) {
      const double e = GemmEfficiency(n, gemms[i].n, gemms[i].k, 1.0, hw.eff.fp8_matmul,
                                      hw.eff.matmul_half_intensity);
      fwd[i] = flops / (hw.peak_fp8 * e);
      cast_bytes += kFp8CastBytesPerElement *
                    (2.0 * n * gemms[i].k + 2.0 * gemms[i].k * gemms[i].n + n * gemms[i].n);
    } else {
      const double e = GemmEfficiency(n, gemms[i].n, gemms[i].k, 2.0, hw.eff.matmul,
                                      hw.eff.matmul_half_intensity);
      fwd[i] = flops / (hw.peak_bf16 * e);
    }
  }
  double fwd_total = 0;
  for (double t : fwd) fwd_total += t;

  MicroBatchCost c;
  LayerTime& t = c.layer;
  t.matmul = 3.0 * fwd_total;  // backward = dX and dW, each the forward's size
  // Causal attention: each local query sees seq_len / 2 keys on average (context parallelism
  // balances the causal triangle across ranks); QK^T and PV are 2 FLOPs per multiply-add each.
  const double attn_fwd = 2.0 * 2.0 * n * (static_cast<double>(w.seq_len) / 2.0) *
                          static_cast<double>(lw.head_dim * lw.heads) /
                          (hw.peak_bf16 * hw.eff.attention);
  t.attention = attn_fwd * (1.0 + kAttentionBackwardFactor);
  const ElementwiseBytes& eb = w.kernels == Kernels::kEager ? kEagerBytes : kFusedBytes;
  const double ew_fwd =
      n * (eb.h * h / static_cast<double>(tp) + eb.q * q + eb.kv * kv + eb.f * f) / mem_bw;
  t.elementwise = ew_fwd * (1.0 + kBackwardElementwiseFactor) + cast_bytes / mem_bw;

  // Sequence parallelism: forward all-gathers the normed input before attention and before the
  // MLP and reduce-scatters both outputs; backward mirrors it (4 + 4 collectives).
  const double tp_one = RingCollectiveTime(hw, 1, tp, n * h * 2.0);
  // Context parallelism (Llama 3's all-gather flavour): gather K and V forward, reduce-scatter
  // their gradients backward.
  const double cp_one =
      RingCollectiveTime(hw, tp, cp, static_cast<double>(cp) * n * 2.0 * kv * 2.0);
  double tp_count = 8, cp_count = 2;
  switch (r) {
    case Recompute::kNone:
      break;
    case Recompute::kSelective:
      t.recompute = fwd[1] + fwd[3] + fwd[5] + ew_fwd;
      break;
    case Recompute::kFull:
      t.recompute = fwd_total + attn_fwd + ew_fwd;
      tp_count += 4;
      cp_count += 1;
      break;
  }
  t.tp_comm = tp_count * tp_one * (1.0 - hw.eff.tp_overlap);
  t.tp_hidden = tp_count * tp_one * hw.eff.tp_overlap;
  t.cp_comm = cp_count * cp_one;

  // Output projection (bf16; torchtitan keeps it out of fp8) and a vocabulary-parallel loss.
  const double v = static_cast<double>(model.vocab_size) / static_cast<double>(tp);
  const double e_out = GemmEfficiency(n, v, h, 2.0, hw.eff.matmul, hw.eff.matmul_half_intensity);
  c.output = 3.0 * 2.0 * n * v * h / (hw.peak_bf16 * e_out) + n * v * kLossBytesPerLogit / mem_bw +
             2.0 * tp_one;
  // Embedding: write the looked-up rows, and in backward scatter-add fp32 gradients.
  c.embedding = n * h * (2.0 + 2.0 + 8.0) / mem_bw;
  return c;
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

  // Slowest pipeline rank: whole chunks of layers, with the embedding and output work placed in
  // the slack of short chunks when there is enough (Llama 3 drops a layer from the first and last
  // stages for this).
  const double extra = (mb.output + mb.embedding) / layer;
  if (l.pp == 1) {
    s.stage_load = static_cast<double>(L) + extra;
  } else {
    const double whole = v * static_cast<double>(CeilDiv(L, l.pp * l.vpp));
    s.stage_load = std::max(whole, (static_cast<double>(L) + extra) / pp);
  }
  s.stage = s.stage_load * layer;
  s.compute = m * s.stage;
  // Interleaved 1F1B: the fill and drain last (pp - 1) chunk-times, a chunk being 1/v of a stage.
  s.bubble = (pp - 1.0) / v * s.stage;

  const double tokens = static_cast<double>(l.micro_batch * w.seq_len / l.cp);
  const LayerWidths lw = WidthsFor(model, l.tp);
  double pp_send = 0;  // one activation (or gradient) send between stages
  if (l.pp > 1) {
    const int64_t stride = l.tp * l.cp * l.dp();
    const int64_t span = stride * l.pp;
    const bool in_node = span <= hw.gpus_per_node && hw.gpus_per_node % span == 0;
    const Link& link = in_node ? hw.nvlink : hw.network;
    const double eff = in_node ? hw.eff.collective_nvlink : hw.eff.collective_network;
    // Sequence-parallel activations: each tensor-parallel rank sends its shard.
    const double bytes = tokens * static_cast<double>(lw.h) / static_cast<double>(l.tp) * 2.0;
    pp_send = link.latency + bytes / (link.bandwidth * eff);
    // Fill and drain put one send per hop on the critical path in each direction; in the steady
    // state each micro-batch sends v activations and v gradients, partly hidden.
    s.pp_comm = 2.0 * (pp - 1.0) * pp_send + m * 2.0 * v * pp_send * (1.0 - hw.eff.pp_overlap);
  }

  // Parameters on this GPU's stage (after tensor parallelism), the unit FSDP moves.
  const int64_t chunk_layers = CeilDiv(L, l.pp * l.vpp);
  const double layers =
      l.pp == 1 ? static_cast<double>(L) : static_cast<double>(std::min(L, l.vpp * chunk_layers));
  const double vocab =
      static_cast<double>(model.vocab_size * model.dim) / static_cast<double>(l.tp);
  const double params =
      layers * lw.params + (l.pp == 1 && !model.tie_embeddings ? 2.0 : 1.0) * vocab;
  const double mem_bw = hw.hbm_bandwidth * hw.eff.memory_bound;
  double dp = 0, copies = 0;
  if (l.dp_shard > 1) {
    const int64_t stride = l.tp * l.cp;
    const double gather = RingCollectiveTime(hw, stride, l.dp_shard, 2.0 * params);   // bf16
    const double scatter = RingCollectiveTime(hw, stride, l.dp_shard, 4.0 * params);  // fp32
    const double rounds = l.reshard ? m : 1.0;
    const double gathers = l.reshard ? 2.0 : 1.0;  // ZeRO-3 gathers again for backward
    dp += rounds * (gathers * gather + scatter);
    copies += rounds * (gathers * kFsdpGatherCopyBytes + kFsdpScatterCopyBytes) * params / mem_bw;
  }
  if (l.dp_replicate > 1) {
    const int64_t stride = l.tp * l.cp * l.dp_shard;
    const double shard = 4.0 * params / static_cast<double>(l.dp_shard);
    dp += 2.0 * RingCollectiveTime(hw, stride, l.dp_replicate, shard);  // all-reduce
  }
  s.dp_comm = dp;
  s.dp_copies = copies;
  // Prefetching hides FSDP traffic behind compute, except what the overlap fraction says cannot
  // be (the first gather, the last reduce-scatter) and whatever exceeds the compute.
  s.dp_exposed = std::max(dp * (1.0 - hw.eff.dp_overlap), dp - s.compute);
  const double tp_hidden = m * s.stage_load * mb.layer.tp_hidden;
  const double pp_hidden = l.pp > 1 ? m * 2.0 * v * pp_send * hw.eff.pp_overlap : 0.0;
  s.interference = hw.eff.comm_interference * ((dp - s.dp_exposed) + tp_hidden + pp_hidden);
  s.optimizer = kOptimizerBytesPerParam * params / static_cast<double>(l.dp_shard) / mem_bw;

  s.step =
      s.compute + s.bubble + s.pp_comm + s.dp_exposed + s.dp_copies + s.interference + s.optimizer;
  const double gpus = static_cast<double>(l.gpus());
  const double batch = static_cast<double>(w.global_batch_tokens);
  s.tokens_per_s_per_gpu = batch / s.step / gpus;
  s.tflops_per_gpu = s.tokens_per_s_per_gpu * w.flops_per_token / 1e12;
  s.mfu = s.tflops_per_gpu * 1e12 / hw.peak_bf16;
  return s;
}

StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l) {
  return EstimateStepTime(w, hw, l,
                          EstimateMicroBatch(w, hw, l.tp, l.cp, l.micro_batch, l.recompute, l.fp8));
}

}  // namespace tenax::plan
