#include "tenax/model/cpu_gemm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#if TENAX_WITH_DNNL
#include <dnnl.h>
#endif

#include <algorithm>
#include <atomic>
#include <vector>

#ifndef TENAX_WITH_DNNL
#define TENAX_WITH_DNNL 0
#endif

namespace tenax::model {
namespace {

// A matrix dnnl_sgemm can write (or read untransposed): unit column stride, rows at least a row
// apart.
bool RowMajor(const at::Tensor& t) {
  return t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(1, t.size(1));
}

#if TENAX_WITH_DNNL
// One operand as dnnl_sgemm reads it (row-major): 'N' with ld = the row stride, or 'T' when the
// tensor is the transpose of row-major storage (stride 1 between rows).
struct Operand {
  at::Tensor keep;  // owns a contiguous copy when the layout needed one
  const float* data = nullptr;
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
  o.data = o.keep.data_ptr<float>();
  return o;
}
#endif

// Autograd for x W^T; saves x and W (no copies: the products read them in place).
struct CpuLinearFn : public torch::autograd::Function<CpuLinearFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight) {
    const int64_t k = weight.size(1), n = weight.size(0);
    TORCH_CHECK(x.size(-1) == k, "Linear: the input's last dimension ", x.size(-1),
                " != the weight's ", k);
    const at::Tensor x2 = x.reshape({-1, k});
    at::Tensor y = at::empty({x2.size(0), n}, x.options());
    CpuSgemmOut(y, x2, weight.t(), /*accumulate=*/false);
    ctx->save_for_backward({x, weight});
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = n;
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

std::atomic<bool> g_sgemm{true};

}  // namespace

void EnableCpuSgemm(bool on) { g_sgemm.store(on); }

bool CpuSgemmAvailable() { return TENAX_WITH_DNNL != 0; }

namespace {
// The path is built and switched on, and both operands are fp32 on the CPU.
bool SgemmTakes(const at::Tensor& a, const at::Tensor& b) {
  return CpuSgemmAvailable() && g_sgemm.load(std::memory_order_relaxed) && a.device().is_cpu() &&
         b.device().is_cpu() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat;
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
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.dim() == 2 && c.size(0) == m && c.size(1) == n, "CpuSgemmOut: (",
              m, " x ", k, ") times (", b.size(0), " x ", n, ") into ", c.sizes());
  TORCH_CHECK(RowMajor(c), "CpuSgemmOut: the output must be row-major");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) c.zero_();
    return;
  }
#if TENAX_WITH_DNNL
  const Operand pa = Read(a), pb = Read(b);
  const dnnl_status_t st =
      dnnl_sgemm(pa.trans, pb.trans, m, n, k, 1.0f, pa.data, pa.ld, pb.data, pb.ld,
                 accumulate ? 1.0f : 0.0f, c.data_ptr<float>(), c.stride(0));
  TORCH_CHECK(st == dnnl_success, "oneDNN sgemm failed with status ", static_cast<int>(st));
#else
  if (accumulate) {
    c.addmm_(a, b);
  } else {
    at::mm_out(c, a, b);
  }
#endif
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

at::Tensor CpuLinearFp32(const at::Tensor& x, const at::Tensor& weight) {
  return CpuLinearFn::apply(x, weight);
}

}  // namespace tenax::model
