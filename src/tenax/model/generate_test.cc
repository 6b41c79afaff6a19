#include "tenax/model/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace tenax::model {
namespace {

ModelSpec Spec(double init_std = 0.02) {
  ModelSpec s;
  s.name = "generate-test";
  s.dim = 32;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;  // grouped-query attention: the cache holds K heads, queries read H
  s.ffn_hidden_dim = 64;
  s.vocab_size = 40;
  s.max_seq_len = 48;
  s.rope_theta = 10000.0;
  s.rope_scaling.enabled = true;  // positions go through the scaled frequencies too
  s.rope_scaling.original_max_position = 16;
  s.init_std = init_std;
  return s;
}

at::Tensor Tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randint(vocab, {b, t}, gen, at::kLong);
}

// Prefill in chunks of `chunks` sizes, then compare every position's logits with the training
// forward over the whole sequence (which has no cache and uses the causal attention kernel).
double MaxCacheError(Llama& model, const at::Tensor& tokens, const std::vector<int64_t>& chunks,
                     at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  const at::Tensor full = model.Logits(tokens, dtype);  // (B, T, V)
  Result<KvCacheDecoder> dec = KvCacheDecoder::Create(model, tokens.size(1), dtype);
  EXPECT_TRUE(dec.ok()) << dec.status().ToString();
  double worst = 0;
  int64_t at = 0;
  for (int64_t n : chunks) {
    const at::Tensor got = dec->Forward(tokens.narrow(1, at, n));
    EXPECT_EQ(dec->length(), at + n);
    worst = std::max(worst, (got - full.narrow(1, at, n)).abs().max().item<double>());
    at += n;
  }
  EXPECT_EQ(at, tokens.size(1));
  return worst;
}

TEST(KvCache, EqualsFullRecomputationAtEveryPosition) {
  // In fp64 the two paths differ only by summation order: agreement to ~1e-15 shows the cache,
  // the positions of RoPE and the causal mask offsets are exactly right.
  {
    Llama m(Spec(0.2), 3, at::kCPU);
    m.CastParams(at::kDouble);
    const at::Tensor tokens = Tokens(2, 20, 40, 1);
    // One token at a time after a prefill; chunks that straddle; one big prefill.
    for (const auto& chunks : std::vector<std::vector<int64_t>>{
             {5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {3, 4, 1, 7, 5}, {20}}) {
      EXPECT_LT(MaxCacheError(m, tokens, chunks, at::kDouble), 1e-12);
    }
  }
  // fp32: rounding only (logits of size ~10 here; fp32 carries ~1e-6 relative).
  Llama m(Spec(0.2), 4, at::kCPU);
  EXPECT_LT(MaxCacheError(m, Tokens(1, 24, 40, 2), {6, 1, 1, 1, 1, 1, 1, 1, 1, 10}, at::kFloat),
            1e-4);
}

TEST(KvCache, AWrongMaskOrPositionWouldShow) {
  // The comparison above is sensitive: logits of a sequence shifted by one position differ by far
  // more than the tolerance, so a cache that rotated keys at the wrong positions would fail.
  Llama m(Spec(0.2), 3, at::kCPU);
  m.CastParams(at::kDouble);
  at::NoGradGuard no_grad;
  const at::Tensor tokens = Tokens(1, 10, 40, 5);
  const at::Tensor a = m.Logits(tokens.narrow(1, 1, 9), at::kDouble);
  const at::Tensor b = m.Logits(tokens, at::kDouble).narrow(1, 1, 9);
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-3);
}

TEST(Generate, GreedyWithCacheEqualsGreedyWithoutAndStopsAtStopIds) {
  Llama m(Spec(0.3), 7, at::kCPU);
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.sampling.temperature = 0;
  std::vector<int64_t> streamed;
  Result<std::vector<int64_t>> cached =
      Generate(m, {1, 2, 3}, o, [&](int64_t id) { streamed.push_back(id); });
  o.use_cache = false;
  Result<std::vector<int64_t>> full = Generate(m, {1, 2, 3}, o);
  ASSERT_TRUE(cached.ok() && full.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->size(), 20u);
  EXPECT_EQ(*cached, *full);
  EXPECT_EQ(streamed, *cached);  // every token was streamed, in order
  // A stop id ends generation right after it is emitted.
  o.use_cache = true;
  o.stop_ids = {(*cached)[4]};
  Result<std::vector<int64_t>> stopped = Generate(m, {1, 2, 3}, o);
  ASSERT_TRUE(stopped.ok());
  const auto first = std::find(cached->begin(), cached->end(), (*cached)[4]) - cached->begin();
  EXPECT_EQ(*stopped, std::vector<int64_t>(cached->begin(), cached->begin() + first + 1));
}

