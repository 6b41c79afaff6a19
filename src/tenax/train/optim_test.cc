#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tenax/parallel/gradients.h"
#include "tenax/train/adamw.h"
#include "tenax/train/lr_schedule.h"
#include "tenax/train/testing_loop_adamw.h"

namespace tenax::train {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedulerOptions o;
  o.name = "cosine";
  o.warmup_steps = 10;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(o, 1.0, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(o, 1.0, 60, 110), 0.55, 1e-12);  // halfway: (1 + 0.1) / 2
  EXPECT_NEAR(LearningRate(o, 1.0, 110, 110), 0.1, 1e-12);
}

TEST(LrSchedule, WarmupStableDecay) {
  LrSchedulerOptions o;
  o.name = "wsd";
  o.warmup_steps = 10;
  o.decay_ratio = 0.2;
  o.min_lr_ratio = 0.0;
  EXPECT_DOUBLE_EQ(LearningRate(o, 2.0, 5, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 2.0, 80, 100), 2.0);  // last stable step
  EXPECT_DOUBLE_EQ(LearningRate(o, 2.0, 90, 100), 1.0);  // linear: halfway down
  EXPECT_DOUBLE_EQ(LearningRate(o, 2.0, 100, 100), 0.0);
  o.decay_type = "sqrt";
  EXPECT_NEAR(LearningRate(o, 2.0, 85, 100), 2.0 * (1 - std::sqrt(0.25)), 1e-12);
  o.decay_type = "cosine";
  EXPECT_NEAR(LearningRate(o, 2.0, 90, 100), 1.0, 1e-12);
}

// Two AdamW steps on one scalar, against the update rule written out by hand (PyTorch's).
TEST(AdamW, MatchesHandComputedSteps) {
  OptimizerOptions o;
  o.lr = 0.1;
  o.beta1 = 0.9;
  o.beta2 = 0.99;
  o.eps = 1e-8;
  o.weight_decay = 0.5;
  at::Tensor w = at::full({1, 1}, 2.0, at::kFloat).set_requires_grad(true);
  at::Tensor n = at::full({1}, 3.0, at::kFloat).set_requires_grad(true);
  std::vector<model::NamedTensor> params{{"w", w}, {"n", n}};
  AdamW opt(o, params);
  double pw = 2.0, pn = 3.0, m = 0, v = 0, mn = 0, vn = 0;
  for (int t = 1; t <= 2; ++t) {
    const double g = 0.5 * t;
    w.mutable_grad() = at::full({1, 1}, g, at::kFloat);
    n.mutable_grad() = at::full({1}, g, at::kFloat);
    opt.Step(o.lr);
    pw *= 1 - o.lr * o.weight_decay;  // matrices decay
    m = 0.9 * m + 0.1 * g;
    v = 0.99 * v + 0.01 * g * g;
    pw -= o.lr / (1 - std::pow(0.9, t)) * m /
          (std::sqrt(v) / std::sqrt(1 - std::pow(0.99, t)) + 1e-8);
    mn = 0.9 * mn + 0.1 * g;  // gains do not decay
    vn = 0.99 * vn + 0.01 * g * g;
    pn -= o.lr / (1 - std::pow(0.9, t)) * mn /
          (std::sqrt(vn) / std::sqrt(1 - std::pow(0.99, t)) + 1e-8);
  }
  EXPECT_NEAR(w.item<double>(), pw, 1e-6);
  EXPECT_NEAR(n.item<double>(), pn, 1e-6);
  EXPECT_EQ(opt.step_count(), 2);
}

