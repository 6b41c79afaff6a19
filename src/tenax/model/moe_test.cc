// The MoE block against a naive per-token loop (routing, gates, shared experts, both routers), its
// gradients (including the injected aux-loss gradient) against central finite differences in
// float64, dropless routing under a maximally unbalanced router, zero gradients for experts no
// token chose, the sigmoid router's bias update, and an MoE Llama end to end.
#include "tenax/model/moe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <functional>

#include "tenax/model/layers.h"
#include "tenax/model/llama.h"

namespace tenax::model {
namespace {

at::Generator Gen(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

at::Tensor Randn(std::vector<int64_t> shape, at::Generator& g, double scale = 1.0) {
  return at::normal(0.0, scale, shape, g, at::TensorOptions().dtype(at::kDouble));
}

MoeSpec Spec(const std::string& router, int64_t shared, double coef) {
  MoeSpec m;
  m.n_experts = 5;
  m.top_k = 2;
  m.n_shared = shared;
  m.ffn_hidden_dim = 6;
  m.router = router;
  m.aux_loss_coef = coef;
  return m;
}

ModelSpec OneLayer(const MoeSpec& moe) {
  ModelSpec s;
  s.dim = 8;
  s.n_layers = 1;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.ffn_hidden_dim = 12;
  s.vocab_size = 11;
  s.moe = moe;
  return s;
}

// Weights as a flat list [router, (w1, w2, w3) x E, shared w1, w2, w3].
std::vector<at::Tensor> RandomWeights(const MoeSpec& m, int64_t c, at::Generator& g) {
  std::vector<at::Tensor> w = {Randn({m.n_experts, c}, g)};
  for (int64_t e = 0; e < m.n_experts; ++e) {
    w.push_back(Randn({m.ffn_hidden_dim, c}, g, 0.5));
    w.push_back(Randn({c, m.ffn_hidden_dim}, g, 0.5));
    w.push_back(Randn({m.ffn_hidden_dim, c}, g, 0.5));
  }
  if (m.n_shared > 0) {
    const int64_t sf = m.n_shared * m.ffn_hidden_dim;
    w.push_back(Randn({sf, c}, g, 0.5));
    w.push_back(Randn({c, sf}, g, 0.5));
    w.push_back(Randn({sf, c}, g, 0.5));
  }
  return w;
}

MoeWeights AsWeights(const MoeSpec& m, const std::vector<at::Tensor>& w) {
  MoeWeights out;
  out.router = w[0];
  for (int64_t e = 0; e < m.n_experts; ++e) {
    out.w1.push_back(w[static_cast<size_t>(1 + 3 * e)]);
    out.w2.push_back(w[static_cast<size_t>(2 + 3 * e)]);
    out.w3.push_back(w[static_cast<size_t>(3 + 3 * e)]);
  }
  if (m.n_shared > 0) {
    const size_t s = static_cast<size_t>(1 + 3 * m.n_experts);
    out.shared_w1 = w[s];
    out.shared_w2 = w[s + 1];
    out.shared_w3 = w[s + 2];
  }
  return out;
}

// Token by token, expert by expert: what the block must compute, written without sorting,
// bincount or index arithmetic.
at::Tensor NaiveMoe(const at::Tensor& x, const MoeWeights& w, const MoeSpec& m,
                    const at::Tensor& bias) {
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < x.size(0); ++t) {
    const at::Tensor xt = x[t].unsqueeze(0);                    // (1, C)
    const at::Tensor logits = at::matmul(xt, w.router.t())[0];  // (E)
    at::Tensor score = m.router == "sigmoid" ? at::sigmoid(logits) : at::softmax(logits, 0);
    const at::Tensor pick = m.router == "sigmoid" ? score + bias.to(at::kDouble) : score;
    std::vector<int64_t> chosen;
    std::vector<bool> used(static_cast<size_t>(m.n_experts), false);
    for (int64_t j = 0; j < m.top_k; ++j) {  // repeated argmax = top-k
      int64_t best = -1;
      for (int64_t e = 0; e < m.n_experts; ++e) {
        if (!used[static_cast<size_t>(e)] &&
            (best < 0 || pick[e].item<double>() > pick[best].item<double>())) {
          best = e;
        }
      }
      used[static_cast<size_t>(best)] = true;
      chosen.push_back(best);
    }
    at::Tensor norm = at::zeros({}, at::kDouble);
    for (int64_t e : chosen) norm = norm + score[e];
    at::Tensor y = at::zeros({1, x.size(1)}, at::kDouble);
    for (int64_t e : chosen) {
      const size_t i = static_cast<size_t>(e);
      y = y + score[e] / norm * FeedForward(xt, w.w1[i], w.w2[i], w.w3[i]);
    }
    if (w.shared_w1.defined()) y = y + FeedForward(xt, w.shared_w1, w.shared_w2, w.shared_w3);
    rows.push_back(y);
  }
  return at::cat(rows);
}

// The aux loss written out: E * sum_e (assignments_e / all assignments) * mean routing prob.
at::Tensor NaiveAux(const at::Tensor& x, const MoeWeights& w, const MoeSpec& m,
                    const at::Tensor& bias) {
  const at::Tensor logits = at::matmul(x, w.router.t());
  at::Tensor probs, pick;
  if (m.router == "sigmoid") {
    const at::Tensor s = at::sigmoid(logits);
    probs = s / s.sum(-1, true);
    pick = s + bias.to(at::kDouble);
  } else {
    probs = at::softmax(logits, -1);
    pick = probs;
  }
  const at::Tensor idx = std::get<1>(at::topk(pick.detach(), m.top_k, -1));
  const at::Tensor counts =
      at::zeros({m.n_experts}, at::kDouble)
          .index_add_(0, idx.reshape({-1}), at::ones({idx.numel()}, at::kDouble));
  return static_cast<double>(m.n_experts) * (counts / counts.sum() * probs.mean(0)).sum();
}

TEST(Moe, ParamNames) {
  EXPECT_EQ(ExpertParamPrefix(3, 7), "layers.3.moe.experts.7.");
  EXPECT_EQ(ExpertOfParam("layers.3.moe.experts.7.w2.weight"), 7);
  EXPECT_EQ(ExpertOfParam("layers.3.moe.router.weight"), -1);
  EXPECT_EQ(ExpertOfParam("layers.3.feed_forward.w1.weight"), -1);
}

TEST(Moe, MatchesNaiveLoopForBothRoutersWithSharedExperts) {
  for (const std::string router : {"softmax", "sigmoid"}) {
    for (int64_t shared : {0, 1}) {
      SCOPED_TRACE(router + " shared " + std::to_string(shared));
      const MoeSpec m = Spec(router, shared, 0.0);
      at::Generator g = Gen(7 + shared);
      const std::vector<at::Tensor> w = RandomWeights(m, 8, g);
      const at::Tensor x = Randn({13, 8}, g);
      MoeState state(OneLayer(m));
      if (router == "sigmoid") {
        // A bias that changes which experts win (it must not change the gate values).
        state.SetBiasTable(at::tensor({0.3, -0.2, 0.0, 0.25, -0.1}, at::kDouble).view({1, 5}));
      }
      at::NoGradGuard no_grad;
      const at::Tensor got = MoeFeedForward(x, AsWeights(m, w), m, state, 0);
      const at::Tensor want = NaiveMoe(x, AsWeights(m, w), m, state.bias(0));
      EXPECT_LT((got - want).abs().max().item<double>(), 1e-12);
    }
  }
}

// Checks d/d(inputs) of sum(f * R) + coef * aux against central differences: the gradient the
// block injects for the aux loss must be that of coef x aux.
void CheckGradients(const MoeSpec& m, double tol) {
  at::Generator g = Gen(31);
  std::vector<at::Tensor> inputs = RandomWeights(m, 8, g);
  inputs.insert(inputs.begin(), Randn({9, 8}, g));  // x first
  for (auto& t : inputs) t = t.detach().clone().set_requires_grad(true);
  MoeState state(OneLayer(m));
  const at::Tensor r = Randn({9, 8}, g);
  auto weights = [&](const std::vector<at::Tensor>& in) {
    return AsWeights(m, std::vector<at::Tensor>(in.begin() + 1, in.end()));
  };
  const at::Tensor out = MoeFeedForward(inputs[0], weights(inputs), m, state, 0);
  const std::vector<at::Tensor> grads = torch::autograd::grad({(out * r).sum()}, inputs);
  at::NoGradGuard no_grad;
  auto objective = [&] {
    return ((NaiveMoe(inputs[0], weights(inputs), m, state.bias(0)) * r).sum() +
            m.aux_loss_coef * NaiveAux(inputs[0], weights(inputs), m, state.bias(0)))
        .item<double>();
  };
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor flat = inputs[i].view({-1});
    const at::Tensor analytic = grads[i].reshape({-1});
    double max_err = 0, max_ref = 0;
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double orig = flat[j].item<double>();
      flat[j] = orig + eps;
      const double up = objective();
      flat[j] = orig - eps;
      const double down = objective();
      flat[j] = orig;
      const double numeric = (up - down) / (2 * eps);
      max_err = std::max(max_err, std::abs(numeric - analytic[j].item<double>()));
      max_ref = std::max(max_ref, std::abs(numeric));
    }
    EXPECT_LT(max_err, tol * std::max(1.0, max_ref)) << "input " << i << " max err " << max_err;
  }
}