TEST(Generate, SampledTokensDependOnlyOnTheSeed) {
  Llama m(Spec(0.3), 8, at::kCPU);
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.sampling = {1.0, 1.0, 42};
  Result<std::vector<int64_t>> a = Generate(m, {5}, o);
  Result<std::vector<int64_t>> b = Generate(m, {5}, o);
  o.use_cache = false;  // the same logits by another path: the same draws
  Result<std::vector<int64_t>> c = Generate(m, {5}, o);
  o.sampling.seed = 43;
  Result<std::vector<int64_t>> d = Generate(m, {5}, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, *c);
  EXPECT_NE(*a, *d);
}

TEST(Generate, BadRequestsSayWhatToChange) {
  Llama m(Spec(), 1, at::kCPU);
  GenerateOptions o;
  o.max_new_tokens = 46;
  Result<std::vector<int64_t>> r = Generate(m, {1, 2, 3}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds the model's max_seq_len (48)"), std::string::npos);
  EXPECT_NE(r.status().message().find("at most 45 new tokens"), std::string::npos);
  o.max_new_tokens = 4;
  EXPECT_NE(Generate(m, {40}, o).status().message().find("outside the model's vocabulary"),
            std::string::npos);
  EXPECT_FALSE(Generate(m, {}, o).ok());
  o.sampling.top_p = 0;
  EXPECT_FALSE(Generate(m, {1}, o).ok());
}

// Counts of `draws` samples from `logits` with `o`.
std::map<int64_t, int> Draw(const std::vector<float>& logits, SamplingOptions o, int draws) {
  Sampler s(o);
  std::map<int64_t, int> n;
  const at::Tensor l = at::tensor(logits);
  for (int i = 0; i < draws; ++i) ++n[s.Next(l)];
  return n;
}

TEST(Sampler, GreedyTemperatureAndNucleus) {
  // Greedy: the argmax, the lowest id on a tie.
  EXPECT_EQ(Draw({0.f, 3.f, 3.f, 1.f}, {0.0, 1.0, 1}, 5), (std::map<int64_t, int>{{1, 5}}));
  // Probabilities 0.5, 0.3, 0.2 (logits = log p): temperature 1 samples them.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  const int n = 40000;
  auto c = Draw(logits, {1.0, 1.0, 7}, n);
  // Binomial standard deviation <= sqrt(0.25 / n) = 0.0025; 0.012 is ~5 sigma.
  EXPECT_NEAR(c[0] / double(n), 0.5, 0.012);
  EXPECT_NEAR(c[1] / double(n), 0.3, 0.012);
  EXPECT_NEAR(c[2] / double(n), 0.2, 0.012);
  // top_p 0.7: the nucleus is {0, 1} (0.5 < 0.7 <= 0.8), renormalised to 0.625 / 0.375.
  c = Draw(logits, {1.0, 0.7, 8}, n);
  EXPECT_EQ(c.count(2), 0u);
  EXPECT_NEAR(c[0] / double(n), 0.625, 0.012);
  // top_p small: only the most probable token.
  EXPECT_EQ(Draw(logits, {1.0, 0.01, 9}, 100), (std::map<int64_t, int>{{0, 100}}));
  // temperature 0.5 squares the odds: 0.25 : 0.09 : 0.04 over 0.38.
  c = Draw(logits, {0.5, 1.0, 10}, n);
  EXPECT_NEAR(c[0] / double(n), 0.25 / 0.38, 0.012);
  EXPECT_NEAR(c[2] / double(n), 0.04 / 0.38, 0.012);
}

}  // namespace
}  // namespace tenax::model
