#include "tenax/model/fp8.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <vector>

#include "tenax/core/check.h"

namespace tenax::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double Fp8Max(at::ScalarType fp8) {
  TENAX_CHECK(fp8 == at::kFloat8_e4m3fn || fp8 == at::kFloat8_e5m2);
  return fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
}

// cuBLASLt's float8 GEMMs take the first operand row-major and the second column-major.
at::Tensor ColumnMajor(const at::Tensor& m) { return m.t().contiguous().t(); }

// The GEMM a x b of two scaled float8 operands (a (M, K), b (K, N)), accumulated in fp32.
at::Tensor ScaledMm(const Fp8Tensor& a, const at::Tensor& a_data, const Fp8Tensor& b,
                    const at::Tensor& b_data, at::ScalarType out, bool fast_accum) {
  if (a_data.is_cuda()) {
    // cuBLASLt's limits, checked here so that a bad shape names itself rather than failing in
    // the library (train/ refuses such models before training).
    for (int64_t d : {a_data.size(0), a_data.size(1), b_data.size(1)}) {
      TENAX_CHECK_MSG(d % 16 == 0,
                      fmt::format("float8 GEMM ({} x {}) x ({} x {}): every "
                                  "dimension must be a multiple of 16 on GPUs",
                                  a_data.size(0), a_data.size(1), b_data.size(0), b_data.size(1))
                          .c_str());
    }
  }
  if (!a_data.is_cuda()) {
    // The same GEMM as an fp32 one of the float8 values: each is exact in fp32 and so is each
    // product (4 x 4 significand bits at most), so only the fp32 accumulation's order can differ
    // from _scaled_mm's. oneDNN runs _scaled_mm through its scalar reference kernel on CPUs
    // without float8 instructions (a 300-step debug-tiny run: about an hour instead of seconds);
    // Fp8.CpuGemmIsScaledMm checks the two agree.
    const at::Tensor acc = at::mm(a_data.to(at::kFloat), b_data.to(at::kFloat));
    return (acc * (a.inverse_scale * b.inverse_scale)).to(out);
  }
  return at::_scaled_mm(a_data, b_data, a.inverse_scale, b.inverse_scale, /*bias=*/std::nullopt,
                        /*scale_result=*/std::nullopt, out, fast_accum);
}

struct Fp8LinearFn : public torch::autograd::Function<Fp8LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    const int64_t k = x.size(-1), n = weight.size(0);
    TENAX_CHECK(weight.dim() == 2 && weight.size(1) == k);
    TENAX_CHECK_MSG(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat,
                    "float8 matmuls take bf16 or fp32 activations");
    const Fp8Tensor qx = QuantizeTensorwise(x.reshape({-1, k}), at::kFloat8_e4m3fn);  // (M, K)
    const Fp8Tensor qw = QuantizeTensorwise(weight, at::kFloat8_e4m3fn);              // (N, K)
    at::Tensor y = ScaledMm(qx, qx.data, qw, qw.data.t(), x.scalar_type(), /*fast_accum=*/true);
    ctx->save_for_backward({qx.data, qx.inverse_scale, qw.data, qw.inverse_scale});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = n;
    return y.view(shape);  // (..., N)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Fp8Tensor qx{saved[0], saved[1]}, qw{saved[2], saved[3]};
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const int64_t n = qw.data.size(0), k = qw.data.size(1);
    const Fp8Tensor qg = QuantizeTensorwise(grads[0].reshape({-1, n}), at::kFloat8_e5m2);  // (M, N)
    // dx (M, K) = dy (M, N) W (N, K); dW (N, K) = dy^T (N, M) x (M, K).
    at::Tensor dx = ScaledMm(qg, qg.data, qw, ColumnMajor(qw.data), x_dtype, false);
    at::Tensor dw =
        ScaledMm(qg, qg.data.t().contiguous(), qx, ColumnMajor(qx.data), at::kFloat, false);
    std::vector<int64_t> shape = grads[0].sizes().vec();
    shape.back() = k;
    return {dx.view(shape), dw};
  }
};

}  // namespace

Fp8Tensor QuantizeTensorwise(const at::Tensor& x, at::ScalarType fp8) {
  at::NoGradGuard no_grad;
  const double max = Fp8Max(fp8);
  const at::Tensor amax = x.abs().max().to(at::kFloat);  // ()
  // An all-zero tensor keeps scale 1 (its float8 copy is zeros either way).
  const at::Tensor scale = at::where(
      amax > 0, max / amax.clamp_min(std::numeric_limits<float>::min()), at::ones_like(amax));
  at::Tensor data = (x.to(at::kFloat) * scale).clamp(-max, max).to(fp8);
  return {data, scale.reciprocal()};
}

at::Tensor Fp8Linear(const at::Tensor& x, const at::Tensor& weight) {
  return Fp8LinearFn::apply(x, weight);
}

}  // namespace tenax::model
