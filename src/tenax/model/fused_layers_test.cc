// The fused RMSNorm, RoPE and SwiGLU nodes against the plain compositions of at:: ops they replace
// (kept here as the reference): forward values and the gradients of every input on random inputs,
// in fp64 and fp32 (bit-identical where fused_layers.h promises it, else within rounding) and
// bf16 (within bf16 rounding of the fp64 result). layers_test.cc checks the same layers against
// finite differences.
#include "tenax/model/fused_layers.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <cmath>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "tenax/model/testing_bf16.h"

namespace tenax::model {
namespace {

at::ScalarType AtLeastFloat(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

// The plain compositions as they were before fused_layers (autograd derives their backward).
at::Tensor PlainRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(AtLeastFloat(x.scalar_type()));
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight.to(x.scalar_type());
}

at::Tensor PlainRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto dtype = AtLeastFloat(x.scalar_type());
  const int64_t t = x.size(1), half = x.size(3) / 2;
  at::Tensor pairs = x.to(dtype).reshape({x.size(0), t, x.size(2), half, 2});
  at::Tensor x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  at::Tensor c = cos.narrow(0, 0, t).to(dtype).view({1, t, 1, half});
  at::Tensor s = sin.narrow(0, 0, t).to(dtype).view({1, t, 1, half});
  return at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).flatten(3).to(x.scalar_type());
}

at::Tensor PlainSiluMul(const at::Tensor& a, const at::Tensor& b) { return at::silu(a) * b; }

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

// f(inputs) and d sum(f * r) / d inputs, with every input cast to `dtype` except those listed in
// `keep` (the fp32 master weights stay fp32, as in the model).
Result Run(const Fn& f, const std::vector<at::Tensor>& inputs, const at::Tensor& r,
           at::ScalarType dtype, const std::vector<bool>& keep = {}) {
  std::vector<at::Tensor> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool k = i < keep.size() && keep[i];
    in.push_back(inputs[i].to(k ? at::kFloat : dtype).detach().requires_grad_(true));
  }
  at::Tensor out = f(in);
  at::Tensor loss = (out.to(at::kDouble) * r).sum();
  return {out.detach(), torch::autograd::grad({loss}, in)};
}

double MaxRelDiff(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  return (ad - bd).abs().max().item<double>() / std::max(1e-30, bd.abs().max().item<double>());
}

// Compares fused and plain in fp64, fp32 and bf16. `exact_fp32`: forward and every gradient
// bit-identical in fp32 and fp64. bf16: both within `bf16_tol` of the fp64 result.
void Compare(const Fn& fused, const Fn& plain, const std::vector<at::Tensor>& inputs,
             bool exact_fp32, double bf16_tol, const std::vector<bool>& keep = {}) {
  at::Generator gen = at::detail::createCPUGenerator(7);
  at::Tensor probe = fused(inputs);
  at::Tensor r = at::normal(0.0, 1.0, probe.sizes().vec(), gen, at::dtype(at::kDouble));
  const Result ref = Run(plain, inputs, r, at::kDouble, keep);
  for (at::ScalarType dt : {at::kDouble, at::kFloat}) {
    const Result a = Run(fused, inputs, r, dt, keep), b = Run(plain, inputs, r, dt, keep);
    const double fwd_tol = dt == at::kDouble ? 1e-14 : 1e-6;
    if (exact_fp32) {
      EXPECT_TRUE(at::equal(a.out, b.out)) << at::toString(dt);
    } else {
      EXPECT_LT(MaxRelDiff(a.out, b.out), fwd_tol) << at::toString(dt);
    }
    for (size_t i = 0; i < a.grads.size(); ++i) {
      if (exact_fp32) {
        EXPECT_TRUE(at::equal(a.grads[i], b.grads[i])) << at::toString(dt) << " input " << i;
      } else {
        EXPECT_LT(MaxRelDiff(a.grads[i], b.grads[i]), dt == at::kDouble ? 1e-12 : 2e-5)
            << at::toString(dt) << " input " << i;
      }
    }
  }
  const Result a = Run(fused, inputs, r, at::kBFloat16, keep);
  const Result b = Run(plain, inputs, r, at::kBFloat16, keep);
  EXPECT_EQ(a.out.scalar_type(), at::kBFloat16);
  EXPECT_LT(MaxRelDiff(a.out, ref.out), bf16_tol);
  EXPECT_LT(MaxRelDiff(b.out, ref.out), bf16_tol);  // the tolerance is bf16's, not the fusion's
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_EQ(a.grads[i].scalar_type(), b.grads[i].scalar_type()) << "input " << i;
    EXPECT_LT(MaxRelDiff(a.grads[i], ref.grads[i]), bf16_tol) << "bf16 input " << i;
    EXPECT_LT(MaxRelDiff(b.grads[i], ref.grads[i]), bf16_tol) << "plain bf16 input " << i;
  }
}

