// oneDNN's sgemm path (cpu_gemm.h) against fp64 products: every operand layout the callers pass,
// accumulation, empty shapes, the fallbacks, and Linear's forward and backward.
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
  if (!CpuSgemmAvailable()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
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

}  // namespace
}  // namespace tenax::model
