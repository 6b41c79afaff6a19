// Mixture-of-experts layers in the planner: what one GPU holds and does for them under a layout,
// as tenax train runs them (model/moe.h, parallel/expert_parallel.h):
//   - the router, the shared experts and the attention are like a dense layer's (the attention
//     cut by tp); the router and experts are not cut by tp: each tensor-parallel rank routes its
//     own n / tp tokens (sequence parallelism) through whole experts;
//   - expert parallelism (ep, borrowed from dp_shard) leaves E / ep routed experts per GPU, which
//     FSDP shards over the dp_shard / ep ranks holding the same experts; the sharded state per
//     GPU is the same as without ep (all experts over all dp_shard ranks), the gathered window
//     and the FSDP traffic for experts shrink by ep;
//   - each MoE layer and micro-batch, a GPU sends its n / tp x k token-expert rows (h values,
//     bf16) to the ranks of their experts and receives as many back: 2 all-to-alls forward, 2
//     backward (and 2 more when the forward is recomputed), each with (ep - 1) / ep of the rows
//     leaving the GPU under balanced routing;
//   - compute: the router GEMM, each local expert's three GEMMs on its n k ep / (tp E) rows
//     (balanced), the shared experts' GEMMs, the SwiGLU and the row gather / scatter.
// A model with both dense and MoE layers is costed per layer as the mean of the two weighted by
// their numbers (stage splits do not place MoE layers individually).
// Non-goals: routing imbalance (the planner assumes balanced experts: the busiest expert sets
// the pace in reality), expert tensor parallelism, capacity factors, the tiny counts exchange and
// routing all-reduces.
#pragma once

#include <cstdint>

#include "tenax/plan/hardware.h"
#include "tenax/plan/layout.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

bool IsMoe(const Workload& w);
// Fraction of the layers that are MoE.
double MoeFraction(const Workload& w);

// Parameters of one layer on one GPU after tensor and expert parallelism, averaged over the
// model's layers (dense and MoE); `experts` receives the routed-expert part of it.
double LayerParamsOnGpu(const Workload& w, int64_t tp, int64_t ep, double* experts = nullptr);

// Bytes of activations one MoE layer's feed-forward half saves for backward per token of the
// GPU's micro-batch (the dense MLP's share replaced): routed rows in and out, the experts'
// SwiGLU intermediates for k rows, router probabilities, shared experts; divided by tp (each
// tensor-parallel rank routes its sequence shard).
double MoeFeedForwardBytesPerToken(const Workload& w, int64_t tp);

// One MoE feed-forward half, one micro-batch, forward + backward, on one GPU.
struct MoeFeedForwardTime {
  double matmul = 0;       // router, experts, shared experts
  double elementwise = 0;  // SwiGLU, row gather / scatter, router softmax
  double all_to_all = 0;   // 4 all-to-alls (exposed: tenax's are blocking)
  double forward = 0;      // the forward part of the above (what recomputation repeats)
  double bytes_sent = 0;   // per all-to-all, bytes this GPU sends to other GPUs
};
MoeFeedForwardTime EstimateMoeFeedForward(const Workload& w, const HardwareProfile& hw, int64_t tp,
                                          int64_t cp, int64_t micro_batch, int64_t ep, bool fp8);

// Why `ep` cannot split `w`'s experts under `l` (empty when it can).
std::string ExpertParallelProblem(const Workload& w, const Layout& l);

}  // namespace tenax::plan