TEST(Moe, GradientsMatchFiniteDifferencesSoftmaxWithAuxLoss) {
  CheckGradients(Spec("softmax", 1, 0.5), 1e-7);
}

TEST(Moe, GradientsMatchFiniteDifferencesSigmoidWithAuxLoss) {
  CheckGradients(Spec("sigmoid", 0, 0.5), 1e-7);
}

// A router that prefers expert 0 for every token: nothing is dropped (each token still gets its
// k experts, expert 0 takes all N tokens), and experts that receive no token still get a
// defined, zero gradient (the data-parallel hooks count on every parameter reporting).
TEST(Moe, DroplessUnderTotalImbalanceAndZeroGradsForIdleExperts) {
  MoeSpec m = Spec("softmax", 0, 0.0);
  m.n_experts = 4;
  at::Generator g = Gen(5);
  std::vector<at::Tensor> w = RandomWeights(m, 8, g);
  w[0] = at::zeros({4, 8}, at::kDouble);
  w[0][0].fill_(10.0);  // expert 0 wins for positive inputs
  w[0][1].fill_(5.0);   // expert 1 second
  for (auto& t : w) t.set_requires_grad(true);
  const at::Tensor x = at::rand({16, 8}, g, at::kDouble) + 0.1;
  MoeState state(OneLayer(m));
  const at::Tensor out = MoeFeedForward(x, AsWeights(m, w), m, state, 0);
  {
    at::NoGradGuard no_grad;
    EXPECT_LT((out - NaiveMoe(x, AsWeights(m, w), m, state.bias(0))).abs().max().item<double>(),
              1e-12);
  }
  const auto& stats = state.step_stats()[0];
  ASSERT_TRUE(stats.counts.defined());
  EXPECT_EQ(stats.counts[0].item<double>(), 16);
  EXPECT_EQ(stats.counts[1].item<double>(), 16);
  EXPECT_EQ(stats.counts[2].item<double>(), 0);
  out.sum().backward();
  for (size_t i = 1; i < w.size(); ++i) {
    ASSERT_TRUE(w[i].grad().defined()) << "tensor " << i;
    const bool idle = i > 6;  // experts 2 and 3
    EXPECT_EQ(w[i].grad().abs().sum().item<double>() == 0.0, idle) << "tensor " << i;
  }
}

