#include <gtest/gtest.h>

#include <cmath>

#include "tenax/train/adamw.h"
#include "tenax/train/lr_schedule.h"

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

}  // namespace
}  // namespace tenax::train
