#include "tenax/model/cpu_gemm.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace tenax::model {
namespace {

// A matrix dnnl_sgemm can write (or read untransposed): unit column stride, rows at least a row
// apart.
bool RowMajor(const at::Tensor& t) {
  return t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(1, t.size(1));
}

// One operand as dnnl_sgemm reads it (row-major): 'N' with ld = the row stride, or 'T' when the
// tensor is the transpose of row-major storage (stride 1 between rows).
struct Operand {
  at::Tensor keep;  // owns a contiguous copy when the layout needed one
  const void* data = nullptr;
  char trans = 'N';
  int64_t ld = 1;
};

Operand Read(const at::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Operand o;
  if (RowMajor(t)) {
    o.keep = t;
    o.trans = 'N';
    o.ld = t.stride(0);
  } else if (t.stride(0) == 1 && t.stride(1) >= std::max<int64_t>(1, rows)) {
    o.keep = t;
    o.trans = 'T';
    o.ld = t.stride(1);
  } else {
    o.keep = t.contiguous();
    o.trans = 'N';
    o.ld = std::max<int64_t>(1, cols);
  }
  o.data = o.keep.data_ptr();
  return o;
}

// oneDNN's C gemm entry points, bound at run time from Debian's libdnnl.so.2 (oneDNN 2.6, package
// libdnnl2). No oneDNN header is included: libtorch's wheel carries oneDNN 3.x headers (and a
// hidden copy of oneDNN inside libtorch_cpu), whose declarations must not meet 2.6's library.
// Both functions have had these signatures since oneDNN 1.x (dnnl_dim_t is int64_t, dnnl_status_t
// an enum whose dnnl_success is 0). dnnl_gemm_bf16bf16f32 is exported by 2.x without being in its
// header. A machine without the library, or whose CPU it cannot serve, keeps every product in
// ATen.
using DnnlStatus = int;
constexpr DnnlStatus kDnnlSuccess = 0;
using SgemmFn = DnnlStatus (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                               const float*, int64_t, float, float*, int64_t);
using Bf16GemmFn = DnnlStatus (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*,
                                  int64_t, const uint16_t*, int64_t, float, float*, int64_t);
struct Dnnl {
  SgemmFn sgemm = nullptr;
  Bf16GemmFn bf16_gemm = nullptr;
};

const Dnnl& LoadDnnl() {
  static const Dnnl dnnl = [] {
    Dnnl d;
    // Never closed: the functions are used until the process ends. RTLD_DEEPBIND: oneDNN's
    // internal symbols bind inside libdnnl.so.2, not to the same names libtorch's own oneDNN 3.x
    // exports (mixed, every call fails with "unimplemented").
    void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (lib == nullptr) return d;
    d.sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "dnnl_sgemm"));
    d.bf16_gemm = reinterpret_cast<Bf16GemmFn>(dlsym(lib, "dnnl_gemm_bf16bf16f32"));
    // A function that is there may still not run on this CPU: oneDNN 2.6's bf16 gemm needs
    // AVX-512 (dnnl_unimplemented on an AVX2-only core). One 1x1x1 product decides, once.
    float c = 0;
    const float a = 1, b = 1;
    if (d.sgemm && d.sgemm('N', 'N', 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1) != kDnnlSuccess) {
      d.sgemm = nullptr;
    }
    const uint16_t one = 0x3f80;  // bf16 1.0
    if (d.bf16_gemm &&
        d.bf16_gemm('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) != kDnnlSuccess) {
      d.bf16_gemm = nullptr;
    }
    return d;
  }();
  return dnnl;
}

// The output sizes of x W^T for x (..., K) and W (N, K): x's with the last one N. Throws when
// the inner dimensions differ.
std::vector<int64_t> LinearOutputSizes(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.size(-1) == weight.size(1), "Linear: the input's last dimension ", x.size(-1),
              " != the weight's ", weight.size(1));
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return sizes;
}

