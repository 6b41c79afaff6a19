// Float8 matmuls for training (training.mixed_precision = "fp8"): the transformer blocks' linear
// layers run as float8 GEMMs with dynamic tensorwise scaling, the recipe torchao's Float8Linear
// uses by default (and torchtitan's `--model.converters float8`): before each GEMM, every operand
// is scaled by float8's largest finite value over its own absolute maximum and rounded to float8;
// the GEMM accumulates in fp32 and multiplies the two inverse scales back in.
//   forward       y  = x  W^T    x: e4m3, W: e4m3, out in x's dtype (fast accumulation on GPUs)
//   input grad    dx = dy W      dy: e5m2 (gradients need range more than precision), W: e4m3
//   weight grad   dW = dy^T x    dy: e5m2, x: e4m3, out fp32 (the master weight's dtype)
// The GEMMs are at::_scaled_mm on GPUs (cuBLASLt's float8 kernels on H100/H200); on the CPU an
// fp32 GEMM of the float8 values, which is the same product (float8 values and their products
// are exact in fp32) without oneDNN's scalar reference kernel for float8 (Fp8.CpuGemmIsScaledMm
// checks the two agree), so the scaling and rounding that run on a GPU are the ones the CPU tests
// check. The backward saves the float8 copies of x and W (1 byte per element), not bf16 ones.
//
// Shapes: x (..., K) bf16 or fp32, W (N, K) fp32 master. On GPUs cuBLASLt needs K, N and the
// tokens M (x's rows) to be multiples of 16; train/ refuses a model or batch that breaks that
// before training, and Fp8Linear checks it.
// Non-goals: delayed or row-wise scaling, float8 all-gathers of FSDP's weights, float8 attention
// (scores and softmax stay in the compute dtype, as in torchao), MoE experts' grouped GEMMs.
#pragma once

#include <ATen/ATen.h>

namespace tenax::model {

// A tensor rounded to float8 with its tensorwise scale: data * inverse_scale ~ the original.
struct Fp8Tensor {
  at::Tensor data;           // same shape, float8 (e4m3fn or e5m2)
  at::Tensor inverse_scale;  // () fp32: amax / float8 max
};

// Dynamic tensorwise scaling of `x` (any float dtype) into `fp8` (kFloat8_e4m3fn or
// kFloat8_e5m2): scale = max finite / max(|x|) (an all-zero tensor gets scale 1), values
// saturated at the largest finite value.
Fp8Tensor QuantizeTensorwise(const at::Tensor& x, at::ScalarType fp8);

// y = x W^T (x (..., K), weight (N, K) fp32) -> (..., N) in x's dtype, through float8 GEMMs in
// forward and backward (above). The weight's gradient is fp32.
at::Tensor Fp8Linear(const at::Tensor& x, const at::Tensor& weight);

}  // namespace tenax::model
