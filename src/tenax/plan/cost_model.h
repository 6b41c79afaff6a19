// Time of one training step for a layout on a hardware profile:
//   - matrix work at a GEMM efficiency shaped by arithmetic intensity (the measured shape: small
//     GEMMs reach a smaller fraction of peak), attention at flash-attention efficiency, and the
//     memory-bound elementwise kernels at HBM bandwidth;
//   - recomputation as the chosen policy demands;
//   - tensor-, context-, pipeline- and data-parallel communication with an alpha-beta model per
//     link level (NVLink inside a node, the network between nodes), split into exposed and
//     overlapped parts;
//   - the pipeline bubble of (interleaved) 1F1B and the optimizer step.
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
  double matmul = 0;       // the seven projections, forward + backward
  double attention = 0;    // flash attention forward + backward
  double elementwise = 0;  // norms, rotary, SwiGLU, residuals (and fp8 casts)
  double recompute = 0;    // extra forward work the recompute policy adds
  double tp_comm = 0;      // exposed tensor-parallel all-gathers / reduce-scatters
  double cp_comm = 0;      // context-parallel key/value all-gathers / reduce-scatters
  double tp_hidden = 0;    // tensor-parallel traffic overlapped with compute (not in total())
  double total() const { return matmul + attention + elementwise + recompute + tp_comm + cp_comm; }
};

// Per-micro-batch costs that depend only on (tp, cp, micro_batch, recompute, fp8): the search
// computes them once and reuses them across pipeline and data-parallel choices.
struct MicroBatchCost {
  LayerTime layer;
  double output = 0;     // output projection + loss (+ its tensor-parallel traffic)
  double embedding = 0;  // lookup and its backward scatter
};
MicroBatchCost EstimateMicroBatch(const Workload& w, const HardwareProfile& hw, int64_t tp,
                                  int64_t cp, int64_t micro_batch, Recompute r, bool fp8);

struct StepTime {
  MicroBatchCost mb;
  double stage_load = 0;    // layer-equivalents on the slowest pipeline rank
  double stage = 0;         // that rank's time per micro-batch
  double compute = 0;       // micro_batches x stage
  double bubble = 0;        // pipeline fill and drain
  double pp_comm = 0;       // exposed pipeline sends
  double dp_comm = 0;       // all FSDP / DDP traffic
  double dp_exposed = 0;    // the part not hidden behind compute
  double dp_copies = 0;     // FSDP's copy-in / copy-out and dtype casts around each collective
  double interference = 0;  // compute slowed by the communication hidden behind it
  double optimizer = 0;     // AdamW over this GPU's shard
  double step = 0;          // the sum: one optimizer step

  double tokens_per_s_per_gpu = 0;
  double tflops_per_gpu = 0;  // Workload::flops_per_token convention
  double mfu = 0;             // tflops / peak_bf16 (bf16-equivalent even when matmuls are fp8)
};

StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l,
                          const MicroBatchCost& mb);
// Convenience: EstimateMicroBatch + EstimateStepTime.
StepTime EstimateStepTime(const Workload& w, const HardwareProfile& hw, const Layout& l);

// Fraction of `peak` a GEMM of M x K times K x N reaches: matmul * I / (I + half_intensity),
// I = 2MNK / bytes moved. Exposed for tests and docs.
double GemmEfficiency(double m, double n, double k, double bytes_per_element, double max_eff,
                      double half_intensity);

// Ring all-gather / reduce-scatter of a `bytes`-sized (gathered) tensor over `ranks` GPUs whose
// group spans `stride * ranks` consecutive GPUs: NVLink when that fits in a node, else network.
double RingCollectiveTime(const HardwareProfile& hw, int64_t stride, int64_t ranks, double bytes);

}  // namespace tenax::plan
