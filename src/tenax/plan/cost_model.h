// Time of one training step for a layout on a hardware profile, built from component costs
// (kernels.h): the layer's GEMMs (forward, input gradient, weight gradient) at the measured GEMM
// ceiling with wave quantization and the memory roofline; attention from the measured kernel
// tables (flash) or from its parts (materialized: batched GEMMs, softmax, dropout); memory-bound
// kernels at HBM speed; recomputation as the policy demands; tensor-, context-, pipeline- and
// data-parallel traffic from the measured NCCL bus bandwidths, exposed or hidden according to the
// run's overlap options; pipeline stages as they are built (embedding on the first, output and
// loss on the last, uneven splits) and the (interleaved) 1F1B fill and drain.
// Every formula is written out, with its source, in docs/planner.md.
// Non-goals: kernel-level simulation, network congestion between jobs, stragglers.
#pragma once

#include <cstdint>

#include "tenax/plan/hardware.h"
#include "tenax/plan/layout.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

// One micro-batch through one transformer layer on one GPU (seconds), forward + backward.
struct LayerTime {
  double matmul = 0;       // the projections: forward, input gradient, weight gradient
  double attention = 0;    // the attention core, forward + backward
  double elementwise = 0;  // norms, rotary, activation, residuals, dropout (and fp8 casts)
  double recompute = 0;    // extra forward work the recompute policy adds
  double tp_comm = 0;      // exposed tensor-parallel all-gathers / reduce-scatters / all-reduces
  double cp_comm = 0;      // context-parallel key/value all-gathers / reduce-scatters
  double ep_comm = 0;      // MoE: the expert-parallel all-to-alls (blocking, so all exposed)
  double tp_hidden = 0;    // tensor-parallel traffic overlapped with GEMMs (not in total())
  double forward = 0;      // the forward part of total() (gradient reduction cannot overlap it)
  double total() const {
    return matmul + attention + elementwise + recompute + tp_comm + cp_comm + ep_comm;
  }
};

// What of a layout the per-micro-batch costs depend on (with the workload and the hardware): the
// search computes them once per shape and reuses them across pipeline and data-parallel choices.
struct MicroBatchShape {
  int64_t tp = 1;                          // tensor-parallel degree
  int64_t cp = 1;                          // context-parallel degree: seq_len / cp tokens per GPU
  int64_t micro_batch = 1;                 // sequences per micro-batch
  Recompute recompute = Recompute::kNone;  // what backward recomputes
  bool fp8 = false;                        // block matmuls in fp8 (where the hardware has it)
  int64_t ep = 1;                          // expert-parallel degree (MoE models; else 1)
};
// The shape of `l`'s micro-batches.
MicroBatchShape MicroBatchShapeOf(const Layout& l);

// Per-micro-batch costs of one MicroBatchShape. A model with MoE layers gets the mean layer
// (plan/moe_model.h).
struct MicroBatchCost {
  LayerTime layer;
  double output = 0;          // output projection + loss (+ its tensor-parallel traffic)
  double embedding = 0;       // lookup and its backward scatter (+ its tensor-parallel traffic)
  double layer_params = 0;    // parameters of one layer on this GPU (after tp, and ep for experts)
  double expert_params = 0;   // ... of which routed experts (MoE), FSDP-sharded over shard / ep
  double a2a_bytes_sent = 0;  // MoE: bytes one all-to-all sends off this GPU, per layer (mean)
  double recompute_flops_per_token = 0;  // RecomputeFlopsPerToken for this policy
};
MicroBatchCost EstimateMicroBatch(const Workload& w, const HardwareProfile& hw,
                                  const MicroBatchShape& shape);

// Layers on each kind of pipeline rank after resolving Layout::first_layers / last_layers.
struct StageSplit {
  int64_t first = 0, middle = 0, last = 0;  // middle: the most any other rank holds
  int64_t max_layers() const;
};
// The split `l` asks for (0 pins: the even split). Empty reason when valid.
StageSplit SplitStages(int64_t n_layers, const Layout& l);
std::string StageSplitProblem(int64_t n_layers, const Layout& l);

struct StepTime {
  MicroBatchCost mb;
  StageSplit split;
  double stage_first = 0;   // per micro-batch: the first rank (layers + embedding)
  double stage_last = 0;    // per micro-batch: the last rank (layers + output and loss)
  double stage_middle = 0;  // per micro-batch: the busiest other rank
  double stage = 0;         // the slowest rank's time per micro-batch
  double compute = 0;       // micro_batches x stage
  double bubble = 0;        // pipeline fill and drain
  double pp_comm = 0;       // exposed pipeline sends
  double pp_hidden = 0;     // pipeline sends hidden behind compute
  double tp_comm = 0;       // exposed tensor-parallel traffic over the step (inside compute)
  double cp_comm = 0;       // exposed context-parallel traffic over the step (inside compute)
  double ep_comm = 0;       // MoE all-to-alls over the step (inside compute)
  double dp_comm = 0;       // all FSDP / DDP traffic
  double dp_exposed = 0;    // the part not hidden behind compute
  double dp_copies = 0;     // FSDP's copy-in / copy-out and dtype casts around each collective
  double interference = 0;  // compute slowed by the communication hidden behind it
  double optimizer = 0;     // AdamW over this GPU's shard
  double step = 0;          // the sum: one optimizer step

  double tokens_per_s_per_gpu = 0;
  double tflops_per_gpu = 0;           // model FLOPs (Workload::flops_per_token)
  double hardware_tflops_per_gpu = 0;  // model FLOPs + recomputation
  double mfu = 0;                      // tflops / peak_bf16 (even when matmuls are fp8)
  double hfu = 0;                      // hardware tflops / peak_bf16
};

StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l,
                          const MicroBatchCost& mb);

// Silent-data-corruption checks (resilience.sdc_check_interval, train/sdc_check.h): a check
// replays one data-parallel rank's step on another, forward and backward with the gathers, no
// gradient reduction and no optimizer: the step less its exposed data-parallel traffic and the
// optimizer. The overhead at `interval` (0: none) is one replay per `interval` steps, as a
// fraction of the training time (the checks at checkpoints come on top: one replay each).
double SdcReplaySeconds(const StepTime& t);
double SdcOverhead(const StepTime& t, int64_t interval);

// The pipeline part of EstimateStepTime alone (split, stage times, compute, bubble): a lower bound
// of the step that the search uses to skip layouts that cannot enter its top k.
void EstimatePipeline(const Workload& w, const Layout& l, const MicroBatchCost& mb, StepTime* s);
// Convenience: EstimateMicroBatch + EstimateStepTime.
StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l);

// FLOPs per token that recomputation adds (same convention as Workload::flops_per_token).
double RecomputeFlopsPerToken(const Workload& w, Recompute r);

}  // namespace tenax::plan