TEST(Moe, AuxLossIsOneWhenBalancedAndRecordedOnlyWithGradients) {
  MoeSpec m = Spec("softmax", 0, 0.0);
  m.n_experts = 2;
  m.top_k = 1;
  at::Generator g = Gen(3);
  std::vector<at::Tensor> w = RandomWeights(m, 2, g);
  w[0] = at::zeros({2, 2}, at::kDouble);  // uniform probabilities: P = 1/2 each
  MoeState state(OneLayer(m));
  const at::Tensor x = at::tensor({1.0, 0.0, 0.0, 1.0}, at::kDouble).view({2, 2});
  {
    at::NoGradGuard no_grad;  // evaluation: nothing recorded
    MoeFeedForward(x, AsWeights(m, w), m, state, 0);
  }
  EXPECT_EQ(state.step_stats()[0].forwards, 0);
  MoeFeedForward(x, AsWeights(m, w), m, state, 0);
  ASSERT_EQ(state.step_stats()[0].forwards, 1);
  // Ties go to expert 0 for both tokens: f = (1, 0), P = (1/2, 1/2): aux = 2 * 1/2 = 1.
  EXPECT_DOUBLE_EQ(state.step_stats()[0].aux_sum, 1.0);
  state.EndStep();
  EXPECT_EQ(state.step_stats()[0].forwards, 0);
}

