// The Llama 3 building blocks as pure functions of tensors, so each can be tested alone against
// finite differences and reused by the parallel wrappers later (tensor parallel splits the same
// math across ranks). RMSNorm, RoPE and SwiGLU's gate are single autograd nodes with
// hand-written backward passes (fused_layers.h). Non-goals: parameter ownership (llama.h).
//
// Shapes: B batch, T sequence, C model dim, H query heads, K kv heads, D head dim, F ffn dim.
// Mixed precision: activations carry the compute dtype (bf16 on GPU, fp32 on CPU, fp64 in gradient
// tests); weights are fp32 masters cast to the activation dtype at use, so their gradients land
// in fp32. Norms and RoPE compute in at least fp32, like Meta's reference.
#pragma once

#include <ATen/ATen.h>

#include "tenax/config/model_spec.h"
#include "tenax/model/attention.h"

namespace tenax::model {

// cos/sin of the rotary angles, each (T, D/2) in fp32, for positions [0, T).
struct RopeTable {
  at::Tensor cos;
  at::Tensor sin;
};

// Inverse frequencies (D/2) for `spec`, with Llama 3.1's scaling applied when enabled: wavelengths
// above original_max_position / low_freq_factor are divided by `factor`, those below
// original_max_position / high_freq_factor are kept, and the band between is interpolated.
at::Tensor RopeInverseFrequencies(const ModelSpec& spec);
RopeTable MakeRopeTable(const ModelSpec& spec, int64_t seq_len, const at::Device& device);

// x (..., C) -> x / sqrt(mean(x^2) + eps) * weight (C)
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x (B, T, H, D): rotates each interleaved pair (x[2i], x[2i+1]) by angle t * inv_freq[i]
// (Meta's layout; Hugging Face's rotate_half layout differs by a row permutation of wq/wk).
at::Tensor ApplyRope(const at::Tensor& x, const RopeTable& rope);

// y = x W^T with the fp32 master weight cast to x's dtype.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight);

// How the transformer blocks' matmuls (attention's wq, wk, wv, wo and the feed-forward's w1, w2,
// w3) run: in the activations' dtype (Linear), or as float8 GEMMs (training.mixed_precision =
// "fp8", fp8.h). The embedding, the output projection and attention itself stay in the
// activations' dtype either way.
enum class BlockMatmul { kComputeDtype, kFp8 };
at::Tensor BlockLinear(const at::Tensor& x, const at::Tensor& weight, BlockMatmul mm);

// x (B, T, C) -> (B, T, C). wq (H*D, C), wk and wv (K*D, C), wo (C, H*D). Grouped-query: each kv
// head serves H/K consecutive query heads. `rope` holds row t for the token at x's position t
// (its global position's angles under context parallelism); `attend` replaces
// CausalGqaAttention when given (attention.h).
at::Tensor Attention(const at::Tensor& x, const at::Tensor& wq, const at::Tensor& wk,
                     const at::Tensor& wv, const at::Tensor& wo, int64_t n_heads,
                     int64_t n_kv_heads, const RopeTable& rope, const AttentionFn& attend = {},
                     BlockMatmul mm = BlockMatmul::kComputeDtype);

// SwiGLU: w2(silu(w1 x) * w3 x). w1, w3 (F, C), w2 (C, F).
at::Tensor FeedForward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2,
                       const at::Tensor& w3, BlockMatmul mm = BlockMatmul::kComputeDtype);

}  // namespace tenax::model
