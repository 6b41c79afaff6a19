#include "tenax/plan/memory_model.h"

#include <algorithm>

namespace tenax::plan {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-GPU bytes of one stage's parameters, gradients and optimizer state.
void AddStateBytes(double stage_params, double unit_params, const Layout& l, MemoryBreakdown* m) {
  const double ds = static_cast<double>(l.dp_shard);
  // Mixed precision as in torchtitan and Llama 3: fp32 master weights and AdamW moments (12 B),
  // fp32 gradients (4 B, reduced in fp32), bf16 copies for compute (2 B).
  m->optimizer = 12.0 * stage_params / ds;
  m->grads = 4.0 * stage_params / ds;
  if (l.dp_shard == 1) {
    m->params = 2.0 * stage_params;
    return;
  }
  // FSDP gathers one unit (a layer, or the embedding/output) while prefetching the next.
  const double window = 2.0 * unit_params;
  if (l.reshard) {
    m->params = 2.0 * window;
    m->grads += 4.0 * window;  // a unit's unsharded gradient lives until its reduce-scatter
  } else {
    m->params = 2.0 * stage_params;
    // Gradients accumulate unsharded across micro-batches and are reduce-scattered once a step.
    m->grads += l.micro_batches > 1 ? 4.0 * stage_params : 4.0 * window;
  }
}

}  // namespace

double ActivationBytesPerToken(const ModelSpec& model, int64_t tp, Recompute r) {
  const LayerWidths w = WidthsFor(model, tp);
  // Sequence parallelism shards the norm regions' tokens over tp, so the full-width tensors
  // (layer input, norm outputs, residual-stream outputs) count h / tp per token.
  const double h = static_cast<double>(w.h) / static_cast<double>(tp);
  const double q = static_cast<double>(w.q), kv = static_cast<double>(w.kv);
  const double f = static_cast<double>(w.f);
  const double lse = 4.0 * static_cast<double>(w.heads);  // flash attention's fp32 logsumexp
  switch (r) {
    case Recompute::kNone:
      // Attention block: input and norm output (2h+2h), q (2q), k and v (4kv), attention output
      // (2q); MLP block: input and norm output (2h+2h), w1 and w3 outputs, silu(w1 x) and the
      // product fed to w2 (4 x 2f). bf16 = 2 bytes each; fp32 rstd of the norms (8 B).
      return 8.0 * h + 4.0 * q + 4.0 * kv + 8.0 * f + lse + 8.0;
    case Recompute::kSelective:
      // torchtitan's op policy keeps the layer input, q and v (1st and 3rd matmuls), the
      // attention output, w1's output (5th) and w2's output (7th); k, wo and w3 and every
      // elementwise op are recomputed.
      return 2.0 * h + 2.0 * q + 2.0 * kv + 2.0 * q + 2.0 * f + 2.0 * h + lse;
    case Recompute::kFull:
      return 2.0 * h;  // only the layer input
  }
  return 0;
}

MemoryBreakdown EstimateMemory(const Workload& w, const HardwareProfile& hw, const Layout& l) {
  const ModelSpec& m = w.model;
  const LayerWidths lw = WidthsFor(m, l.tp);
  const int64_t L = m.n_layers;
  const int64_t chunk_layers = CeilDiv(L, l.pp * l.vpp);
  const int64_t layers = l.pp == 1 ? L : std::min(L, l.vpp * chunk_layers);
  const double vocab_params = static_cast<double>(m.vocab_size) * static_cast<double>(m.dim) /
                              static_cast<double>(l.tp);                   // vocabulary-parallel
  const double n = static_cast<double>(l.micro_batch * w.seq_len / l.cp);  // tokens per GPU
  const double act = ActivationBytesPerToken(m, l.tp, l.recompute) * n;
  const double logits = n * static_cast<double>(m.vocab_size) / static_cast<double>(l.tp) *
                        (2.0 + 4.0 + 4.0);  // bf16 logits, fp32 copy for the loss, fp32 grad
  const double workspace = ActivationBytesPerToken(m, l.tp, Recompute::kNone) * n;
  double buffers = 0;
  if (l.tp > 1) buffers += 2.0 * n * static_cast<double>(m.dim) * 2.0;  // gathered inputs
  if (l.pp > 1) buffers += 4.0 * n * static_cast<double>(m.dim) / static_cast<double>(l.tp) * 2.0;

  auto stage = [&](bool first, bool last) {
    MemoryBreakdown b;
    double params = static_cast<double>(layers) * lw.params;
    if (first) params += vocab_params;
    if (last && (!first || !m.tie_embeddings)) params += vocab_params + m.dim;
    AddStateBytes(params, std::max(lw.params, first || last ? vocab_params : 0.0), l, &b);
    int64_t sets = 0;
    if (l.pp == 1) {
      sets = L;  // one micro-batch at a time; gradient accumulation frees it after backward
    } else if (l.vpp == 1) {
      // 1F1B: stage i holds pp - i micro-batches before its first backward.
      sets = std::min(l.micro_batches, first ? l.pp : int64_t{1}) * layers;
    } else {
      // Interleaved 1F1B (Megatron): rank 0 warms up with 2(pp-1) + (v-1)pp chunks, the last
      // rank with (v-1)pp, each holding one more in the steady state.
      const int64_t chunks = first ? (l.vpp + 1) * l.pp - 1 : (l.vpp - 1) * l.pp + 1;
      sets = std::min(l.micro_batches * l.vpp, chunks) * chunk_layers;
    }
    b.inflight_sets = sets;
    b.layers_held = layers;
    b.activations = static_cast<double>(sets) * act;
    b.logits = last ? logits : 0.0;
    b.workspace = workspace;
    b.buffers = buffers;
    b.reserved = hw.reserved_bytes;
    b.stage = l.pp == 1 ? "only" : first ? "first" : "last";
    return b;
  };
  if (l.pp == 1) return stage(true, true);
  MemoryBreakdown a = stage(true, false), b = stage(false, true);
  return a.total() >= b.total() ? a : b;
}

}  // namespace tenax::plan
