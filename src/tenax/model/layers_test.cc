// Every layer's gradients against central finite differences in float64, and the RoPE math
// against closed forms. A wrong backward (or a forward whose math differs from its autograd
// graph, e.g. a detached cast) fails here.
#include "tenax/model/layers.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <functional>

#include "tenax/model/llama.h"

namespace tenax::model {
namespace {

at::Generator Gen(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

at::Tensor Randn(std::vector<int64_t> shape, at::Generator& g, double scale = 1.0) {
  return at::normal(0.0, scale, shape, g, at::TensorOptions().dtype(at::kDouble));
}

// Checks d/d(inputs) of sum(f(inputs) * R) against central differences on every element.
void CheckGradients(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
                    std::vector<at::Tensor> inputs, double tol = 1e-7) {
  for (auto& x : inputs) x = x.detach().clone().set_requires_grad(true);
  at::Generator g = Gen(99);
  at::Tensor out = f(inputs);
  at::Tensor r = Randn(out.sizes().vec(), g);
  at::Tensor loss = (out * r).sum();
  std::vector<at::Tensor> grads = torch::autograd::grad({loss}, inputs);
  at::NoGradGuard no_grad;
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor flat = inputs[i].view({-1});
    at::Tensor analytic = grads[i].reshape({-1});
    double max_err = 0, max_ref = 0;
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double orig = flat[j].item<double>();
      flat[j] = orig + eps;
      const double up = (f(inputs) * r).sum().item<double>();
      flat[j] = orig - eps;
      const double down = (f(inputs) * r).sum().item<double>();
      flat[j] = orig;
      const double numeric = (up - down) / (2 * eps);
      max_err = std::max(max_err, std::abs(numeric - analytic[j].item<double>()));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
    EXPECT_LT(max_err, tol * std::max(1.0, max_ref))
        << "input " << i << ": max |numeric - analytic| = " << max_err;
  }
}

ModelSpec SmallSpec(bool scaled_rope = false) {
  ModelSpec s;
  s.dim = 16;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_hidden_dim = 24;
  s.vocab_size = 11;
  s.rope_theta = 10000.0;
  s.rope_scaling.enabled = scaled_rope;
  s.rope_scaling.original_max_position = 16;  // small so every band of the scaling is exercised
  return s;
}

TEST(LayerGradients, RmsNorm) {
  at::Generator g = Gen(1);
  CheckGradients([](const std::vector<at::Tensor>& in) { return RmsNorm(in[0], in[1], 1e-5); },
                 {Randn({2, 3, 8}, g), Randn({8}, g)});
}

TEST(LayerGradients, Rope) {
  at::Generator g = Gen(2);
  RopeTable rope = MakeRopeTable(SmallSpec(true), 5, at::kCPU);
  CheckGradients([&](const std::vector<at::Tensor>& in) { return ApplyRope(in[0], rope); },
                 {Randn({2, 5, 3, 4}, g)});
}

TEST(LayerGradients, GroupedQueryAttention) {
  at::Generator g = Gen(3);
  ModelSpec s = SmallSpec();
  RopeTable rope = MakeRopeTable(s, 5, at::kCPU);
  const int64_t hd = s.head_dim();
  CheckGradients(
      [&](const std::vector<at::Tensor>& in) {
        return Attention(in[0], in[1], in[2], in[3], in[4], s.n_heads, s.n_kv_heads, rope);
      },
      {Randn({2, 5, s.dim}, g), Randn({s.n_heads * hd, s.dim}, g, 0.3),
       Randn({s.n_kv_heads * hd, s.dim}, g, 0.3), Randn({s.n_kv_heads * hd, s.dim}, g, 0.3),
       Randn({s.dim, s.n_heads * hd}, g, 0.3)});
}

TEST(LayerGradients, SwiGlu) {
  at::Generator g = Gen(4);
  CheckGradients(
      [](const std::vector<at::Tensor>& in) { return FeedForward(in[0], in[1], in[2], in[3]); },
      {Randn({2, 3, 8}, g), Randn({12, 8}, g, 0.3), Randn({8, 12}, g, 0.3),
       Randn({12, 8}, g, 0.3)});
}

// A model whose weights are about to be overwritten draws none: the same parameters (names,
// shapes, dtype), matrices at zero and norms at one, and loading weights makes it the model they
// came from.
TEST(LlamaInit, OverwrittenSkipsTheDrawsAndLoadsLikeAnyOther) {
  const ModelSpec s = SmallSpec();
  Llama drawn(s, 7, at::kCPU);
  Llama blank(s, 7, at::kCPU, Llama::Init::kOverwritten);
  ASSERT_EQ(blank.params().size(), drawn.params().size());
  for (size_t i = 0; i < drawn.params().size(); ++i) {
    const auto& a = drawn.params()[i];
    const auto& b = blank.params()[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.tensor.sizes(), a.tensor.sizes()) << a.name;
    EXPECT_EQ(b.tensor.scalar_type(), at::kFloat) << a.name;
    EXPECT_TRUE(b.tensor.requires_grad()) << a.name;
    const double expected = a.tensor.dim() == 1 ? 1.0 : 0.0;
    EXPECT_EQ(b.tensor.min().item<double>(), expected) << a.name;
    EXPECT_EQ(b.tensor.max().item<double>(), expected) << a.name;
  }
  ASSERT_TRUE(blank.LoadParams(drawn.params()).ok());
  at::Tensor tokens = at::tensor({1, 5, 2, 9, 3, 3, 0, 10}, at::kLong).view({2, 4});
  at::Tensor targets = at::tensor({5, 2, 9, 3, 3, 0, 10, 4}, at::kLong).view({2, 4});
  EXPECT_EQ(blank.Loss(tokens, targets, at::kFloat).item<double>(),
            drawn.Loss(tokens, targets, at::kFloat).item<double>());
}

// The whole model: embedding, blocks, final norm, untied and tied output, cross-entropy.
TEST(LayerGradients, WholeModelLoss) {
  for (bool tied : {false, true}) {
    ModelSpec s = SmallSpec(true);
    s.tie_embeddings = tied;
    s.init_std = 0.3;  // large enough that every path contributes visibly
    Llama model(s, 7, at::kCPU);
    model.CastParams(at::kDouble);
    at::Tensor tokens = at::tensor({1, 5, 2, 9, 3, 3, 0, 10}, at::kLong).view({2, 4});
    at::Tensor targets = at::tensor({5, 2, 9, 3, 3, 0, 10, 4}, at::kLong).view({2, 4});
    std::vector<at::Tensor> params;
    for (auto& p : model.params()) params.push_back(p.tensor);
    CheckGradients(
        [&](const std::vector<at::Tensor>& in) {
          model.ReplaceParams(in);  // fresh leaves, so the graph runs through them
          return model.Loss(tokens, targets, at::kDouble);
        },
        params);
  }
}

// Recomputing blocks in backward changes memory, never results: the loss and every gradient are
// bit-identical with activation checkpointing none, selective and full.
TEST(ActivationCheckpoint, IdenticalLossAndGradients) {
  ModelSpec s = SmallSpec(true);
  s.n_layers = 3;
  s.init_std = 0.2;
  at::Tensor tokens = at::tensor({1, 5, 2, 9, 3, 3, 0, 10}, at::kLong).view({2, 4});
  at::Tensor targets = at::tensor({5, 2, 9, 3, 3, 0, 10, 4}, at::kLong).view({2, 4});
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (const char* mode : {"none", "selective", "full"}) {
    Llama model(s, 3, at::kCPU);
    model.SetActivationCheckpoint(mode);
    at::Tensor loss = model.Loss(tokens, targets);
    loss.backward();
    losses.push_back(loss.item<double>());
    std::vector<at::Tensor> g;
    for (auto& p : model.params()) {
      ASSERT_TRUE(p.tensor.grad().defined()) << mode << " " << p.name;
      g.push_back(p.tensor.grad().clone());
    }
    grads.push_back(g);
  }
  for (size_t m = 1; m < grads.size(); ++m) {
    EXPECT_EQ(losses[m], losses[0]);
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_TRUE(at::equal(grads[m][i], grads[0][i])) << "mode " << m << " param " << i;
    }
  }
}

TEST(Rope, PositionZeroIsIdentityAndNormPreserved) {
  at::Generator g = Gen(5);
  RopeTable rope = MakeRopeTable(SmallSpec(), 6, at::kCPU);
  at::Tensor x = Randn({1, 6, 2, 4}, g);
  at::Tensor y = ApplyRope(x, rope);
  EXPECT_TRUE(at::allclose(y.select(1, 0), x.select(1, 0)));
  at::Tensor nx = x.view({1, 6, 2, 2, 2}).pow(2).sum(-1);
  at::Tensor ny = y.view({1, 6, 2, 2, 2}).pow(2).sum(-1);
  EXPECT_TRUE(at::allclose(nx, ny, 1e-6, 1e-6));  // the table is fp32
  // Pair (x0, x1) at position t is rotated by t * inv_freq[i]: check one by hand.
  const double theta = 3 * 1.0 / std::pow(10000.0, 2.0 / 4.0);  // t = 3, i = 1, D = 4
  const double a = x[0][3][1][2].item<double>(), b = x[0][3][1][3].item<double>();
  EXPECT_NEAR(y[0][3][1][2].item<double>(), a * std::cos(theta) - b * std::sin(theta), 1e-6);
  EXPECT_NEAR(y[0][3][1][3].item<double>(), a * std::sin(theta) + b * std::cos(theta), 1e-6);
}

// Llama 3.1 scaling on the real 8B spec: frequencies with wavelength below 8192/4 = 2048 are
// unchanged, above 8192 divided by 8, smoothly interpolated between.
TEST(Rope, Llama31Scaling) {
  ModelOptions o;
  o.preset = "llama3-8b";
  ModelSpec s = *ResolveModelSpec(o, 0);
  at::Tensor f = RopeInverseFrequencies(s);
  s.rope_scaling.enabled = false;
  at::Tensor base = RopeInverseFrequencies(s);
  ASSERT_EQ(f.numel(), 64);
  for (int64_t i = 0; i < 64; ++i) {
    const double b = base[i].item<double>(), v = f[i].item<double>();
    const double wavelen = 2 * M_PI / b;
    if (wavelen < 2048) {
      EXPECT_DOUBLE_EQ(v, b);
    } else if (wavelen > 8192) {
      EXPECT_DOUBLE_EQ(v, b / 8);
    } else {
      const double smooth = (8192 / wavelen - 1) / (4 - 1);
      EXPECT_NEAR(v, (1 - smooth) * b / 8 + smooth * b, 1e-15);
      EXPECT_LT(v, b);
      EXPECT_GT(v, b / 8);
    }
  }
}

}  // namespace
}  // namespace tenax::model
