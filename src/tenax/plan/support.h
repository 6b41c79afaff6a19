// Whether `tenax train` can run a planned layout with the run's software options today, and if
// not, what it lacks. The planner ranks every layout it can cost; this marker lets a caller keep
// only runnable ones (the issue on runnable plans filters on it).
// What tenax train supports (kept in step with src/tenax/parallel and src/tenax/config): DDP,
// FSDP (resharding after forward) and HSDP; tensor parallelism with sequence parallelism;
// pipeline parallelism with gpipe / 1F1B / interleaved 1F1B and layers split evenly over
// pp x virtual stages; activation checkpointing none, "selective" (every second block: the
// planner's `alternate`) and full; bf16; SDPA flash attention; eager kernels; Llama layers;
// context parallelism as ring attention (--cp-attention ring) on dense models, with seq_len
// divisible by 2 x cp x tp.
// It does not support all-gather context parallelism, fp8, the distributed optimizer (ZeRO-1/2)
// apart from FSDP, Megatron's or torchtitan's per-op selective recomputation, uneven pipeline
// splits, dropout, GPT-style layers, fused kernels, or tensor-parallel communication overlap.
#pragma once

#include <string>
#include <vector>

#include "tenax/plan/layout.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

struct TrainSupport {
  bool runnable = true;
  std::vector<std::string> missing;  // what tenax train lacks for this layout, one item each
};

TrainSupport TenaxTrainSupport(const Workload& w, const Layout& l);

// The same verdict without naming what is missing: no strings, so the search can ask it of every
// layout it costs (hundreds of thousands for 405B on 16,384 GPUs).
bool TenaxTrainRuns(const Workload& w, const Layout& l);

// The tenax train [parallelism] / [training] settings a runnable layout maps to, for reports
// ("recompute alternate" is tenax's activation_checkpoint = "selective").
const char* TenaxActivationCheckpoint(Recompute r);

// How to run a runnable layout with tenax train: the `--set section.key=value` words (the
// layout, the batch split, the sequence length, bf16) and the same as a TOML fragment. The
// planner's micro-batch b and micro-batch count m map to local_batch_size = b, grad_accum_steps
// = m without pipeline parallelism, and to local_batch_size = b x m split into microbatches = m
// with it (tenax's pipeline cuts each local batch into its micro-batches); the global batch is
// dp x b x m sequences either way.
struct TrainSettings {
  std::vector<std::string> sets;  // "parallelism.tensor_parallel=8", ...
  std::string toml;               // [parallelism] ... [training] ...
};
TrainSettings TenaxTrainSettings(const Workload& w, const Layout& l);

}  // namespace tenax::plan
