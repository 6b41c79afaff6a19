// A parallel layout: how one training step of a model is spread over GPUs (tensor, context,
// pipeline with virtual stages, data parallel as FSDP shards and replicas), how the batch is cut
// into micro-batches, what is recomputed and in which precision the matmuls run. Plus the partial
// layouts users pin on the command line (`--fix tp=8,pp=16`).
// Mesh order, outermost to innermost, is pp, dp_replicate, dp_shard, cp, tp (torchtitan's): the
// inner axes get the fastest links, which is why tensor parallelism lands on NVLink first.
// Expert parallelism (MoE models) is no axis of its own: it splits dp_shard (torchtitan's and
// tenax train's dp_shard_in_ep), so it does not change the GPU count.
// Non-goals: per-stage layer counts beyond first / last / the rest; expert parallelism across
// context-parallel ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tenax/core/status.h"

namespace tenax::plan {

// What activation memory is kept for backward (docs/planner.md derives each).
enum class Recompute {
  kNone,       // keep every activation backward needs
  kSelective,  // Megatron-LM's selective recomputation (Korthikanti et al. 2022): recompute the
               // attention core (scores, softmax, dropout, probabilities x values), keep the rest
  kOp,         // torchtitan's per-op policy: keep matmul outputs at odd positions and attention
               // outputs; recompute every second matmul and all elementwise ops
  kAlternate,  // every second layer fully recomputed (torchtitan's layer-frequency option; what
               // tenax train calls activation_checkpoint = "selective")
  kFull,       // keep only each layer's input; recompute the whole layer in backward
};
constexpr Recompute kAllRecompute[] = {Recompute::kNone, Recompute::kSelective, Recompute::kOp,
                                       Recompute::kAlternate, Recompute::kFull};
const char* RecomputeName(Recompute r);

// The pipeline schedule (parallel/pipeline_schedule.h): k1F1B covers 1f1b and, with vpp > 1,
// interleaved_1f1b (and gpipe when there are fewer micro-batches than stages); the zero-bubble
// schedules take vpp = 2 and micro_batches >= 2 pp.
enum class PipeSchedule { k1F1B, kZbv, kDualPipeV };
const char* PipeScheduleName(PipeSchedule s);  // "1f1b", "zbv", "dualpipev"

struct Layout {
  int64_t tp = 1;   // tensor parallel (with sequence parallel on the norms)
  int64_t cp = 1;   // context parallel: each GPU holds seq_len / cp of every sequence
  int64_t pp = 1;   // pipeline stages
  int64_t vpp = 1;  // virtual stages per pipeline rank (interleaved 1F1B when > 1)
  PipeSchedule schedule = PipeSchedule::k1F1B;  // zbv and dualpipev: vpp = 2
  int64_t dp_replicate = 1;  // data-parallel replicas (HSDP's outer axis; plain DDP when shard=1)
  int64_t dp_shard = 1;      // FSDP shards parameters, gradients and optimizer state this wide
  // Mixture of experts: each MoE layer's routed experts split over `ep` of the dp_shard ranks
  // (ep divides dp_shard); expert weights are FSDP-sharded over the other dp_shard / ep.
  int64_t ep = 1;
  int64_t micro_batch = 1;    // sequences per micro-batch
  int64_t micro_batches = 1;  // micro-batches per step through each pipeline
  Recompute recompute = Recompute::kNone;
  bool fp8 = false;  // transformer-block matmuls in fp8 (attention and output stay bf16)
  // FSDP: free gathered parameters after forward and gather again for backward, per micro-batch
  // (ZeRO-3); false keeps them gathered for the whole step (ZeRO-2-like, Llama 3's choice).
  bool reshard = true;
  // Layers on the first and last pipeline ranks (0: the even split, ceil(L / pp) per rank). The
  // first rank also runs the embedding and the last the output layer and loss, so taking a layer
  // off each balances them (Llama 3 did). The other ranks share the rest evenly.
  int64_t first_layers = 0;
  int64_t last_layers = 0;

  int64_t dp() const { return dp_replicate * dp_shard; }
  // GPUs that FSDP or the distributed optimizer shard state over and reduce gradients across: the
  // context-parallel ranks hold the same parameters, so they join the shard axis (torchtitan's
  // dp_shard_cp mesh, where cp > 1 alone turns FSDP on; Megatron-LM's data-parallel group with
  // context parallel). 1 for plain DDP.
  int64_t shard() const { return dp_shard > 1 || cp > 1 ? dp_shard * cp : 1; }
  int64_t gpus() const { return tp * cp * pp * dp(); }
};

// "tp8 pp16v4 dp64 mbs1x32 sel" style: short, and unique for a layout.
std::string LayoutName(const Layout& l);

// Fields a user pins; unset ones are searched.
struct LayoutConstraints {
  std::optional<int64_t> tp, cp, pp, vpp, dp, dp_replicate, dp_shard, micro_batch, ep;
  std::optional<Recompute> recompute;
  std::optional<bool> fp8, reshard;
  std::optional<int64_t> first_layers, last_layers;  // 0 pins the even split

  bool Allows(const Layout& l) const;
};

// "tp=8,pp=16,dp=64,v=4,mbs=1,ac=selective,fp8=no,reshard=no,dp_shard=64,cp=1,first=7,last=7",
// and ep=8 for MoE models.
Result<LayoutConstraints> ParseLayoutConstraints(const std::string& text);

}  // namespace tenax::plan
