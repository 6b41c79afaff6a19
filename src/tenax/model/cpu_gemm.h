// fp32 matrix products on the CPU through oneDNN's sgemm.
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
// Threads: oneDNN runs on OpenMP, the same libgomp threads as libtorch's intra-op pool, so
// at::get_num_threads() (training.threads, train/device.h) is what it uses.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tenax::model {

// Whether this build has oneDNN's sgemm (libdnnl-dev at configure time, TENAX_WITH_DNNL). Without
// it every fp32 product stays in ATen and CpuSgemmOut computes with at::mm.
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

// Whether model::Linear takes CpuLinearFp32: x (..., K) and a 2-D weight, both fp32 on the CPU.
bool UseCpuLinear(const at::Tensor& x, const at::Tensor& weight);

// x W^T for x (..., K) and a weight W (N, K), both fp32 on the CPU, with its own backward
// (dx = dy W, dW = dy^T x), every product in oneDNN's sgemm. model::Linear calls it where
// UseCpuLinear(x, weight).
at::Tensor CpuLinearFp32(const at::Tensor& x, const at::Tensor& weight);

}  // namespace tenax::model
