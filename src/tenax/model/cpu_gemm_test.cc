// oneDNN's sgemm and bf16 gemm paths (cpu_gemm.h) against fp64 products: every operand layout
// the callers pass, accumulation, empty shapes, the fallbacks, and Linear's forward and backward.
#include "tenax/model/cpu_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>

#include "tenax/model/layers.h"

namespace tenax::model {
namespace {

// fp32 products of length k differ from the exact one by about k * 2^-24 * |a||b|; inputs are
// standard normal, so 1e-5 * sqrt(k) relative to the magnitude of a row's terms is loose for a
// correct product and far tighter than a wrong one (a missing or transposed term is O(1)).
void ExpectMatches(const at::Tensor& got, const at::Tensor& a, const at::Tensor& b,
                   const at::Tensor& base = at::Tensor()) {
  at::Tensor want = at::mm(a.to(at::kDouble), b.to(at::kDouble));
  if (base.defined()) want += base.to(at::kDouble);
  const double k = static_cast<double>(a.size(1));
  const double tol = 1e-5 * std::sqrt(std::max(k, 1.0)) * (1.0 + std::sqrt(k));
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LE((got.to(at::kDouble) - want).abs().max().item<double>(), tol);
}

TEST(CpuSgemm, EveryOperandLayoutMatchesFp64) {
  at::manual_seed(1);
  const int64_t m = 37, k = 53, n = 29;  // odd sizes: no vector-width luck
  const at::Tensor a = at::randn({m, k}), b = at::randn({k, n});
  const at::Tensor at_ = at::randn({k, m}).t(), bt = at::randn({n, k}).t();  // transposed views
  // Row-major with a leading dimension larger than the row: a narrowed wider matrix.
  const at::Tensor wide_a = at::randn({m, k + 7}).narrow(1, 3, k);
  // No usable layout (every other column): copied contiguous first.
  const at::Tensor strided_b = at::randn({k, 2 * n}).slice(1, 0, 2 * n, 2);
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{at_, b}, std::pair{a, bt},
                             std::pair{at_, bt}, std::pair{wide_a, b}, std::pair{a, strided_b}}) {
    at::Tensor c = at::empty({m, n});
    CpuSgemmOut(c, x, y, /*accumulate=*/false);
    ExpectMatches(c, x, y);
    EXPECT_TRUE(at::equal(Mm(x, y), c));  // Mm is the same product
  }
}

TEST(CpuSgemm, AccumulatesIntoARowMajorView) {
  at::manual_seed(2);
  const at::Tensor a = at::randn({16, 24}), b = at::randn({24, 8});
  at::Tensor big = at::randn({20, 8});
  at::Tensor c = big.narrow(0, 2, 16);  // rows 2..17 of a larger buffer, as the head writes
  const at::Tensor before = big.clone();
  const at::Tensor base = c.clone();
  MmOut(c, a, b, /*accumulate=*/true);
  ExpectMatches(c, a, b, base);
  EXPECT_TRUE(at::equal(big.narrow(0, 0, 2), before.narrow(0, 0, 2)));  // nothing outside
  EXPECT_TRUE(at::equal(big.narrow(0, 18, 2), before.narrow(0, 18, 2)));
}

TEST(CpuSgemm, EmptyShapes) {
  at::Tensor c = at::full({3, 4}, 7.0);
  CpuSgemmOut(c, at::empty({3, 0}), at::empty({0, 4}), /*accumulate=*/true);
  EXPECT_TRUE(at::equal(c, at::full({3, 4}, 7.0)));  // adds nothing
  CpuSgemmOut(c, at::empty({3, 0}), at::empty({0, 4}), /*accumulate=*/false);
  EXPECT_TRUE(at::equal(c, at::zeros({3, 4})));
  at::Tensor none = at::empty({0, 4});
  CpuSgemmOut(none, at::empty({0, 5}), at::randn({5, 4}), /*accumulate=*/false);
}

TEST(CpuSgemm, RefusesMismatchedShapes) {
  at::Tensor c = at::empty({3, 4});
  EXPECT_THROW(CpuSgemmOut(c, at::randn({3, 5}), at::randn({6, 4}), false), c10::Error);
  EXPECT_THROW(CpuSgemmOut(c, at::randn({3, 5}), at::randn({5, 5}), false), c10::Error);
  EXPECT_THROW(Linear(at::randn({2, 3, 5}), at::randn({4, 6})), c10::Error);
}

TEST(CpuSgemm, OtherDtypesTakeAten) {
  at::manual_seed(3);
  for (at::ScalarType t : {at::kDouble, at::kBFloat16}) {
    const at::Tensor a = at::randn({8, 16}).to(t), b = at::randn({16, 4}).to(t);
    EXPECT_FALSE(UseCpuSgemm(a, b));
    EXPECT_TRUE(at::equal(Mm(a, b), at::mm(a, b)));
    at::Tensor c = at::randn({8, 4}).to(t);
    at::Tensor want = c.clone().addmm_(a, b);
    MmOut(c, a, b, /*accumulate=*/true);
    EXPECT_TRUE(at::equal(c, want));
  }
}