at::Tensor Randn(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, scale, shape, g, at::dtype(at::kDouble));
}

TEST(FusedLayers, RmsNormMatchesThePlainComposition) {
  for (int64_t c : {8, 64, 513}) {
    SCOPED_TRACE(c);
    Compare([](const std::vector<at::Tensor>& in) { return FusedRmsNorm(in[0], in[1], 1e-5); },
            [](const std::vector<at::Tensor>& in) { return PlainRmsNorm(in[0], in[1], 1e-5); },
            {Randn({3, 5, c}, 1, 2.0), Randn({c}, 2).add_(1.0)}, /*exact_fp32=*/false,
            /*bf16_tol=*/2e-2, /*keep=*/{false, true});
  }
}

TEST(FusedLayers, RopeMatchesThePlainCompositionBitForBit) {
  const at::Tensor angles = at::outer(at::arange(9, at::kDouble), Randn({4}, 3).abs_());
  const at::Tensor cos = angles.cos().to(at::kFloat), sin = angles.sin().to(at::kFloat);
  for (int64_t t : {1, 7, 9}) {
    SCOPED_TRACE(t);
    Compare([&](const std::vector<at::Tensor>& in) { return FusedRope(in[0], cos, sin); },
            [&](const std::vector<at::Tensor>& in) { return PlainRope(in[0], cos, sin); },
            {Randn({2, t, 3, 8}, 4)}, /*exact_fp32=*/true, /*bf16_tol=*/1e-2);
  }
}

// fp64 is the composition itself; fp32 on the CPU runs the loops (next test), within fp32's
// rounding of the composition.
TEST(FusedLayers, SiluMulMatchesThePlainComposition) {
  Compare([](const std::vector<at::Tensor>& in) { return SiluMul(in[0], in[1]); },
          [](const std::vector<at::Tensor>& in) { return PlainSiluMul(in[0], in[1]); },
          {Randn({4, 6, 40}, 5, 3.0), Randn({4, 6, 40}, 6)}, /*exact_fp32=*/false,
          /*bf16_tol=*/2e-2);
}

// The gate's CPU loops in `dtype` on more elements than one task (77,100 against 32,768, so the
// work is split) from a non-contiguous `a`: inputs, output and both gradients for g.
struct SiluMulLoopRun {
  at::Tensor a, b, g, out;
  std::vector<at::Tensor> grads;
};
SiluMulLoopRun RunSiluMulLoops(at::ScalarType dtype) {
  const int64_t rows = 300, cols = 257;
  SiluMulLoopRun r;
  r.a = Randn({cols, rows}, 7, 4.0).to(dtype).t();  // non-contiguous
  r.b = Randn({rows, cols}, 8).to(dtype);
  r.g = Randn({rows, cols}, 9).to(dtype);
  const at::Tensor av = r.a.detach().requires_grad_(true), bv = r.b.detach().requires_grad_(true);
  r.out = SiluMul(av, bv);
  EXPECT_NE(r.out.grad_fn()->name().find("SiluMulFn"), std::string::npos);
  r.grads = torch::autograd::grad({r.out}, {av, bv}, {r.g});
  return r;
}

