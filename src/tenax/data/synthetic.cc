#include "tenax/data/synthetic.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "tenax/core/check.h"
#include "tenax/core/log.h"
#include "tenax/core/random.h"

namespace tenax::data {
namespace {

// Independent streams of the user's seed (see synthetic.h).
constexpr uint64_t kModelStream = 0;
constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kValStream = 2;

constexpr int kMaxPowerIterations = 200000;

// V^k with an overflow guard: returns -1 once the product exceeds `cap`.
int64_t PowCapped(int64_t v, int64_t k, int64_t cap) {
  int64_t r = 1;
  for (int64_t i = 0; i < k; ++i) {
    if (r > cap / v) return -1;
    r *= v;
  }
  return r;
}

Status ValidateShape(int64_t vocab, int64_t order) {
  if (vocab < 2) {
    return InvalidArgument("data.synthetic.vocab_size = " + std::to_string(vocab) +
                           "; it must be at least 2");
  }
  if (order < 1 || order > 4) {
    return InvalidArgument("data.synthetic.order = " + std::to_string(order) +
                           "; it must be in 1..4");
  }
  if (PowCapped(vocab, order, kMaxSyntheticContexts) < 0) {
    return InvalidArgument("data.synthetic: vocab_size^order = " + std::to_string(vocab) + "^" +
                           std::to_string(order) + " contexts exceeds the limit of 2^22 = " +
                           std::to_string(kMaxSyntheticContexts) + "; lower vocab_size or order");
  }
  if (PowCapped(vocab, order + 1, kMaxSyntheticTableEntries) < 0) {
    return InvalidArgument(
        "data.synthetic: the transition table vocab_size^(order+1) = " + std::to_string(vocab) +
        "^" + std::to_string(order + 1) + " entries exceeds the limit of 2^24 = " +
        std::to_string(kMaxSyntheticTableEntries) + " (256 MiB); lower vocab_size or order");
  }
  return Status::Ok();
}

}  // namespace

Result<MarkovSource> MarkovSource::Create(const SyntheticOptions& o) {
  TENAX_RETURN_IF_ERROR(ValidateShape(o.vocab_size, o.order));
  if (!(o.concentration > 0) || !std::isfinite(o.concentration)) {
    return InvalidArgument("data.synthetic.concentration = " + std::to_string(o.concentration) +
                           "; it must be a positive number (0.3 is the default)");
  }
  MarkovSource m;
  m.vocab_ = o.vocab_size;
  m.order_ = o.order;
  m.contexts_ = PowCapped(m.vocab_, m.order_, kMaxSyntheticContexts);
  m.probs_.resize(static_cast<size_t>(m.contexts_ * m.vocab_));
  Rng rng(DeriveSeed(o.seed, kModelStream));
  std::vector<double> log_g(static_cast<size_t>(m.vocab_));
  for (int64_t c = 0; c < m.contexts_; ++c) {
    // Dirichlet(a) = normalised Gamma(a) draws; normalising in log space keeps the largest
    // weight at exactly 1 so tiny draws cannot underflow the whole row to zero.
    double max_lg = -INFINITY;
    for (double& lg : log_g) {
      lg = rng.LogGamma(o.concentration);
      max_lg = std::max(max_lg, lg);
    }
    double* row = &m.probs_[static_cast<size_t>(c * m.vocab_)];
    double sum = 0;
    for (int64_t t = 0; t < m.vocab_; ++t) sum += row[t] = std::exp(log_g[t] - max_lg);
    for (int64_t t = 0; t < m.vocab_; ++t) row[t] /= sum;
  }
  TENAX_RETURN_IF_ERROR(m.Finish());
  return m;
}

Result<MarkovSource> MarkovSource::FromTable(int64_t vocab_size, int64_t order,
                                             std::vector<double> probs) {
  TENAX_RETURN_IF_ERROR(ValidateShape(vocab_size, order));
  MarkovSource m;
  m.vocab_ = vocab_size;
  m.order_ = order;
  m.contexts_ = PowCapped(vocab_size, order, kMaxSyntheticContexts);
  if (static_cast<int64_t>(probs.size()) != m.contexts_ * m.vocab_) {
    return InvalidArgument(
        "transition table has " + std::to_string(probs.size()) +
        " entries; expected V^(k+1) = " + std::to_string(m.contexts_ * m.vocab_));
  }
  for (int64_t c = 0; c < m.contexts_; ++c) {
    double sum = 0;
    for (int64_t t = 0; t < m.vocab_; ++t) {
      const double p = probs[static_cast<size_t>(c * m.vocab_ + t)];
      if (!(p >= 0)) return InvalidArgument("transition table has a negative or NaN entry");
      sum += p;
    }
    if (std::fabs(sum - 1.0) > 1e-9) {
      return InvalidArgument("row " + std::to_string(c) + " of the transition table sums to " +
                             std::to_string(sum) + ", not 1");
    }
  }
  m.probs_ = std::move(probs);
  TENAX_RETURN_IF_ERROR(m.Finish());
  return m;
}

Status MarkovSource::Finish() {
  const size_t n = probs_.size();
  cdf_.resize(n);
  for (int64_t c = 0; c < contexts_; ++c) {
    double run = 0;
    for (int64_t t = 0; t < vocab_; ++t) {
      const size_t i = static_cast<size_t>(c * vocab_ + t);
      cdf_[i] = run += probs_[i];
    }
  }
  // Power iteration on the lazy chain (P + I) / 2: it has the same stationary distribution and
  // is aperiodic, so the iteration converges even for a periodic P.
  const size_t nc = static_cast<size_t>(contexts_);
  std::vector<double> pi(nc, 1.0 / static_cast<double>(contexts_)), next(nc);
  // 1e-13 as asked, unless the state space is so wide that rounding alone (each entry is a sum
  // of V products) keeps the L1 change above it.
  const double tol = std::max(1e-13, 8.0 * static_cast<double>(vocab_) * DBL_EPSILON);
  bool converged = false;
  for (int it = 0; it < kMaxPowerIterations && !converged; ++it) {
    for (size_t c = 0; c < nc; ++c) next[c] = 0.5 * pi[c];
    for (int64_t c = 0; c < contexts_; ++c) {
      const double mass = 0.5 * pi[static_cast<size_t>(c)];
      if (mass == 0) continue;
      const int64_t base = (c * vocab_) % contexts_;  // drop the oldest token
      const double* row = &probs_[static_cast<size_t>(c * vocab_)];
      for (int64_t t = 0; t < vocab_; ++t) next[static_cast<size_t>(base + t)] += mass * row[t];
    }
    double sum = 0, change = 0;
    for (double v : next) sum += v;
    for (size_t c = 0; c < nc; ++c) {
      next[c] /= sum;  // keeps rounding from drifting the total away from 1
      change += std::fabs(next[c] - pi[c]);
    }
    pi.swap(next);
    converged = change < tol;
  }
  if (!converged) {
    return Numerical(
        "the synthetic Markov chain's stationary distribution did not converge in " +
        std::to_string(kMaxPowerIterations) +
        " iterations (the chain mixes too slowly); raise data.synthetic.concentration");
  }
  stationary_ = std::move(pi);
  entropy_rate_ = 0;
  for (int64_t c = 0; c < contexts_; ++c) {
    double h = 0;
    for (int64_t t = 0; t < vocab_; ++t) {
      const double p = probs_[static_cast<size_t>(c * vocab_ + t)];
      if (p > 0) h -= p * std::log(p);
    }
    entropy_rate_ += stationary_[static_cast<size_t>(c)] * h;
  }
  return Status::Ok();
}

int64_t MarkovSource::ContextOf(const uint32_t* history) const {
  int64_t c = 0;
  for (int64_t j = 0; j < order_; ++j) {
    TENAX_CHECK(history[j] < vocab_);
    c = c * vocab_ + history[j];
  }
  return c;
}

double MarkovSource::Prob(int64_t context, uint32_t next) const {
  TENAX_CHECK(context >= 0 && context < contexts_ && next < vocab_);
  return probs_[static_cast<size_t>(context * vocab_ + next)];
}

double MarkovSource::LogProb(const uint32_t* history, uint32_t next) const {
  return std::log(Prob(ContextOf(history), next));
}

std::vector<uint32_t> MarkovSource::Generate(int64_t n, uint64_t seed) const {
  Rng rng(seed);
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(n, order_)));
  // First context ~ stationary distribution, emitted as the sequence's first k tokens.
  const double target = rng.Uniform();
  int64_t ctx = contexts_ - 1;
  double run = 0;
  for (int64_t c = 0; c < contexts_; ++c) {
    run += stationary_[static_cast<size_t>(c)];
    if (target < run) {
      ctx = c;
      break;
    }
  }
  for (int64_t j = order_ - 1; j >= 0; --j) {
    int64_t div = 1;
    for (int64_t i = 0; i < j; ++i) div *= vocab_;
    out.push_back(static_cast<uint32_t>((ctx / div) % vocab_));
  }
  while (static_cast<int64_t>(out.size()) < n) {
    const double* row = &cdf_[static_cast<size_t>(ctx * vocab_)];
    // Scale by the row total instead of assuming it is exactly 1 after rounding.
    const double u = rng.Uniform() * row[vocab_ - 1];
    const int64_t t = std::upper_bound(row, row + vocab_, u) - row;
    TENAX_CHECK(t < vocab_);
    out.push_back(static_cast<uint32_t>(t));
    ctx = (ctx * vocab_ + t) % contexts_;
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

double MarkovSource::MeanNegLogProb(const std::vector<uint32_t>& tokens) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n <= order_) return 0;
  double total = 0;
  for (int64_t i = order_; i < n; ++i) {
    total -= LogProb(&tokens[static_cast<size_t>(i - order_)], tokens[static_cast<size_t>(i)]);
  }
  return total / static_cast<double>(n - order_);
}