TEST(ClipGradNorm, ScalesToMaxNorm) {
  at::Tensor a = at::zeros({2}).set_requires_grad(true);
  at::Tensor b = at::zeros({1}).set_requires_grad(true);
  a.mutable_grad() = at::tensor({3.0f, 0.0f});
  b.mutable_grad() = at::tensor({4.0f});
  std::vector<model::NamedTensor> params{{"a", a}, {"b", b}};
  EXPECT_NEAR(ClipGradNorm(params, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-5);
  EXPECT_NEAR(b.grad()[0].item<double>(), 0.8, 1e-5);
  EXPECT_NEAR(ClipGradNorm(params, 0.0), 1.0, 1e-5);  // 0 disables clipping, still reports
}

struct FlatCase {
  double weight_decay;
  bool masks;
  bool drop_a_grad;  // one parameter gets no gradient on some steps (the per-parameter fallback)
  AdamW::UpdateMode mode;
};

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// 20 steps on random parameters of mixed shapes (matrices, vectors, a 3-d tensor, a scalar and
// one large enough that ATen splits it across threads at other boundaries than in a flat buffer),
// random gradients of a few magnitudes and a varying learning rate: the flat optimizer gives the
// reference's parameters and moments bit for bit on CPU (every element sees the same IEEE
// operations in the same order) as ATen operations per tensor or over the flat buffers (the
// accelerators' default). The one-pass loop (CPU's fp32 default) gives the moments bit for bit
// and the parameters within one ulp per step (its square root is exact, ATen's is not).
// Tolerance 0 everywhere else, stated: any difference fails.
void ExpectFlatMatchesReference(const FlatCase& c) {
  SCOPED_TRACE(c.mode == AdamW::UpdateMode::kFlat        ? "flat"
               : c.mode == AdamW::UpdateMode::kPerTensor ? "per tensor"
                                                         : "loop");
  at::manual_seed(17);
  const std::vector<std::vector<int64_t>> shapes{{37, 13},   {64}, {5, 3, 7}, {1},
                                                 {301, 257}, {13}, {8, 8}};
  OptimizerOptions o;
  o.lr = 1e-2;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = c.weight_decay;
  std::vector<model::NamedTensor> named;
  std::vector<model::NamedTensor> ref_params;  // the reference's: the loop before issue 17
  std::vector<at::Tensor> masks, ref_masks;
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor p = at::randn(shapes[i], at::kFloat);
    named.push_back({"p" + std::to_string(i), p.clone()});
    ref_params.push_back({"p" + std::to_string(i), p.clone()});
    if (c.masks) masks.push_back((at::rand(shapes[i]) < 0.5).to(at::kFloat));
  }
  AdamW flat(o, named, masks);
  flat.set_update_mode(c.mode);
  testing::LoopAdamW ref(o, ref_params, masks);
  for (int step = 1; step <= 20; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const double scale = std::pow(10.0, static_cast<double>(static_cast<int>(i) % 3 - 1));
      at::Tensor g = at::randn(shapes[i], at::kFloat) * scale;
      const bool drop = c.drop_a_grad && i == 2 && step % 3 == 0;
      named[i].tensor.mutable_grad() = drop ? at::Tensor() : g.clone();
      ref_params[i].tensor.mutable_grad() = drop ? at::Tensor() : g.clone();
    }
    const double lr = o.lr * (1.0 + 0.1 * step);
    flat.Step(lr);
    ref.Step(lr);
  }
  const auto state = flat.StateTensors();
  ASSERT_EQ(state.size(), 2 * shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(state[2 * i].name, "exp_avg.p" + std::to_string(i));
    EXPECT_EQ(state[2 * i + 1].name, "exp_avg_sq.p" + std::to_string(i));
    EXPECT_EQ(state[2 * i].tensor.sizes(), ref_params[i].tensor.sizes());
    if (c.mode == AdamW::UpdateMode::kLoop) {
      // The one-pass kernel's square root is correctly rounded, ATen's vectorized one is not
      // (adamw_kernel.h): an update may round the other way, by one ulp of the parameter per step
      // at most (|p| < 8 here, ulp 2^-21), which compounds at most linearly over the 20 steps.
      EXPECT_LE(MaxAbsDiff(named[i].tensor, ref_params[i].tensor), 20 * std::ldexp(1.0, -21))
          << "parameter " << i;
    } else {
      EXPECT_EQ(MaxAbsDiff(named[i].tensor, ref_params[i].tensor), 0.0) << "parameter " << i;
    }
    EXPECT_EQ(MaxAbsDiff(state[2 * i].tensor, ref.m()[i]), 0.0) << "exp_avg " << i;
    EXPECT_EQ(MaxAbsDiff(state[2 * i + 1].tensor, ref.v()[i]), 0.0) << "exp_avg_sq " << i;
    // The update moved every parameter (the test would pass vacuously otherwise).
    EXPECT_GT(state[2 * i + 1].tensor.abs().max().item<double>(), 0.0) << i;
  }
}

constexpr auto kFlat = AdamW::UpdateMode::kFlat;
constexpr auto kPerTensor = AdamW::UpdateMode::kPerTensor;
constexpr auto kLoop = AdamW::UpdateMode::kLoop;

TEST(AdamWFlat, MatchesPerParameterLoopWithoutDecay) {
  ExpectFlatMatchesReference({0.0, false, false, kFlat});
  ExpectFlatMatchesReference({0.0, false, false, kPerTensor});
  ExpectFlatMatchesReference({0.0, false, false, kLoop});
}
TEST(AdamWFlat, MatchesPerParameterLoopWithDecay) {
  ExpectFlatMatchesReference({0.1, false, false, kFlat});
  ExpectFlatMatchesReference({0.1, false, false, kPerTensor});
  ExpectFlatMatchesReference({0.1, false, false, kLoop});
}
TEST(AdamWFlat, MatchesPerParameterLoopWithDecayMasks) {
  ExpectFlatMatchesReference({0.1, true, false, kFlat});
  ExpectFlatMatchesReference({0.1, true, false, kPerTensor});
  ExpectFlatMatchesReference({0.1, true, false, kLoop});
}
TEST(AdamWFlat, MatchesPerParameterLoopWhenAGradientIsMissing) {
  ExpectFlatMatchesReference({0.1, false, true, kFlat});
  ExpectFlatMatchesReference({0.1, false, true, kPerTensor});
  ExpectFlatMatchesReference({0.1, false, true, kLoop});
}

