// RMSNorm, RoPE and SwiGLU's gate as single autograd nodes with hand-written backward passes
// (issue 17). The plain compositions of at:: ops record 6-12 nodes each, keep an fp32 copy of
// every bf16 activation alive until backward, and run silu in bf16, which libtorch 1.13's CPU
// kernels do element by element (2-3x slower than widening to fp32, computing and narrowing).
// Each node here saves only its bf16 inputs (plus RMSNorm's per-row scale) and recomputes the
// cheap rest in backward.
// Every body is a few at:: ops, so the same code runs on every device, except in bf16 on the CPU:
// there RMSNorm (with its fp32 weight), RoPE (with fp32 tables), the SwiGLU gate and attention's
// causal softmax run the one-pass loops of cpu_kernels.h (what they buy is in
// docs/performance.md). Non-goals: CUDA kernels; double backward.
//
// Numerics: computed in at least fp32 (fp64 stays fp64 for the gradient tests), rounded to the
// input's dtype once at the end. In fp32 and fp64 the forward passes and the RoPE and SwiGLU
// backward passes are bit-identical to the plain compositions in layers_test.cc; RMSNorm's
// backward is the closed form, equal to autograd's within rounding.
#pragma once

#include <ATen/ATen.h>

namespace tenax::model {

// The dtype statistics are computed in (softmax's max and sum, norms): fp64 stays fp64, every
// other dtype widens to fp32. Attention and the fused cross-entropy use it too.
inline at::ScalarType StatsDtype(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

// x (..., C), weight (C) -> x / sqrt(mean(x^2) + eps) * weight, in x's dtype.
at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x (B, T, H, D) rotated pair by pair: (x0 c - x1 s, x0 s + x1 c) with c, s (T', D/2) fp32
// tables, T' >= T (the first T rows are used).
at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// SwiGLU's gate: silu(a) * b for a, b of one shape, in a's dtype.
at::Tensor SiluMul(const at::Tensor& a, const at::Tensor& b);

// Attention's causal softmax for bf16 scores on the CPU (cpu_kernels.h): scores (BK, R*G, T) for
// the queries at positions first_position..T-1 (R = T - first_position; all of them when it is
// 0), rows ordered (position, query head of the kv head's G), attention.cc's grouped layout ->
// softmax(scale * scores) over each row's keys up to its position, 0 after them. Other dtypes and
// devices take attention.cc's composition (scale, mask, at::softmax).
at::Tensor Bf16CpuCausalSoftmax(const at::Tensor& scores, int64_t group, double scale,
                                int64_t first_position = 0);

}  // namespace tenax::model