// Autograd for x W^T; saves x and W (no copies: the products read them in place).
struct CpuLinearFn : public torch::autograd::Function<CpuLinearFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight) {
    const std::vector<int64_t> sizes = LinearOutputSizes(x, weight);
    const at::Tensor x2 = x.reshape({-1, weight.size(1)});
    at::Tensor y = at::empty({x2.size(0), weight.size(0)}, x.options());
    CpuSgemmOut(y, x2, weight.t(), /*accumulate=*/false);
    ctx->save_for_backward({x, weight});
    return y.view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    const int64_t k = weight.size(1), n = weight.size(0);
    const at::Tensor g = grads[0].reshape({-1, n});
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) {
      gx = at::empty({g.size(0), k}, x.options());
      CpuSgemmOut(gx, g, weight, /*accumulate=*/false);
      gx = gx.view(x.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      gw = at::empty({n, k}, weight.options());
      CpuSgemmOut(gw, g.t(), x.reshape({-1, k}), /*accumulate=*/false);
    }
    return {gx, gw};
  }
};

// Autograd for x W^T with bf16 activations and an fp32 (master) weight: the products of
// at::matmul(x, W.to(bf16).t()) in forward and for dx, so those are the same bits as before, but
// the weight gradient dy^T x comes out of oneDNN's bf16 gemm in fp32 directly, where at::matmul
// rounds it to bf16 and ToCopyBackward widens it again (two passes over it, and bf16 rounding of
// every weight gradient). Saves x and the bf16 copy of W (as at::matmul does).
struct CpuLinearBf16Fn : public torch::autograd::Function<CpuLinearBf16Fn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight) {
    const std::vector<int64_t> sizes = LinearOutputSizes(x, weight);
    const at::Tensor wb = weight.to(at::kBFloat16);  // (N, K) compute copy
    at::Tensor y = at::mm(x.reshape({-1, weight.size(1)}), wb.t());
    ctx->save_for_backward({x, wb});
    return y.view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &wb = saved[1];
    const int64_t k = wb.size(1), n = wb.size(0);
    const at::Tensor g = grads[0].to(at::kBFloat16).reshape({-1, n});
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = at::mm(g, wb).view(x.sizes());
    if (ctx->needs_input_grad(1)) {
      gw = at::empty({n, k}, wb.options().dtype(at::kFloat));
      MmOutWide(gw, g.t(), x.reshape({-1, k}), /*accumulate=*/false);
    }
    return {gx, gw};
  }
};

std::atomic<bool> g_sgemm{true};
std::atomic<bool> g_bf16_gemm{true};

}  // namespace

void EnableCpuSgemm(bool on) { g_sgemm.store(on); }

void EnableCpuBf16Gemm(bool on) { g_bf16_gemm.store(on); }

bool CpuSgemmAvailable() { return LoadDnnl().sgemm != nullptr; }

bool CpuBf16GemmAvailable() { return LoadDnnl().bf16_gemm != nullptr; }

namespace {
// The path is built and switched on, and both operands are fp32 on the CPU.
bool SgemmTakes(const at::Tensor& a, const at::Tensor& b) {
  return CpuSgemmAvailable() && g_sgemm.load(std::memory_order_relaxed) && a.device().is_cpu() &&
         b.device().is_cpu() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat;
}

// The bf16 gemm is there and switched on, and both operands are bf16 on the CPU.
bool Bf16GemmTakes(const at::Tensor& a, const at::Tensor& b) {
  return g_bf16_gemm.load(std::memory_order_relaxed) && CpuBf16GemmAvailable() &&
         a.device().is_cpu() && b.device().is_cpu() && a.scalar_type() == at::kBFloat16 &&
         b.scalar_type() == at::kBFloat16;
}
}  // namespace

bool UseCpuBf16Gemm(const at::Tensor& a, const at::Tensor& b) {
  return Bf16GemmTakes(a, b) && a.dim() == 2 && b.dim() == 2;
}

bool UseCpuLinearBf16(const at::Tensor& x, const at::Tensor& weight) {
  return Bf16GemmTakes(x, x) && weight.device().is_cpu() && weight.scalar_type() == at::kFloat &&
         x.dim() >= 1 && weight.dim() == 2;
}

