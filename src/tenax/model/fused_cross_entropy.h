// The output projection and the cross-entropy in one autograd node, computed in chunks of rows so
// the full (N x V) fp32 logits are never held: with a 128K vocabulary they are the largest tensor
// of a training step (N = B*T = 8K tokens -> 4 GiB of fp32 logits, plus as much again for the
// softmax and its gradient in the plain path). Forward computes each chunk's logits into one
// reused buffer, turns them into the softmax gradient in place and accumulates dx and dW there
// (the loss is the graph's last node, so only the scalar upstream gradient is missing, which
// backward multiplies in); nothing is recomputed.
// Non-goals: double backward, label smoothing, ignore_index (tenax's targets are always real
// tokens), a hand written GPU kernel (each chunk is two matmuls and a few pointwise ops: the same
// code runs on every device).
//
// Numerics match the plain path Linear(x, w) -> to(fp32) -> cross_entropy_loss: the matmul runs
// in x's dtype (bf16 in mixed precision) with the weight cast to it, softmax statistics in fp32
// (fp64 when x is fp64). Only the summation order over chunks differs. bf16 on the CPU: each
// row's statistics, loss and gradient are one loop over its bf16 logits (cpu_kernels.h), with a
// polynomial exp (relative error < 3e-7) instead of the library's.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace tenax::model {

// Rows per chunk for a vocabulary of `vocab`: the chunk's fp32 logits stay near 128 MiB on the
// CPU (1 row minimum), so a 4K vocabulary runs in one chunk for up to 8K tokens; near 1 GiB on a
// GPU, where every chunk costs a pass over the (V, C) weight gradient and launches: 2,093 rows
// of a 128K vocabulary (8 chunks of 16K tokens), not 261 (63 chunks; measured on an H200:
// docs/performance.md, "GPU").
int64_t CrossEntropyChunkRows(int64_t vocab, bool gpu = false);

// GPU, bf16 (and the larger chunks above with it): cuBLAS writes each chunk's logits in fp32 and
// accumulates the weight gradient in fp32 itself (mm/addmm with an fp32 output), instead of a bf16
// product widened and added in separate passes. On by default; off runs the composition (A/B,
// debugging: the trainer sets it from training.fused_kernels). Process-wide.
void EnableGpuWideGemms(bool on);

// mean_i [ logsumexp(x_i W^T) - (x_i W^T)[targets_i] ], differentiable in x and weight.
// x (N, C) in the compute dtype; weight (V, C) (fp32 master, cast to x's dtype at use);
// targets (N) int64 in [0, V). Returns a 0-dim fp32 (fp64 for fp64 x) tensor.
// chunk_rows <= 0: CrossEntropyChunkRows(V).
at::Tensor LinearCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& targets, int64_t chunk_rows = 0);

}  // namespace tenax::model
