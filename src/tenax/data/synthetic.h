// Synthetic Markov source: a random order-k Markov chain over V tokens whose exact entropy rate
// is known, so a training run can be judged against the best possible loss (a model that has
// learned the chain perfectly reaches mean cross-entropy == EntropyRateNats()).
//
// The model: for each of the V^k contexts (the last k tokens) the next-token distribution is a
// Dirichlet(concentration, ..., concentration) draw, made with tenax's own PRNG (core/random.h)
// from `seed`, so the chain is the same on every machine. Low concentration puts each context's
// mass on a few tokens (low entropy); high concentration approaches uniform (entropy -> log V).
// Streams: the model, the train tokens and the val tokens use independent streams of `seed`;
// both sequences start from a context drawn from the stationary distribution, so there is no
// burn-in transient and every token is a draw from the stationary process.
// Limits: order in 1..4, V^k <= 2^22 contexts, and V^(k+1) <= 2^24 table entries (the
// probability and cumulative tables take 16 bytes per entry, 256 MiB at the limit).
// Very low concentration (below ~0.05) can round most probabilities to zero and split the chain
// into closed classes; the entropy rate is then that of the mixture the power iteration finds.
// Non-goals: other generative families, streaming generation (sequences are held in memory).
#pragma once

#include <cstdint>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/data/token_stream.h"

namespace tenax::data {

inline constexpr int64_t kMaxSyntheticContexts = int64_t{1} << 22;
inline constexpr int64_t kMaxSyntheticTableEntries = int64_t{1} << 24;

// Immutable after construction; all methods are const and thread-safe.
class MarkovSource {
 public:
  // Validates `options` and draws the chain from options.seed.
  static Result<MarkovSource> Create(const SyntheticOptions& options);
  // A chain with an explicit row-major (V^k, V) transition table; rows must sum to 1 (1e-9).
  static Result<MarkovSource> FromTable(int64_t vocab_size, int64_t order,
                                        std::vector<double> probs);

  int64_t vocab_size() const { return vocab_; }
  int64_t order() const { return order_; }
  int64_t num_contexts() const { return contexts_; }

  // Exact entropy rate in nats per token: sum over contexts c of pi(c) * H(P(.|c)).
  double EntropyRateNats() const { return entropy_rate_; }
  // Stationary distribution over contexts (V^k entries, sums to 1).
  const std::vector<double>& stationary() const { return stationary_; }

  // Context index of k tokens, oldest first: sum_j history[j] * V^(k-1-j).
  int64_t ContextOf(const uint32_t* history) const;
  // P(next | context) and its natural log.
  double Prob(int64_t context, uint32_t next) const;
  double LogProb(const uint32_t* history, uint32_t next) const;

  // n tokens of the stationary process from an independent stream of `seed`.
  std::vector<uint32_t> Generate(int64_t n, uint64_t seed) const;
  // Mean of -log P(x_i | x_{i-k..i-1}) over i in [k, n): the loss of the true model on `tokens`.
  double MeanNegLogProb(const std::vector<uint32_t>& tokens) const;

 private:
  MarkovSource() = default;
  Status Finish();  // builds cdf_, stationary_, entropy_rate_ from probs_

  int64_t vocab_ = 0;
  int64_t order_ = 0;
  int64_t contexts_ = 0;
  std::vector<double> probs_;       // (contexts, V) row-major
  std::vector<double> cdf_;         // (contexts, V) row-wise running sums of probs_, for sampling
  std::vector<double> stationary_;  // (contexts)
  double entropy_rate_ = 0;
};

struct SyntheticData {
  TokenStream train;  // options.train_tokens tokens
  TokenStream val;    // options.val_tokens tokens
  double entropy_rate_nats = 0;
};

// Builds the chain, generates both splits and logs the entropy rate.
Result<SyntheticData> MakeSynthetic(const SyntheticOptions& options);

}  // namespace tenax::data