// The same product on the same shape gives the same bits every time (what bit-identical resume
// relies on).
TEST(CpuSgemm, RepeatsBitForBit) {
  at::manual_seed(4);
  const at::Tensor a = at::randn({256, 512}), b = at::randn({512, 384});
  const at::Tensor first = Mm(a, b);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(Mm(a, b), first));
}

// Linear on fp32 CPU tensors takes the sgemm path; its output and both gradients match the same
// computation in fp64 through at::matmul's autograd.
TEST(CpuLinear, ForwardAndBackwardMatchFp64) {
  if (!CpuSgemmAvailable()) GTEST_SKIP() << "no libdnnl.so.2 (Debian libdnnl2) that runs here";
  at::manual_seed(5);
  const at::Tensor x0 = at::randn({3, 17, 40}), w0 = at::randn({24, 40}),
                   g = at::randn({3, 17, 24});
  ASSERT_TRUE(UseCpuLinear(x0, w0));
  at::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  at::Tensor y = Linear(x, w);
  EXPECT_NE(y.grad_fn()->name().find("CpuLinearFn"), std::string::npos) << y.grad_fn()->name();
  y.backward(g);
  at::Tensor xd = x0.to(at::kDouble).requires_grad_(), wd = w0.to(at::kDouble).requires_grad_();
  at::Tensor yd = at::matmul(xd, wd.t());
  yd.backward(g.to(at::kDouble));
  auto close = [](const at::Tensor& got, const at::Tensor& want, double k) {
    return (got.to(at::kDouble) - want).abs().max().item<double>() <= 2e-5 * k;
  };
  EXPECT_TRUE(close(y.detach(), yd.detach(), 40));
  EXPECT_TRUE(close(x.grad(), xd.grad(), 24));
  EXPECT_TRUE(close(w.grad(), wd.grad(), 51));
  // Only the inputs that need a gradient get one.
  at::Tensor frozen = x0.clone().requires_grad_();
  Linear(frozen, w0).sum().backward();
  ASSERT_TRUE(frozen.grad().defined());
  EXPECT_TRUE(
      close(frozen.grad(), at::ones({3, 17, 24}, at::kDouble).matmul(w0.to(at::kDouble)), 24));
}

// Switched off, Linear is at::matmul again, bit for bit; bf16 inputs never take the sgemm path.
TEST(CpuLinear, SwitchedOffOrBf16IsAtenMatmul) {
  at::manual_seed(6);
  const at::Tensor x = at::randn({4, 9, 32}), w = at::randn({16, 32});
  EnableCpuSgemm(false);
  const at::Tensor off = Linear(x, w);
  EnableCpuSgemm(true);
  EXPECT_TRUE(at::equal(off, at::matmul(x, w.t())));
  const at::Tensor xb = x.to(at::kBFloat16);
  EXPECT_FALSE(UseCpuLinear(xb, w));
  EXPECT_TRUE(at::equal(Linear(xb, w), at::matmul(xb, w.to(at::kBFloat16).t())));
}

// bf16 operands are exact in fp64, so the fp32 result of the bf16 gemm is held to the same fp32
// summation bound as the sgemm's.
TEST(CpuBf16Gemm, EveryOperandLayoutMatchesFp64) {
  if (!CpuBf16GemmAvailable()) GTEST_SKIP() << "libdnnl.so.2 without dnnl_gemm_bf16bf16f32";
  at::manual_seed(7);
  const int64_t m = 37, k = 53, n = 29;
  auto bf = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
  const at::Tensor a = bf(at::randn({m, k})), b = bf(at::randn({k, n}));
  const at::Tensor at_ = bf(at::randn({k, m})).t(), bt = bf(at::randn({n, k})).t();
  const at::Tensor wide_a = bf(at::randn({m, k + 7})).narrow(1, 3, k);
  const at::Tensor strided_b = bf(at::randn({k, 2 * n})).slice(1, 0, 2 * n, 2);
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{at_, b}, std::pair{a, bt},
                             std::pair{at_, bt}, std::pair{wide_a, b}, std::pair{a, strided_b}}) {
    ASSERT_TRUE(UseCpuBf16Gemm(x, y));
    at::Tensor c = at::empty({m, n});
    CpuBf16GemmOut(c, x, y, /*accumulate=*/false);
    ExpectMatches(c, x, y);
    at::Tensor again = at::empty({m, n});
    MmOutWide(again, x, y, /*accumulate=*/false);
    EXPECT_TRUE(at::equal(again, c));
  }
  // Accumulation into rows of a larger fp32 buffer, nothing written outside them.
  at::Tensor big = at::randn({m + 4, n});
  at::Tensor c = big.narrow(0, 2, m);
  const at::Tensor before = big.clone(), base = c.clone();
  MmOutWide(c, a, b, /*accumulate=*/true);
  ExpectMatches(c, a, b, base);
  EXPECT_TRUE(at::equal(big.narrow(0, 0, 2), before.narrow(0, 0, 2)));
  EXPECT_TRUE(at::equal(big.narrow(0, m + 2, 2), before.narrow(0, m + 2, 2)));
  // The same product gives the same bits every time.
  at::Tensor first = at::empty({m, n}), second = at::empty({m, n});
  CpuBf16GemmOut(first, a, b, false);
  CpuBf16GemmOut(second, a, b, false);
  EXPECT_TRUE(at::equal(first, second));
  // Shapes, dtypes and output layout are checked.
  at::Tensor bad = at::empty({m, n + 1});
  EXPECT_THROW(CpuBf16GemmOut(bad, a, b, false), c10::Error);
  EXPECT_THROW(CpuBf16GemmOut(c, a.to(at::kFloat), b, false), c10::Error);
  at::Tensor column_major = at::empty({n, m}).t();
  EXPECT_THROW(CpuBf16GemmOut(column_major, a, b, false), c10::Error);
}

