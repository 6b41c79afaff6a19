#include "tenax/core/random.h"

#include <cmath>

#include "tenax/core/check.h"

namespace tenax {
namespace {
inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  uint64_t s = seed;
  const uint64_t a = SplitMix64(&s);
  uint64_t t = a ^ (stream * 0xD1B54A32D192ED03ull);
  SplitMix64(&t);
  return SplitMix64(&t);
}

Rng::Rng(uint64_t seed) {
  uint64_t s = seed;
  for (uint64_t& w : s_) w = SplitMix64(&s);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) {
  TENAX_CHECK(n > 0);
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % n;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double Rng::Exponential(double rate) {
  if (rate <= 0) return INFINITY;
  return -std::log((static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53) / rate;
}

double Rng::UniformOpen() {
  // (k + 0.5) / 2^53 for k in [0, 2^53): never 0, never 1.
  return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53;
}

double Rng::Normal() {
  double u, v, s;
  do {
    u = 2.0 * Uniform() - 1.0;
    v = 2.0 * Uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  return u * std::sqrt(-2.0 * std::log(s) / s);
}

double Rng::LogGamma(double shape) {
  TENAX_CHECK(shape > 0);
  if (shape < 1.0) {
    // G(a) = G(a + 1) * U^(1/a), taken in logs.
    const double log_u = std::log(UniformOpen());
    return LogGamma(shape + 1.0) + log_u / shape;
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = Normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = UniformOpen();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d * v);
  }
}

}  // namespace tenax