namespace {
// What both gemms do before their call, for c (M x N) = a (M x K) b (K x N): check the shapes
// and that c is row-major, and settle the empty products (nothing to add, or zeros). True when
// there is a product left to compute.
bool GemmNeeded(const char* what, at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                bool accumulate) {
  TORCH_CHECK(
      b.size(0) == a.size(1) && c.dim() == 2 && c.size(0) == a.size(0) && c.size(1) == b.size(1),
      what, ": (", a.size(0), " x ", a.size(1), ") times (", b.size(0), " x ", b.size(1), ") into ",
      c.sizes());
  TORCH_CHECK(RowMajor(c), what, ": the output must be row-major");
  if (c.numel() == 0) return false;
  if (a.size(1) == 0) {
    if (!accumulate) c.zero_();
    return false;
  }
  return true;
}

// c = a b (beta 0) or c += a b (beta 1) through a oneDNN gemm with dnnl_sgemm's row-major
// arguments, whose operands are of element type T (float, or bf16 read as its bits) and whose
// result is fp32.
template <typename T, typename Gemm>
void DnnlGemmOut(const char* what, Gemm gemm, at::Tensor& c, const at::Tensor& a,
                 const at::Tensor& b, bool accumulate) {
  const Operand pa = Read(a), pb = Read(b);
  const DnnlStatus st = gemm(pa.trans, pb.trans, a.size(0), b.size(1), a.size(1), 1.0f,
                             static_cast<const T*>(pa.data), pa.ld, static_cast<const T*>(pb.data),
                             pb.ld, accumulate ? 1.0f : 0.0f, c.data_ptr<float>(), c.stride(0));
  TORCH_CHECK(st == kDnnlSuccess, what, ": oneDNN failed with status ", st);
}
}  // namespace

bool UseCpuSgemm(const at::Tensor& a, const at::Tensor& b) {
  return SgemmTakes(a, b) && a.dim() == 2 && b.dim() == 2;
}

bool UseCpuLinear(const at::Tensor& x, const at::Tensor& weight) {
  return SgemmTakes(x, weight) && x.dim() >= 1 && weight.dim() == 2;
}

void CpuSgemmOut(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  TORCH_CHECK(UseCpuSgemm(a, b) && c.device().is_cpu() && c.scalar_type() == at::kFloat,
              "CpuSgemmOut: fp32 CPU matrices only");
  if (!GemmNeeded("CpuSgemmOut", c, a, b, accumulate)) return;
  DnnlGemmOut<float>("CpuSgemmOut", LoadDnnl().sgemm, c, a, b, accumulate);
}

at::Tensor Mm(const at::Tensor& a, const at::Tensor& b) {
  if (!UseCpuSgemm(a, b)) return at::mm(a, b);
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  CpuSgemmOut(c, a, b, /*accumulate=*/false);
  return c;
}

void MmOut(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  if (UseCpuSgemm(a, b) && c.scalar_type() == at::kFloat && c.dim() == 2 && RowMajor(c)) {
    CpuSgemmOut(c, a, b, accumulate);
  } else if (accumulate) {
    c.addmm_(a, b);
  } else {
    at::mm_out(c, a, b);
  }
}

void CpuBf16GemmOut(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  TORCH_CHECK(UseCpuBf16Gemm(a, b) && c.device().is_cpu() && c.scalar_type() == at::kFloat,
              "CpuBf16GemmOut: bf16 CPU matrices into an fp32 one only");
  if (!GemmNeeded("CpuBf16GemmOut", c, a, b, accumulate)) return;
  DnnlGemmOut<uint16_t>("CpuBf16GemmOut", LoadDnnl().bf16_gemm, c, a, b, accumulate);
}

void MmOutWide(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  if (UseCpuBf16Gemm(a, b) && c.scalar_type() == at::kFloat && c.dim() == 2 && RowMajor(c)) {
    CpuBf16GemmOut(c, a, b, accumulate);
  } else if (accumulate) {
    c.add_(at::mm(a, b));
  } else {
    c.copy_(at::mm(a, b));
  }
}

at::Tensor CpuLinearFp32(const at::Tensor& x, const at::Tensor& weight) {
  return CpuLinearFn::apply(x, weight);
}

at::Tensor CpuLinearBf16(const at::Tensor& x, const at::Tensor& weight) {
  return CpuLinearBf16Fn::apply(x, weight);
}

}  // namespace tenax::model
