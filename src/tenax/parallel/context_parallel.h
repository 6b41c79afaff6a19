// Context parallelism (issue 36): every sequence is split over the N ranks of a context-parallel
// (CP) group, and attention runs as ring attention, so activations per rank shrink as 1 / N and
// sequences N times longer than one rank holds can train.
//
// Layout (context_layout.h): rank r holds chunks r and 2N-1-r of the 2N chunks of every sequence
// (head-tail load balancing), its two chunks in that order along dim 1. Everything outside
// attention is position-wise, so it runs on the local tokens unchanged; RoPE rotates each token
// by its global position (ContextPositions); the loss is the mean over the local tokens, and the
// mean of the ranks' means is the full sequence's (every rank holds as many tokens).
//
// Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers"): the ranks pass
// their keys and values around the ring, N - 1 hops; at step s rank r holds those of rank
// r - s and folds them into its queries' running softmax (max, sum and the weighted values, in
// fp32: FlashAttention-2's online softmax). Chunk pairs that causality masks entirely are
// skipped, the diagonal pairs are masked inside, the rest need no mask. The next hop's exchange
// is issued before the current block is computed, so it overlaps compute.
// Backward recomputes each block's probabilities from the saved log-sum-exp; the keys and values
// go around the ring again, and their gradients travel with them (each rank adds its share) and
// arrive back at their owner after the last hop.
//
// Shapes: B batch, L = T / N local tokens, H query heads, K kv heads, G = H / K, D head dim.
// Contract: the ranks of the CP group call RingAttention in the same order with equal shapes,
// and run its backward in the same order (it exchanges with the ring's neighbours).
// Determinism: blocks are visited in a fixed order on every rank, so a step is bit-reproducible;
// the sums run in another order than one rank's attention, so results agree with it to
// rounding (attention_test / context_parallel_test state the tolerance).
// Non-goals: non-causal masks, document masking, the all-gather variant (Llama 3's), and fused
// kernels: the blocks are at:: ops, so it runs on any device, but not at a flash kernel's speed.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/parallel/communicator.h"
#include "tenax/parallel/context_layout.h"

namespace tenax::parallel {

// The global positions of rank `rank`'s tokens, in local order: (seq_len / size) int64.
at::Tensor ContextPositions(int64_t seq_len, int rank, int size, const at::Device& device);

// x (B, T, ...) -> (B, T / size, ...): rank `rank`'s two chunks, head then tail (contiguous).
at::Tensor ContextShard(const at::Tensor& x, int rank, int size);

// The inverse over every rank's shard: shards[r] (B, T / N, ...) -> (B, T, ...).
at::Tensor ContextUnshard(const std::vector<at::Tensor>& shards);

// Causal grouped-query attention of this rank's queries against the keys of the whole sequence.
// q (B, L, H, D), k and v (B, L, K, D), this rank's tokens as ContextShard lays them out; returns
// (B, L, H, D): ContextShard of CausalGqaAttention over the full sequence, to rounding. Softmax
// statistics and gradient sums are fp32 (fp64 for fp64 inputs). With a group of one rank it is
// model::CausalGqaAttention. `cp` must outlive the backward pass.
at::Tensor RingAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         Communicator& cp);

}  // namespace tenax::parallel