// A NaN stays a NaN; large inputs saturate as silu does (below -87, to about -1e-36 x a where the
// widened path reaches -0: exp is clamped there to stay finite).
void ExpectSiluMulEdgeCases(at::ScalarType dtype) {
  const at::Tensor x = at::tensor({std::nanf(""), 200.0f, -200.0f, 0.0f}).to(dtype);
  const at::Tensor s = SiluMul(x, at::ones({4}).to(dtype)).to(at::kFloat);
  EXPECT_TRUE(std::isnan(s[0].item<float>()));
  EXPECT_EQ(s[1].item<float>(), 200.0f);
  EXPECT_NEAR(s[2].item<float>(), 0.0f, 1e-33);
  EXPECT_EQ(s[3].item<float>(), 0.0f);
}

// fp32 on the CPU takes cpu_kernels.h's fp32 loops: against the fp64 composition, elementwise
// within a few fp32 roundings; NaN and saturation as silu.
TEST(FusedLayers, Fp32SiluMulOnTheCpuMatchesFp64Elementwise) {
  const SiluMulLoopRun r = RunSiluMulLoops(at::kFloat);
  const at::Tensor &out = r.out, &a = r.a, &b = r.b, &g = r.g;
  const std::vector<at::Tensor>& grads = r.grads;
  const at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble), gd = g.to(at::kDouble);
  const at::Tensor sd = at::sigmoid(ad);
  // (result, fp64 value, magnitude of its terms): a few fp32 roundings of the terms' magnitude
  // (the input gradient's 1 + a (1 - sigmoid(a)) cancels near a = -1.28).
  const at::Tensor gbs = (gd * bd * sd).abs();
  const std::vector<std::tuple<at::Tensor, at::Tensor, at::Tensor>> checks = {
      {out, ad * sd * bd, (ad * sd * bd).abs()},
      {grads[0], gd * bd * sd * (1.0 + ad * (1.0 - sd)), gbs * (1.0 + ad.abs())},
      {grads[1], gd * ad * sd, (gd * ad * sd).abs()}};
  for (size_t i = 0; i < checks.size(); ++i) {
    const auto& [got, want, scale] = checks[i];
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const at::Tensor err = (got.to(at::kDouble) - want).abs();
    EXPECT_TRUE((err <= scale * 1e-6 + 1e-30).all().item<bool>())
        << "output " << i << ": worst " << err.max().item<double>();
  }
  ExpectSiluMulEdgeCases(at::kFloat);
}

// bf16 on the CPU takes cpu_kernels.h's loops: against the widened composition they replace
// (fp32 math, one rounding to bf16), on more elements than one task so that the work is split,
// from non-contiguous inputs. The two differ only in exp's last bits and the order of the
// products, so an element may round to the neighbouring bf16 value, never further.
TEST(FusedLayers, Bf16SiluMulOnTheCpuIsTheWidenedCompositionWithinOneBf16Step) {
  const SiluMulLoopRun r = RunSiluMulLoops(at::kBFloat16);
  const at::Tensor &out = r.out, &a = r.a, &b = r.b, &g = r.g;
  const std::vector<at::Tensor>& grads = r.grads;
  const at::Tensor af = a.to(at::kFloat), bf = b.to(at::kFloat), gf = g.to(at::kFloat);
  const std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {
      {out, (at::silu(af) * bf).to(at::kBFloat16)},
      {grads[0], at::silu_backward(gf * bf, af).to(at::kBFloat16)},
      {grads[1], (gf * at::silu(af)).to(at::kBFloat16)}};
  for (size_t i = 0; i < pairs.size(); ++i) {
    ASSERT_EQ(pairs[i].first.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(testing::WithinOneBf16Step(pairs[i].first, pairs[i].second, 0.01))
        << "output " << i;
  }
  ExpectSiluMulEdgeCases(at::kBFloat16);
}

// bf16 RoPE on the CPU (fp32 tables) takes cpu_kernels.h's loops: the rotation and its transpose
// in fp32, rounded to bf16, within one bf16 step of the composition's arithmetic written out.
TEST(FusedLayers, Bf16RopeOnTheCpuIsTheRotationWithinOneBf16Step) {
  const int64_t b = 2, t = 40, h = 3, d = 16;
  const at::Tensor angles = at::outer(at::arange(t + 5, at::kDouble), Randn({d / 2}, 15).abs_());
  const at::Tensor cos = angles.cos().to(at::kFloat), sin = angles.sin().to(at::kFloat);
  const at::Tensor x = Randn({b, t, h, d}, 16, 2.0).to(at::kBFloat16);
  const at::Tensor g = Randn({b, t, h, d}, 17).to(at::kBFloat16);
  const at::Tensor xv = x.detach().requires_grad_(true);
  const at::Tensor out = FusedRope(xv, cos, sin);
  const at::Tensor gx = torch::autograd::grad({out}, {xv}, {g})[0];
  auto rotate = [&](const at::Tensor& v, double sign) {  // (x0 c - x1 s, x0 s + x1 c), s signed
    const at::Tensor p = v.to(at::kFloat).reshape({b, t, h, d / 2, 2});
    const at::Tensor c = cos.narrow(0, 0, t).view({1, t, 1, d / 2});
    const at::Tensor s = sin.narrow(0, 0, t).view({1, t, 1, d / 2}) * sign;
    const at::Tensor x0 = p.select(-1, 0), x1 = p.select(-1, 1);
    return at::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).reshape({b, t, h, d});
  };
  for (const auto& [got, want] :
       std::vector<std::pair<at::Tensor, at::Tensor>>{{out, rotate(x, 1)}, {gx, rotate(g, -1)}}) {
    ASSERT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(testing::WithinOneBf16Step(got, want, 0.02));
  }
}

