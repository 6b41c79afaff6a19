#include "tenax/plan/memory_model.h"

#include <algorithm>

#include "tenax/plan/cost_model.h"
#include "tenax/plan/moe_model.h"

namespace tenax::plan {
namespace {

// Per-GPU bytes of one stage's parameters, gradients and optimizer state. `stage_params`: what
// the GPU computes with (MoE: E / ep experts per layer); `state_params`: what its shard group
// holds between them (MoE: every expert, as expert parallelism borrows dp_shard ranks).
void AddStateBytes(double stage_params, double state_params, double unit_params, const Layout& l,
                   MemoryBreakdown* m) {
  const double ds = static_cast<double>(l.shard());
  // Mixed precision as in torchtitan and Llama 3: fp32 master weights and AdamW moments (12 B),
  // fp32 gradients (4 B, reduced in fp32), bf16 copies for compute (2 B).
  m->optimizer = 12.0 * state_params / ds;
  m->grads = 4.0 * state_params / ds;
  if (l.shard() == 1) {
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

double ActivationBytesPerToken(const Workload& w, int64_t tp, Recompute r) {
  const LayerWidths lw = WidthsFor(w.model, tp, w.arch);
  const bool sp = w.sw.sequence_parallel && tp > 1;
  // Sequence parallelism shards the norm regions' tokens over tp, so the full-width tensors
  // (layer input, norm outputs, dropout masks) count h / tp per token; without it they are
  // replicated on every tensor-parallel rank (Korthikanti et al.'s 10 sbh term).
  const double he = static_cast<double>(lw.h) / (sp ? static_cast<double>(tp) : 1.0);
  const double q = static_cast<double>(lw.q), kv = static_cast<double>(lw.kv);
  const double f = static_cast<double>(lw.f);
  const double heads = static_cast<double>(lw.heads);
  const bool dropout = w.sw.dropout > 0;
  const double mask = dropout ? he : 0.0;  // one byte per element, after attention and the MLP
  // The attention core's saved state: flash keeps only the fp32 log-sum-exp per head; the
  // materialized kernel keeps the softmax output (2 B per score) and, with dropout, its mask (1 B)
  // and output (2 B): Korthikanti et al.'s 5as term.
  const double core = w.sw.attention == AttentionKind::kMaterialized
                          ? heads * static_cast<double>(w.seq_len) * (dropout ? 5.0 : 2.0)
                          : 4.0 * heads;
  // Attention block: input and norm output (2h + 2h), q (2q), k and v (4kv), attention output
  // (2q), the core, the dropout mask. MLP block: input and norm output (2h + 2h), then SwiGLU's
  // w1 and w3 outputs, silu(w1 x) and the product fed to w2 (4 x 2f) or GELU's input and output
  // (2 x 2f), the dropout mask. Norm statistics: fp32 rstd (and mean), 8 B.
  double mlp = (w.arch.gated_mlp ? 8.0 : 4.0) * f;
  double op_mlp = 2.0 * f;  // what the op policy keeps of the MLP (w1's output)
  if (IsMoe(w)) {           // MoE layers: the routed rows and the experts' intermediates instead
    const double frac = MoeFraction(w), moe = MoeFeedForwardBytesPerToken(w, tp);
    mlp = (1.0 - frac) * mlp + frac * moe;
    op_mlp = (1.0 - frac) * op_mlp + frac * 0.5 * moe;
  }
  const double none = 4.0 * he + 4.0 * q + 4.0 * kv + core + mask + 4.0 * he + mlp + mask + 8.0;
  switch (r) {
    case Recompute::kNone:
      return none;
    case Recompute::kSelective:
      // Megatron's selective recomputation drops the attention core's saved state (the 5as term,
      // or flash's log-sum-exp) and recomputes it; its inputs and output stay saved.
      return none - core;
    case Recompute::kOp:
      // torchtitan's op policy keeps the layer input, the 1st and 3rd matmul outputs (q and v, or
      // the fused qkv), the attention output, the 5th (w1 or fc1) and the block output.
      return 2.0 * he + 2.0 * q + 2.0 * kv + 2.0 * q + op_mlp + 2.0 * he + 4.0 * heads;
    case Recompute::kAlternate:
      return 0.5 * (none + 2.0 * he);
    case Recompute::kFull:
      return 2.0 * he;  // only the layer input
  }
  return 0;
}

LayerFootprint Footprint(const Workload& w, int64_t tp, Recompute r) {
  LayerFootprint f;
  f.widths = WidthsFor(w.model, tp, w.arch);
  f.saved_bytes_per_token = ActivationBytesPerToken(w, tp, r);
  f.full_bytes_per_token = ActivationBytesPerToken(w, tp, Recompute::kNone);
  return f;
}

MemoryBreakdown EstimateMemory(const Workload& w, const HardwareProfile& hw, const Layout& l) {
  return EstimateMemory(w, hw, l, Footprint(w, l.tp, l.recompute));
}

MemoryBreakdown EstimateMemory(const Workload& w, const HardwareProfile& hw, const Layout& l,
                               const LayerFootprint& f) {
  const ModelSpec& m = w.model;
  const int64_t L = m.n_layers;
  const StageSplit split = SplitStages(L, l);
  const double vocab_params = static_cast<double>(m.vocab_size) * static_cast<double>(m.dim) /
                              static_cast<double>(l.tp);                   // vocabulary-parallel
  const double n = static_cast<double>(l.micro_batch * w.seq_len / l.cp);  // tokens per GPU
  const double act = f.saved_bytes_per_token * n;
  const double logits = n * static_cast<double>(m.vocab_size) / static_cast<double>(l.tp) *
                        (2.0 + 4.0 + 4.0);  // bf16 logits, fp32 copy for the loss, fp32 grad
  const double workspace = f.full_bytes_per_token * n;
  const double positions =
      w.arch.learned_positions ? static_cast<double>(w.seq_len) * static_cast<double>(m.dim) : 0;
  double buffers = 0;
  if (l.tp > 1) buffers += 2.0 * n * static_cast<double>(m.dim) * 2.0;  // gathered inputs
  if (l.pp > 1) buffers += 4.0 * n * static_cast<double>(m.dim) / static_cast<double>(l.tp) * 2.0;

  // `first` and `last` pick the rank; neither is the second rank (the busiest middle one: most
  // micro-batches in flight after the first).
  double layer_experts = 0;  // MoE: routed experts per layer on this GPU (mean over layers)
  const double layer_params = LayerParamsOnGpu(w, l.tp, l.ep, &layer_experts);
  auto stage = [&](bool first, bool last) {
    MemoryBreakdown b;
    const int64_t layers = l.pp == 1 ? L : first ? split.first : last ? split.last : split.middle;
    double params = static_cast<double>(layers) * layer_params;
    if (first) params += vocab_params + positions;
    if (last && (!first || !m.tie_embeddings)) params += vocab_params + m.dim;
    const double state =
        params + static_cast<double>(layers) * layer_experts * static_cast<double>(l.ep - 1);
    AddStateBytes(params, state, std::max(layer_params, first || last ? vocab_params : 0.0), l, &b);
    b.expert_state = 16.0 * static_cast<double>(layers) * layer_experts *
                     static_cast<double>(l.ep) / static_cast<double>(l.shard());
    const int64_t chunk_layers = CeilDiv(layers, l.vpp);
    int64_t sets = 0;
    if (l.pp == 1) {
      sets = L;  // one micro-batch at a time; gradient accumulation frees it after backward
    } else if (l.schedule != PipeSchedule::k1F1B) {
      // zbv holds 2 pp chunks (1F1B's pp stages) on every rank, dualpipev one chunk more
      // (pipeline_schedule_test's ActivationsHeldByTheVSchedules).
      const int64_t chunks = 2 * l.pp + (l.schedule == PipeSchedule::kDualPipeV ? 1 : 0);
      sets = std::min(l.micro_batches * l.vpp, chunks) * chunk_layers;
    } else if (l.vpp == 1) {
      // 1F1B: stage i holds pp - i micro-batches before its first backward.
      const int64_t held = first ? l.pp : last ? 1 : l.pp - 1;
      sets = std::min(l.micro_batches, held) * layers;
    } else {
      // Interleaved 1F1B (Megatron): rank 0 warms up with 2(pp-1) + (v-1)pp chunks, the last
      // rank with (v-1)pp, each holding one more in the steady state.
      const int64_t chunks = first  ? (l.vpp + 1) * l.pp - 1
                             : last ? (l.vpp - 1) * l.pp + 1
                                    : (l.vpp + 1) * l.pp - 3;
      sets = std::min(l.micro_batches * l.vpp, chunks) * chunk_layers;
    }
    b.inflight_sets = sets;
    b.layers_held = layers;
    b.activations = static_cast<double>(sets) * act;
    b.logits = last ? logits : 0.0;
    b.workspace = workspace;
    b.buffers = buffers;
    b.reserved = hw.reserved_bytes;
    b.stage = l.pp == 1 ? "only" : first ? "first" : last ? "last" : "second";
    return b;
  };
  if (l.pp == 1) return stage(true, true);
  MemoryBreakdown peak = stage(true, false);
  for (MemoryBreakdown b : {stage(false, true), l.pp > 2 ? stage(false, false) : peak}) {
    if (b.total() > peak.total()) peak = b;
  }
  return peak;
}

}  // namespace tenax::plan