Result<SyntheticData> MakeSynthetic(const SyntheticOptions& o) {
  if (o.train_tokens < 2 || o.val_tokens < 2) {
    return InvalidArgument("data.synthetic.train_tokens = " + std::to_string(o.train_tokens) +
                           " and val_tokens = " + std::to_string(o.val_tokens) +
                           "; both must be at least 2");
  }
  TENAX_ASSIGN_OR_RETURN(MarkovSource m, MarkovSource::Create(o));
  const uint32_t v = static_cast<uint32_t>(m.vocab_size());
  SyntheticData d;
  d.entropy_rate_nats = m.EntropyRateNats();
  d.train = TokenStream::FromVector(m.Generate(o.train_tokens, DeriveSeed(o.seed, kTrainStream)), v,
                                    std::nullopt, "synthetic train");
  d.val = TokenStream::FromVector(m.Generate(o.val_tokens, DeriveSeed(o.seed, kValStream)), v,
                                  std::nullopt, "synthetic val");
  log::Info(
      "synthetic Markov source: vocab {}, order {}, concentration {}, seed {}: entropy rate "
      "{:.4f} nats/token (the lowest loss any model can reach; uniform would be {:.4f})",
      o.vocab_size, o.order, o.concentration, o.seed, d.entropy_rate_nats,
      std::log(static_cast<double>(o.vocab_size)));
  return d;
}

}  // namespace tenax::data