// bf16 RMSNorm on the CPU (fp32 weight, as in the model) takes cpu_kernels.h's loops: against the
// composition's arithmetic written out here (fp32 statistics, x r rounded to bf16, times the
// weight rounded to bf16), within one bf16 step; the weight's gradient within fp32 summation
// order; and the same bits at one and at two threads.
TEST(FusedLayers, Bf16RmsNormOnTheCpuIsTheCompositionWithinOneBf16Step) {
  const int64_t rows = 150, cols = 96;  // 150 rows: more than two blocks of 64
  const at::Tensor x = Randn({3, rows / 3, cols}, 12, 2.0).to(at::kBFloat16);
  const at::Tensor w = Randn({cols}, 13).add_(1.0).to(at::kFloat);
  const at::Tensor g = Randn({3, rows / 3, cols}, 14).to(at::kBFloat16);
  auto run = [&](int threads) {
    const int before = at::get_num_threads();
    at::set_num_threads(threads);
    const at::Tensor xv = x.detach().requires_grad_(true), wv = w.detach().requires_grad_(true);
    const at::Tensor out = FusedRmsNorm(xv, wv, 1e-5);
    auto grads = torch::autograd::grad({out}, {xv, wv}, {g});
    at::set_num_threads(before);
    return std::vector<at::Tensor>{out, grads[0], grads[1]};
  };
  const std::vector<at::Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(at::equal(one[i], two[i])) << i;

  const at::Tensor xf = x.to(at::kFloat), gf = g.to(at::kFloat);
  const at::Tensor r = at::rsqrt(xf.pow(2).mean(-1, true) + 1e-5);
  const at::Tensor n = xf * r, gn = gf * w;
  const at::Tensor want_out =
      ((n.to(at::kBFloat16).to(at::kFloat) * w.to(at::kBFloat16).to(at::kFloat)));
  const at::Tensor want_gx = (gn - n * (gn * n).mean(-1, true)) * r;
  const at::Tensor want_gw = (gf * n).reshape({-1, cols}).sum(0);
  // The output element by element; the input's gradient, a difference of nearly equal terms where
  // it is small, against its largest element (as the fp64 comparisons above).
  ASSERT_EQ(one[0].scalar_type(), at::kBFloat16);
  ASSERT_EQ(one[1].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(testing::WithinOneBf16Step(one[0], want_out, 0.02));
  EXPECT_TRUE(testing::WithinOneBf16Step(one[1], want_gx, 0.02, testing::StepAt::kLargestElement));
  ASSERT_EQ(one[2].scalar_type(), at::kFloat);
  EXPECT_LT(MaxRelDiff(one[2], want_gw), 1e-5);
}

}  // namespace
}  // namespace tenax::model
