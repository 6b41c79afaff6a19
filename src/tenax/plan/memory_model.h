// Memory per GPU for a layout: parameters, gradients and AdamW state with the layout's sharding,
// activations saved for backward (Korthikanti et al. 2022's accounting, generalised to Llama's
// SwiGLU, grouped-query attention and flash attention; see docs/planner.md), the micro-batches a
// pipeline schedule keeps in flight, logits, one layer's transient working set and communication
// buffers. The peak is taken over the first pipeline stage (most activations in flight, plus the
// embedding) and the last (output projection and logits).
// Non-goals: allocator fragmentation beyond the profile's reserved_gib; CUDA-graph pools.
#pragma once

#include <cstdint>
#include <string>

#include "tenax/plan/hardware.h"
#include "tenax/plan/layout.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

struct MemoryBreakdown {
  double params = 0;          // bf16 working copies held (gathered for FSDP as the layout says)
  double optimizer = 0;       // fp32 master weights + AdamW m and v, sharded over dp_shard
  double grads = 0;           // fp32 gradients: the sharded copy plus unsharded accumulators
  double activations = 0;     // saved for backward, all in-flight micro-batches
  double logits = 0;          // output logits and their fp32 loss copies (last stage)
  double workspace = 0;       // one layer's full activations during its backward or recompute
  double buffers = 0;         // tensor/pipeline communication buffers
  double reserved = 0;        // from the profile
  double expert_state = 0;    // MoE: of optimizer + grads, the routed experts' share (not extra)
  int64_t layers_held = 0;    // layers whose weights this GPU holds (max over stages)
  int64_t inflight_sets = 0;  // layer x micro-batch activation sets alive at the peak
  const char* stage = "";     // "only", "first", "second" or "last": where the peak is

  double total() const {
    return params + optimizer + grads + activations + logits + workspace + buffers + reserved;
  }
};

// Bytes of activations one layer saves for backward per token on one tensor-parallel rank
// (Korthikanti et al. 2022's accounting; `w` gives the architecture, attention kind, dropout,
// sequence parallelism and the sequence length the materialized scores scale with).
double ActivationBytesPerToken(const Workload& w, int64_t tp, Recompute r);

MemoryBreakdown EstimateMemory(const Workload& w, const HardwareProfile& hw, const Layout& l);

// What EstimateMemory needs per (tp, recompute), computed once by the search.
struct LayerFootprint {
  LayerWidths widths;
  double saved_bytes_per_token = 0;  // ActivationBytesPerToken(w, tp, recompute)
  double full_bytes_per_token = 0;   // ActivationBytesPerToken(w, tp, kNone): the workspace
};
LayerFootprint Footprint(const Workload& w, int64_t tp, Recompute r);
MemoryBreakdown EstimateMemory(const Workload& w, const HardwareProfile& hw, const Layout& l,
                               const LayerFootprint& f);

}  // namespace tenax::plan
