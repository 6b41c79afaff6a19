// Text generation from a Llama: a KV-cache decoder and a sampler.
//
// KvCacheDecoder is the inference path. It reads the Llama's weights by name (llama.h) and uses the
// same layer functions (layers.h: RmsNorm, Linear, ApplyRope, FeedForward), but runs its own
// attention over cached keys and values instead of the training forward: the prompt is prefilled
// once, then each new token costs one position (its query against every cached key) instead of
// a forward pass over the whole sequence. Keys are cached after RoPE, so a cached key never needs
// rotating again. Llama::Logits (the training forward) on the whole sequence computes the same
// logits; generate_test.cc checks that they agree.
//
// Sampler: temperature 0 is greedy (argmax, lowest id on ties); otherwise softmax(logits / T)
// restricted to the nucleus (the most probable tokens whose probabilities first reach top_p,
// at least one), renormalised, and drawn by inversion with tenax's portable Rng (core/random.h),
// so a seed gives the same tokens on every machine whenever the logits agree.
//
// Non-goals: batched requests of different lengths (rows share one position), paged or sliding
// caches, speculative decoding, repetition penalties.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "tenax/core/random.h"
#include "tenax/core/status.h"
#include "tenax/model/layers.h"
#include "tenax/model/llama.h"

namespace tenax::model {

struct SamplingOptions {
  double temperature = 0.6;  // 0: greedy
  double top_p = 0.9;        // 1: the whole distribution
  uint64_t seed = 0;
};

// Not thread-safe (it advances a generator).
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : o_(options), rng_(options.seed) {}
  // logits (V), any float dtype and device -> the chosen id.
  int64_t Next(const at::Tensor& logits);

 private:
  const SamplingOptions o_;
  Rng rng_;
};

// Not thread-safe; holds references to the model's parameters (the model must outlive it and
// keep its parameters in place).
class KvCacheDecoder {
 public:
  // `capacity`: positions the cache holds (prompt + new tokens), at most the model's max_seq_len.
  // `compute_dtype`: kFloat (CPU), kBFloat16 (GPU) or kDouble (tests); the cache uses it too.
  static Result<KvCacheDecoder> Create(Llama& model, int64_t capacity,
                                       at::ScalarType compute_dtype = at::kFloat);

  // tokens (B, T) int64 at positions [length(), length() + T) -> logits (B, T, V) fp32 (fp64 in
  // kDouble). Appends the tokens' keys and values; B must stay the same until Reset.
  at::Tensor Forward(const at::Tensor& tokens);
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  void Reset() { length_ = 0; }

 private:
  using Layer = LayerWeights;  // aliases of the model's parameters, detached
  KvCacheDecoder() = default;
  at::Tensor Attend(size_t layer, const at::Tensor& x, const RopeTable& rope);

  // Constant after construction.
  ModelSpec spec_;
  MoeState* moe_ = nullptr;  // the model's (routing biases); MoE models only
  at::ScalarType dtype_ = at::kFloat;
  int64_t capacity_ = 0;
  at::Tensor tok_embeddings_, norm_, output_;
  std::vector<Layer> layers_;
  RopeTable rope_;  // positions [0, capacity)
  // Mutable state: per layer (B, K, capacity, D) keys (after RoPE) and values; valid up to length_.
  std::vector<at::Tensor> k_cache_, v_cache_;
  int64_t length_ = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these (e.g. EOS)
  // false: recompute the whole sequence with Llama::Logits for every token (the reference the
  // cache is checked against; quadratic, for tests).
  bool use_cache = true;
  at::ScalarType compute_dtype = at::kFloat;
};

// Continues `prompt` (at least one id, every id < vocab_size; prompt + max_new_tokens within the
// model's max_seq_len): the new ids, each passed to `on_token` as soon as it is chosen.
Result<std::vector<int64_t>> Generate(Llama& model, const std::vector<int64_t>& prompt,
                                      const GenerateOptions& options,
                                      const std::function<void(int64_t)>& on_token = {});

}  // namespace tenax::model