// DeepSeek-V3's update: overloaded experts' biases go down by the rate, underloaded ones up.
TEST(Moe, SigmoidBiasMovesTowardsBalance) {
  MoeSpec m = Spec("sigmoid", 0, 0.0);
  m.n_experts = 4;
  m.top_k = 1;
  m.bias_update_rate = 0.01;
  MoeState state(OneLayer(m));
  ASSERT_TRUE(state.has_bias());
  state.Record(0, at::tensor({10.0, 2.0, 2.0, 2.0}, at::kDouble), 1.0, 0);
  state.Record(0, at::tensor({0.0, 2.0, 1.0, 1.0}, at::kDouble), 1.0, 0);  // totals 10, 4, 3, 3
  state.EndStep();
  const at::Tensor b = state.bias(0);
  EXPECT_FLOAT_EQ(b[0].item<float>(), -0.01f);
  EXPECT_FLOAT_EQ(b[1].item<float>(), 0.01f);
  EXPECT_FLOAT_EQ(b[2].item<float>(), 0.01f);
  const at::Tensor table = state.BiasTable();
  EXPECT_EQ(table.sizes().vec(), (std::vector<int64_t>{1, 4}));
  EXPECT_FLOAT_EQ(static_cast<float>(table[0][3].item<double>()), 0.01f);
}

// An MoE Llama: the parameter list follows the documented names; its forward equals a dense
// computation of the same layers, and every parameter receives a gradient.
TEST(Moe, LlamaWithMoeLayers) {
  ModelSpec s;
  s.dim = 16;
  s.n_layers = 3;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_hidden_dim = 24;
  s.vocab_size = 11;
  s.rope_theta = 10000.0;
  s.moe = Spec("softmax", 1, 0.1);
  s.moe.layer_start = 1;
  s.moe.layer_interval = 2;  // layer 1 only
  Llama model(s, 3, at::kCPU);
  int experts = 0, dense = 0;
  for (const auto& p : model.params()) {
    experts += ExpertOfParam(p.name) >= 0;
    dense += p.name.find("feed_forward") != std::string::npos;
  }
  EXPECT_EQ(experts, 5 * 3);
  EXPECT_EQ(dense, 2 * 3);
  EXPECT_EQ(static_cast<int64_t>(model.params().size()),
            static_cast<int64_t>(Llama::ParamShapes(s).size()));
  int64_t numel = 0;
  for (const auto& p : model.params()) numel += p.tensor.numel();
  EXPECT_EQ(numel, CountParams(s).total);
  ASSERT_NE(model.moe(), nullptr);
  at::Generator g = Gen(4);
  const at::Tensor tokens = at::randint(0, 11, {2, 6}, g, at::kLong);
  at::Tensor loss = model.Loss(tokens, tokens);
  loss.backward();
  for (const auto& p : model.params()) {
    EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
  }
  EXPECT_EQ(model.moe()->step_stats()[1].forwards, 1);
  EXPECT_EQ(model.moe()->step_stats()[1].counts.sum().item<double>(), 2 * 6 * 2);
  EXPECT_EQ(model.moe()->step_stats()[0].forwards, 0);
}

}  // namespace
}  // namespace tenax::model
