// Megatron-style tensor parallelism with sequence parallelism over one tensor-parallel (TP) group.
//
// Layout of one block on rank r of tp ranks (B batch, T sequence, C model dim, H/K query/kv heads,
// D head dim, F ffn dim):
//   residual stream h              (B, T/tp, C)  sequence shard r (sequence parallelism)
//   RMSNorm                        (B, T/tp, C)  replicated weight, local rows only
//   GatherSequence                 (B, T, C)     all-gather fwd / reduce-scatter bwd
//   wq, wk, wv column-parallel     heads [r*H/tp, (r+1)*H/tp), kv heads [r*K/tp, (r+1)*K/tp)
//   attention over the full T      RoPE positions 0..T-1, GQA within the local heads
//   wo row-parallel                (B, T, C)     partial sum over this rank's heads
//   ReduceScatterSequence          (B, T/tp, C)  sums the partials, keeps shard r
//   residual add; the SwiGLU FFN repeats the pattern (w1/w3 column-, w2 row-parallel).
// The embedding, the norms and the output projection are replicated; they see only the local
// sequence shard, so their gradients are partial sums (AllReduceReplicatedGrads completes them).
// Because every rank holds a contiguous group of H/K query heads with their own kv head, GQA needs
// no communication inside attention.
//
// Contract: every rank of the TP group calls these functions in the same order with tensors of the
// same shapes (they run collectives), including the backward pass.
// Non-goals (yet): vocabulary-parallel embedding / output / cross-entropy (they stay replicated),
// overlap of the sequence collectives with the matmuls, a TP-aware model class (the trainer
// integration wraps these functions), tp not dividing the kv heads (kv-head replication).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"
#include "tenax/model/layers.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"

