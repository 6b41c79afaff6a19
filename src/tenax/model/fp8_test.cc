#include "tenax/model/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <tuple>
#include <vector>

namespace tenax::model {
namespace {

// The reference, written from the recipe rather than from fp8.cc: round x * (max / amax) to
// float8 by the dtype cast, then divide the scale back out in fp64. The GEMMs below are plain
// fp64 matmuls of these values, so every difference from Fp8Linear is the float8 GEMM's fp32
// accumulation, not the scaling.
at::Tensor Dequantized(const at::Tensor& x, at::ScalarType fp8, double max) {
  const double amax = x.abs().max().item<double>();
  const double scale = amax > 0 ? max / amax : 1.0;
  return (x.to(at::kDouble) * scale).clamp(-max, max).to(fp8).to(at::kDouble) / scale;
}

double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

TEST(Fp8, TensorwiseScalingMapsTheLargestValueToTheFormatsMax) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({64, 48}) * 3.0;
  for (auto [fp8, max, mantissa_bits] :
       {std::tuple{at::kFloat8_e4m3fn, 448.0, 3}, std::tuple{at::kFloat8_e5m2, 57344.0, 2}}) {
    const Fp8Tensor q = QuantizeTensorwise(x, fp8);
    EXPECT_EQ(q.data.scalar_type(), fp8);
    EXPECT_EQ(q.inverse_scale.scalar_type(), at::kFloat);
    EXPECT_EQ(q.inverse_scale.dim(), 0);
    const at::Tensor back = q.data.to(at::kDouble);
    EXPECT_DOUBLE_EQ(back.abs().max().item<double>(), max);  // amax lands on the format's max
    // Every element within half a unit in the last place of its own magnitude (normal range).
    const at::Tensor deq = back * q.inverse_scale.item<double>();
    const at::Tensor big = x.abs() > x.abs().max() / 64;
    const double worst = ((deq - x.to(at::kDouble)).abs() / x.abs().to(at::kDouble))
                             .masked_select(big)
                             .max()
                             .item<double>();
    EXPECT_LE(worst, std::ldexp(1.0, -(mantissa_bits + 1)) * (1 + 1e-6));
    EXPECT_GT(worst, 0);  // it did round
  }
  const Fp8Tensor zero = QuantizeTensorwise(at::zeros({16, 16}), at::kFloat8_e4m3fn);
  EXPECT_EQ(zero.inverse_scale.item<float>(), 1.0f);
  EXPECT_EQ(zero.data.to(at::kFloat).abs().sum().item<float>(), 0.0f);
}

// Forward and both gradients of Fp8Linear against the fp64 GEMMs of the dequantized operands
// (e4m3 x and W; e5m2 output gradient), and against the exact fp32 layer within float8's
// precision. Shapes are multiples of 16, as on GPUs, with a leading batch dimension.
TEST(Fp8, LinearForwardAndGradientsAreFloat8GemmsOfTheScaledOperands) {
  at::manual_seed(2);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(dtype == at::kFloat ? "fp32 activations" : "bf16 activations");
    const at::Tensor x0 = at::randn({2, 32, 64}).to(dtype);
    const at::Tensor w0 = at::randn({48, 64}) * 0.1;
    const at::Tensor dy = at::randn({2, 32, 48}).to(dtype);
    at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const at::Tensor y = Fp8Linear(x, w);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 32, 48}));
    EXPECT_EQ(y.scalar_type(), dtype);
    y.backward(dy);
    EXPECT_EQ(x.grad().scalar_type(), dtype);
    EXPECT_EQ(w.grad().scalar_type(), at::kFloat);  // the master weight's dtype

    const at::Tensor qx = Dequantized(x0.reshape({64, 64}), at::kFloat8_e4m3fn, 448);
    const at::Tensor qw = Dequantized(w0, at::kFloat8_e4m3fn, 448);
    const at::Tensor qg = Dequantized(dy.reshape({64, 48}), at::kFloat8_e5m2, 57344);
    // fp32 accumulation (and a bf16 output's rounding) is all that separates them.
    const double out_tol = dtype == at::kFloat ? 1e-6 : 4e-3;
    EXPECT_LT(RelativeError(y.reshape({64, 48}), qx.mm(qw.t())), out_tol);
    EXPECT_LT(RelativeError(x.grad().reshape({64, 64}), qg.mm(qw)), out_tol);
    EXPECT_LT(RelativeError(w.grad(), qg.t().mm(qx)), 1e-6);

    // Against the exact layer: e4m3 keeps 3 mantissa bits, e5m2 2, so a few percent.
    const at::Tensor xd = x0.to(at::kDouble).reshape({64, 64}), wd = w0.to(at::kDouble);
    const at::Tensor gd = dy.to(at::kDouble).reshape({64, 48});
    const double fwd = RelativeError(y.reshape({64, 48}), xd.mm(wd.t()));
    const double dx = RelativeError(x.grad().reshape({64, 64}), gd.mm(wd));
    const double dw = RelativeError(w.grad(), gd.t().mm(xd));
    std::printf("float8 layer against the exact one (%s): output %.4f, dx %.4f, dW %.4f\n",
                dtype == at::kFloat ? "fp32" : "bf16", fwd, dx, dw);
    EXPECT_LT(fwd, 0.05);
    EXPECT_LT(dx, 0.08);
    EXPECT_LT(dw, 0.08);
    EXPECT_GT(fwd, 1e-3) << "no float8 rounding at all";
  }
}

// The CPU's GEMM (fp32 of the float8 values) against at::_scaled_mm itself on the CPU, for the
// three GEMMs' operand formats: the same products, so within fp32 accumulation order.
TEST(Fp8, CpuGemmIsScaledMm) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({64, 32}), w = at::randn({48, 32}) * 0.1;
  const at::Tensor g = at::randn({64, 48}) * 1e-3;
  const Fp8Tensor qx = QuantizeTensorwise(x, at::kFloat8_e4m3fn);
  const Fp8Tensor qw = QuantizeTensorwise(w, at::kFloat8_e4m3fn);
  const Fp8Tensor qg = QuantizeTensorwise(g, at::kFloat8_e5m2);
  auto scaled_mm = [](const Fp8Tensor& a, const at::Tensor& ad, const Fp8Tensor& b,
                      const at::Tensor& bd) {
    return at::_scaled_mm(ad, bd, a.inverse_scale, b.inverse_scale, std::nullopt, std::nullopt,
                          at::kFloat);
  };
  at::Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
  const at::Tensor y = Fp8Linear(xr, wr);
  EXPECT_LT(RelativeError(y, scaled_mm(qx, qx.data, qw, qw.data.t())), 1e-6);
  y.backward(g);
  EXPECT_LT(RelativeError(xr.grad(), scaled_mm(qg, qg.data, qw, qw.data)), 1e-6);
  EXPECT_LT(RelativeError(wr.grad(), scaled_mm(qg, qg.data.t().contiguous(), qx, qx.data)), 1e-6);
}

}  // namespace
}  // namespace tenax::model