// The per-parameter state tensors are views of the flat buffers: LoadState writes through them,
// and an optimizer restored from another's StateTensors continues bit-identically.
TEST(AdamWFlat, RestoredStateContinuesBitIdentically) {
  at::manual_seed(3);
  OptimizerOptions o;
  o.weight_decay = 0.1;
  auto make = [] {
    return std::vector<model::NamedTensor>{{"w", at::randn({16, 9})}, {"b", at::randn({9})}};
  };
  std::vector<model::NamedTensor> a = make();
  std::vector<model::NamedTensor> b{{"w", a[0].tensor.clone()}, {"b", a[1].tensor.clone()}};
  AdamW opt_a(o, a);
  std::vector<std::vector<at::Tensor>> grads;
  for (int s = 0; s < 6; ++s) grads.push_back({at::randn({16, 9}), at::randn({9})});
  auto step = [&](std::vector<model::NamedTensor>& ps, AdamW& opt, int s) {
    for (size_t i = 0; i < ps.size(); ++i) ps[i].tensor.mutable_grad() = grads[s][i].clone();
    opt.Step(1e-3);
  };
  for (int s = 0; s < 3; ++s) step(a, opt_a, s);
  // Same weights as `a` after 3 steps, a fresh optimizer loaded with a's state (copied, as a
  // checkpoint would be).
  for (size_t i = 0; i < a.size(); ++i) b[i].tensor.copy_(a[i].tensor);
  std::vector<model::NamedTensor> saved;
  for (const auto& t : opt_a.StateTensors()) saved.push_back({t.name, t.tensor.clone()});
  AdamW opt_b(o, b);
  opt_b.set_update_mode(AdamW::UpdateMode::kFlat);  // a's default (per tensor) continued flat
  ASSERT_TRUE(opt_b.LoadState(saved, opt_a.step_count()).ok());
  for (int s = 3; s < 6; ++s) {
    step(a, opt_a, s);
    step(b, opt_b, s);
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].tensor, b[i].tensor)) << i;
  const auto sa = opt_a.StateTensors(), sb = opt_b.StateTensors();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(at::equal(sa[i].tensor, sb[i].tensor)) << i;
  // A state of the wrong shape is refused with the tensor's name.
  saved[0].tensor = at::zeros({3});
  const Status bad = opt_b.LoadState(saved, 3);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("exp_avg.w"), std::string::npos) << bad.message();
}

// Clipping as torch.nn.utils.clip_grad_norm_: the coefficient max / (norm + 1e-6) in fp64,
// clamped at 1, applied to every gradient; identical to scaling by the double written out here.
TEST(ClipGradNorm, TensorNormMatchesDoubleArithmetic) {
  at::manual_seed(5);
  std::vector<model::NamedTensor> params;
  for (auto shape : {std::vector<int64_t>{40, 7}, {7}, {3, 3, 3}}) {
    at::Tensor p = at::zeros(shape).set_requires_grad(true);
    p.mutable_grad() = at::randn(shape) * 3.0;
    params.push_back({"p", p});
  }
  double sumsq = 0;
  std::vector<at::Tensor> before;
  for (const auto& p : params) {
    before.push_back(p.tensor.grad().clone());
    sumsq += p.tensor.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  const at::Tensor norm = ClipGradNormTensor(params, 2.0);
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_NEAR(norm.item<double>(), std::sqrt(sumsq), 1e-5 * std::sqrt(sumsq));
  const double coef = 2.0 / (norm.item<double>() + 1e-6);
  ASSERT_LT(coef, 1.0);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::equal(params[i].tensor.grad(), before[i].mul(coef))) << i;
  }
  // Below the maximum: untouched.
  for (size_t i = 0; i < params.size(); ++i) params[i].tensor.mutable_grad() = before[i].clone();
  ClipGradNormTensor(params, 1e6);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::equal(params[i].tensor.grad(), before[i])) << i;
  }
}

TEST(ClipGradNorm, NonFiniteNormPoisonsTheGradients) {
  std::vector<at::Tensor> grads{at::ones({4}), at::ones({2, 2})};
  parallel::ClipToMaxNorm(grads, at::scalar_tensor(std::nan(""), at::kFloat), 1.0);
  for (const auto& g : grads) EXPECT_TRUE(at::isnan(g).all().item<bool>());
  std::vector<at::Tensor> inf{at::ones({4})};
  parallel::ClipToMaxNorm(inf, at::scalar_tensor(INFINITY, at::kFloat), 1.0);
  EXPECT_TRUE(at::equal(inf[0], at::zeros({4})));  // 1 / inf: scaled to zero, as torch does
}

}  // namespace
}  // namespace tenax::train
