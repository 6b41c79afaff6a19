// cpu_kernels.h: its exp against the C library's, in double, over its whole range and beyond;
// the causal softmax against masked at::softmax in fp32 rounded to bf16 (SwiGLU's loops are
// checked through SiluMul in fused_layers_test.cc).
#include "tenax/model/cpu_kernels.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "tenax/model/testing_bf16.h"

namespace tenax::model::cpu {
namespace {

TEST(CpuKernels, ExpIsWithinItsStatedErrorOverItsRange) {
  double worst = 0;
  for (int i = 0; i <= 2'000'000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 2'000'000.0f;
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(ExpForSigmoid(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  // Clamped outside [-87, 88]: finite, and exp of the bound.
  EXPECT_EQ(ExpForSigmoid(-1000.0f), ExpForSigmoid(-87.0f));
  EXPECT_EQ(ExpForSigmoid(1000.0f), ExpForSigmoid(88.0f));
  EXPECT_TRUE(std::isfinite(ExpForSigmoid(INFINITY)));
  EXPECT_GT(ExpForSigmoid(-INFINITY), 0.0f);
}

const uint16_t* Bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
uint16_t* MutableBits(at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

TEST(CpuKernels, CausalSoftmaxIsMaskedSoftmaxForwardAndBackward) {
  // 3 slabs of G = 2 heads x the query positions first..T-1 (first 0: all of them; 15: a later
  // block, as attention.cc's query blocks), T = 37 keys; rows split in two calls, as threads do.
  const int64_t slabs = 3, t = 37, g = 2;
  const float scale = 0.125f;
  for (const int64_t first : {0, 15}) {
    SCOPED_TRACE(first);
    const int64_t rows = (t - first) * g;
    at::manual_seed(11);
    const at::Tensor s = (at::randn({slabs, rows, t}) * 8).to(at::kBFloat16);
    const at::Tensor gr = at::randn({slabs, rows, t}).to(at::kBFloat16);
    at::Tensor p = at::empty_like(s), ds = at::empty_like(s);
    for (const auto& [b, e] : {std::pair<int64_t, int64_t>{0, 50}, {50, slabs * rows}}) {
      CausalSoftmaxForward(Bits(s), MutableBits(p), b, e, rows, t, g, first, scale);
    }
    const at::Tensor position =
        at::arange(first, t).repeat_interleave(g).unsqueeze(1);         // (rows, 1)
    const at::Tensor masked = at::arange(t).unsqueeze(0).gt(position);  // (rows, t)
    const at::Tensor want_p =
        at::softmax((s.to(at::kFloat) * scale).masked_fill(masked, -INFINITY), -1);
    EXPECT_TRUE(testing::WithinOneBf16Step(p, want_p, 0.02));
    EXPECT_TRUE((p.to(at::kFloat).masked_select(masked.expand_as(want_p)) == 0).all().item<bool>());
    for (const auto& [b, e] : {std::pair<int64_t, int64_t>{0, 101}, {101, slabs * rows}}) {
      CausalSoftmaxBackward(Bits(p), Bits(gr), MutableBits(ds), b, e, rows, t, g, first, scale);
    }
    // d/ds of softmax(scale s) . gr, from the bf16 probabilities as saved.
    const at::Tensor pf = p.to(at::kFloat), gf = gr.to(at::kFloat);
    const at::Tensor want_ds = scale * pf * (gf - (gf * pf).sum(-1, /*keepdim=*/true));
    EXPECT_TRUE(testing::WithinOneBf16Step(ds, want_ds, 0.02));
  }
}

}  // namespace
}  // namespace tenax::model::cpu