namespace tenax::parallel {

// Validates that `spec` can be split over `tp` ranks at sequence length `seq_len`: query heads, kv
// heads, ffn_hidden_dim and seq_len (sequence parallelism) divisible by tp. The message names
// every failing factor and both numbers, in mesh.cc's wording.
Status CheckTensorParallel(const ModelSpec& spec, int tp, int64_t seq_len);

// ---- Conjugate collectives (autograd functions; `tp` must outlive the backward pass). ----
// Plain TP (Megatron's f and g):
// identity forward, all-reduce-sum backward: enters a region whose ranks compute different
// partial results from the same replicated input.
at::Tensor CopyToTensorParallel(const at::Tensor& x, Communicator& tp);
// all-reduce-sum forward, identity backward: leaves such a region by summing the partials.
at::Tensor ReduceFromTensorParallel(const at::Tensor& x, Communicator& tp);
// Sequence parallelism, on tensors whose dim 1 is the sequence:
// x (B, T/tp, ...) -> (B, T, ...), shard r at [r*T/tp, (r+1)*T/tp); backward reduce-scatters.
at::Tensor GatherSequence(const at::Tensor& x, Communicator& tp);
// x (B, T, ...) partial on every rank -> sum over ranks, this rank's (B, T/tp, ...) shard;
// backward all-gathers.
at::Tensor ReduceScatterSequence(const at::Tensor& x, Communicator& tp);

// ---- Parameter sharding. ----
// How a local tensor maps into the full (canonical) one: local == full.narrow(dim, begin,
// end - begin). dim -1: replicated (local == full; begin and end are 0).
struct ShardSpec {
  std::string name;
  int dim = -1;
  int64_t begin = 0;
  int64_t end = 0;
};

// One spec per canonical parameter of `spec` (Llama::ParamShapes order) for rank `tp_rank`:
// wq rows of query heads [r*H/tp, (r+1)*H/tp) (rows are grouped per head, Meta's layout), wk/wv
// rows of kv heads [r*K/tp, (r+1)*K/tp), wo the matching columns, w1/w3 rows [r*F/tp, (r+1)*F/tp),
// w2 the matching columns; norms, embedding and output replicated. Pure arithmetic.
// Precondition: CheckTensorParallel(spec, tp_size, ...) is OK.
std::vector<ShardSpec> TensorParallelShardSpecs(const ModelSpec& spec, int tp_rank, int tp_size);

// This rank's local parameters cut from the full ones (any order; exactly the names of
// Llama::ParamShapes(spec)), in canonical order. Each local tensor is a fresh contiguous leaf with
// the source's dtype, device and requires_grad, so it collects its own gradient.
std::vector<model::NamedTensor> ShardForTensorParallel(const std::vector<model::NamedTensor>& full,
                                                       const ModelSpec& spec, int tp_rank,
                                                       int tp_size);

// The inverse: full tensors from every rank's local tensors (parameters, gradients or optimizer
// state with the same names and shapes), gathered along each split dim; replicated tensors are
// copied from this rank. `local` and `specs` are matched by position (names must agree). Every
// rank receives the full tensors (one all-gather per split tensor). Results do not require grad.
std::vector<model::NamedTensor> Unshard(const std::vector<model::NamedTensor>& local,
                                        const std::vector<ShardSpec>& specs, Communicator& tp);

// ---- Forward pass. ----
// The pieces of the TP forward, for pipeline stages and FSDP units (ShardedLlama): with tp of
// size 1 they are exactly model::Llama's Embed, Block and Head + cross-entropy (no copies).
// One block's local weights (shapes as produced by ShardForTensorParallel).
struct TensorParallelLayer {
  at::Tensor attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;
};
TensorParallelLayer TensorParallelLayerOf(const std::vector<model::NamedTensor>& params,
                                          int64_t layer);
// tokens (B, T) -> this rank's sequence shard of the embedded tokens (B, T/tp, C).
at::Tensor TensorParallelEmbed(const at::Tensor& table, const at::Tensor& tokens, Communicator& tp,
                               at::ScalarType compute_dtype);
// The attention half of TensorParallelBlock, h + attention(norm(h)): (B, T/tp, C) ->
// (B, T/tp, C); reads only the attention fields of `layer` (MoE blocks follow it with their own
// feed-forward half on the sequence shard, parallel/expert_parallel.h).
// `attend`, `mm`: as in model::Attention (context parallelism's ring attention; float8 matmuls).
at::Tensor TensorParallelAttentionResidual(
    const ModelSpec& spec, const TensorParallelLayer& layer, Communicator& tp, const at::Tensor& h,
    const model::RopeTable& rope, const model::AttentionFn& attend = {},
    model::BlockMatmul mm = model::BlockMatmul::kComputeDtype);
// (B, T/tp, C) -> (B, T/tp, C); `rope` covers the full sequence T (under context parallelism,
// this rank's part of it: a row per local position).
at::Tensor TensorParallelBlock(const ModelSpec& spec, const TensorParallelLayer& layer,
                               Communicator& tp, const at::Tensor& h, const model::RopeTable& rope,
                               const model::AttentionFn& attend = {},
                               model::BlockMatmul mm = model::BlockMatmul::kComputeDtype);
// Final norm, output projection and the mean cross-entropy of the full (B, T) batch (targets are
// the full (B, T); every rank gets the same value).
at::Tensor TensorParallelHeadLoss(const ModelSpec& spec, const at::Tensor& norm,
                                  const at::Tensor& output, Communicator& tp, const at::Tensor& h,
                                  const at::Tensor& targets);
// Mean next-token cross-entropy of the whole (B, T) batch computed by the TP group, with
// gradients flowing into `local_params` (as produced by ShardForTensorParallel). tokens and
// targets (B, T) int64, identical on every TP rank; `rope` covers at least T positions
// (model::MakeRopeTable(spec, T, device)); compute_dtype as in Llama::Logits. The returned value
// is the full-batch loss on every rank; after backward, call AllReduceReplicatedGrads.
at::Tensor TensorParallelLoss(const ModelSpec& spec,
                              const std::vector<model::NamedTensor>& local_params, Communicator& tp,
                              const at::Tensor& tokens, const at::Tensor& targets,
                              const model::RopeTable& rope,
                              at::ScalarType compute_dtype = at::kFloat);

// Sums each of `tensors` (one dtype) over `group` in place, through one all-reduce of a bucket
// that holds them all: for many small tensors, one collective beats one each on latency.
void AllReduceSumInOneBucket(Communicator& group, const std::vector<at::Tensor>& tensors);

// Sums the gradients of the replicated parameters (dim -1 in `specs`) over the TP group in place,
// in one bucketed all-reduce. Every replicated parameter must have a gradient.
void AllReduceReplicatedGrads(const std::vector<model::NamedTensor>& local_params,
                              const std::vector<ShardSpec>& specs, Communicator& tp);

}  // namespace tenax::parallel