// Switched off (or for operands it does not take), MmOutWide is at::mm rounded to bf16, widened.
TEST(CpuBf16Gemm, SwitchedOffIsAtenMmWidened) {
  at::manual_seed(8);
  const at::Tensor a = at::randn({8, 16}).to(at::kBFloat16),
                   b = at::randn({16, 4}).to(at::kBFloat16);
  EnableCpuBf16Gemm(false);
  EXPECT_FALSE(UseCpuBf16Gemm(a, b));
  at::Tensor c = at::randn({8, 4});
  const at::Tensor base = c.clone();
  MmOutWide(c, a, b, /*accumulate=*/true);
  EnableCpuBf16Gemm(true);
  EXPECT_TRUE(at::equal(c, base + at::mm(a, b).to(at::kFloat)));
}

// Linear with bf16 activations and an fp32 weight: output and input gradient are at::matmul's
// bits (the same bf16 products); the weight gradient is fp32 and matches the fp64 product of the
// bf16 gradient and input to fp32 accuracy, where at::matmul's is rounded to bf16.
TEST(CpuLinearBf16, MatchesAtenMatmulAndKeepsTheWeightGradientInFp32) {
  if (!CpuBf16GemmAvailable()) GTEST_SKIP() << "libdnnl.so.2 without dnnl_gemm_bf16bf16f32";
  at::manual_seed(9);
  const int64_t k = 96, n = 40;
  const at::Tensor x0 = at::randn({3, 17, k}).to(at::kBFloat16), w0 = at::randn({n, k}),
                   g = at::randn({3, 17, n}).to(at::kBFloat16);
  ASSERT_TRUE(UseCpuLinearBf16(x0, w0));
  at::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  at::Tensor y = Linear(x, w);
  EXPECT_NE(y.grad_fn()->name().find("CpuLinearBf16Fn"), std::string::npos) << y.grad_fn()->name();
  y.backward(g);
  at::Tensor xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_();
  at::Tensor yr = at::matmul(xr, wr.to(at::kBFloat16).t());
  yr.backward(g);
  EXPECT_TRUE(at::equal(y.detach(), yr.detach()));
  EXPECT_TRUE(at::equal(x.grad(), xr.grad()));
  ASSERT_EQ(w.grad().scalar_type(), at::kFloat);
  const at::Tensor exact =
      at::mm(g.reshape({-1, n}).t().to(at::kDouble), x0.reshape({-1, k}).to(at::kDouble));
  const double ours = (w.grad().to(at::kDouble) - exact).abs().max().item<double>();
  const double aten = (wr.grad().to(at::kDouble) - exact).abs().max().item<double>();
  const double rows = static_cast<double>(3 * 17);
  EXPECT_LE(ours, 1e-5 * std::sqrt(rows) * (1.0 + std::sqrt(rows)));
  EXPECT_LT(ours, aten);  // bf16 rounding of the old gradient is ~2^-9 relative: far above
  // Only the inputs that need a gradient get one; a frozen weight is never widened.
  at::Tensor frozen = x0.clone().requires_grad_();
  Linear(frozen, w0).sum().backward();
  ASSERT_TRUE(frozen.grad().defined());
  at::Tensor xf = x0.clone().requires_grad_();
  at::matmul(xf, w0.to(at::kBFloat16).t()).sum().backward();
  EXPECT_TRUE(at::equal(frozen.grad(), xf.grad()));
  // Switched off, Linear is at::matmul again, bit for bit, gradients included.
  EnableCpuBf16Gemm(false);
  at::Tensor xo = x0.clone().requires_grad_(), wo = w0.clone().requires_grad_();
  Linear(xo, wo).backward(g);
  EnableCpuBf16Gemm(true);
  EXPECT_TRUE(at::equal(wo.grad(), wr.grad()));
  EXPECT_TRUE(at::equal(xo.grad(), xr.grad()));
}

}  // namespace
}  // namespace tenax::model
