// fp32 matrix products on the CPU through oneDNN's sgemm, and bf16 ones with an fp32 result
// through its bf16 gemm.
//
// Why: Debian's libtorch sends fp32 at::mm to whatever libblas.so.3 is (OpenBLAS, built
// generic), while bf16 products already run in oneDNN. On the development CPU (Zen 4, 2 threads)
// oneDNN's dnnl_sgemm runs the 29M shape's fp32 products (forward, input and weight gradients)
// at 0.7-4.1x at::mm's rate, faster on 15 of 18, and the whole fp32 step 21% faster
// (docs/performance.md has the tables). libtorch links the same libdnnl.so.2 (Debian's libdnnl2);
// libdnnl-dev supplies its header.
//
// Numerics: a different summation order from at::mm, so results differ from it in the last bits
// (the tests compare against at::mm with a tolerance). For one shape and one thread count the
// result is the same on every call (oneDNN fixes its blocking and the order in which it sums
// partial products), which is what same-seed runs and bit-identical resumes need. The partition
// can depend on the thread count, so runs at different `training.threads` may differ in the last
// bits.
//
// bf16 (issue 17): Linear with bf16 activations and an fp32 weight (model::Linear under bf16
// compute) keeps ATen's bf16 products for its output and input gradient (the same bits as
// at::matmul) and takes its weight gradient from dnnl_gemm_bf16bf16f32 in fp32: no bf16 rounding
// of the weight gradient and no widening pass after it, and on the 29M shape's products 1.1-1.3x
// as fast as at::mm plus the cast (bench/bf16_gemm_rates.py). The bf16 cross-entropy head
// accumulates its weight gradient over chunks the same way.
//
// Threads: oneDNN runs on OpenMP, the same libgomp threads as libtorch's intra-op pool, so
// at::get_num_threads() (training.threads, train/device.h) is what it uses.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tenax::model {

// Whether oneDNN's sgemm is here and runs on this CPU (Debian's libdnnl.so.2, bound at run time
// and tried once). Without it every fp32 product stays in ATen.
bool CpuSgemmAvailable();

// On by default. Off sends every fp32 product back to ATen (at::mm, at::matmul): for benchmarks
// (bench/train_step.cc's `blas-matmul`) and tests that compare the two. Process-wide.
void EnableCpuSgemm(bool on);

// Whether the CPU sgemm path takes this product: both operands fp32 on the CPU, 2-D.
bool UseCpuSgemm(const at::Tensor& a, const at::Tensor& b);

// c = a b (beta 0) or c += a b (accumulate), for fp32 CPU matrices a (M x K), b (K x N) and c
// (M x N). a and b may be row-major or transposed views of row-major storage (a.t(), w.t()); c
// must be row-major. Other layouts are copied contiguous first. Throws on a shape mismatch or an
// error from oneDNN.
void CpuSgemmOut(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate);

// a b as a new row-major tensor: CpuSgemmOut where UseCpuSgemm(a, b), at::mm otherwise.
at::Tensor Mm(const at::Tensor& a, const at::Tensor& b);

// c = a b, or c += a b with accumulate: CpuSgemmOut where UseCpuSgemm(a, b), ATen otherwise.
void MmOut(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate);

// Whether libdnnl.so.2 has the bf16 gemm (dnnl_gemm_bf16bf16f32, looked up at run time: oneDNN
// 2.x exports it without declaring it in its header) and it runs on this CPU (it needs AVX-512;
// an AVX2-only core answers "unimplemented" and the bf16 products stay in ATen).
bool CpuBf16GemmAvailable();

// On by default. Off sends bf16 products back to ATen (at::mm, then a cast to fp32): for
// benchmarks (bench/train_step.cc's `aten-bf16-wgrad`) and tests. Process-wide.
void EnableCpuBf16Gemm(bool on);

// Whether the bf16 gemm takes this product: both operands bf16 on the CPU, 2-D.
bool UseCpuBf16Gemm(const at::Tensor& a, const at::Tensor& b);

// c = a b or c += a b for bf16 CPU matrices a (M x K), b (K x N) into an fp32 row-major c,
// summed in fp32 (operand layouts as CpuSgemmOut). Throws unless UseCpuBf16Gemm(a, b).
void CpuBf16GemmOut(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate);

// c = a b or c += a b into an fp32 c for bf16 a and b: CpuBf16GemmOut where it takes them,
// otherwise at::mm (rounded to bf16) widened into c.
void MmOutWide(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate);

// Whether model::Linear takes CpuLinearBf16: x (..., K) bf16 and a 2-D fp32 weight on the CPU,
// with the bf16 gemm available and switched on.
bool UseCpuLinearBf16(const at::Tensor& x, const at::Tensor& weight);

// x W.to(bf16)^T with its own backward: dx = dy W.to(bf16) in bf16 (at::mm), dW = dy^T x in fp32
// (CpuBf16GemmOut). model::Linear calls it where UseCpuLinearBf16(x, weight).
at::Tensor CpuLinearBf16(const at::Tensor& x, const at::Tensor& weight);

// Whether model::Linear takes CpuLinearFp32: x (..., K) and a 2-D weight, both fp32 on the CPU.
bool UseCpuLinear(const at::Tensor& x, const at::Tensor& weight);

// x W^T for x (..., K) and a weight W (N, K), both fp32 on the CPU, with its own backward
// (dx = dy W, dW = dy^T x), every product in oneDNN's sgemm. model::Linear calls it where
// UseCpuLinear(x, weight).
at::Tensor CpuLinearFp32(const at::Tensor& x, const at::Tensor& weight);

}  // namespace tenax::model
