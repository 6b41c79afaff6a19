// Portable seeded randomness for data: shuffles and the synthetic source must produce the same
// bits on every machine and standard library, which std:: distributions do not promise (libstdc++
// and libc++ implement std::normal_distribution and std::uniform_int_distribution differently).
// Everything here is integer arithmetic except Gamma/Normal, which use only std::log, std::sqrt
// and std::exp (sqrt is exact under IEEE 754; log/exp agree across glibc builds).
// Non-goals: cryptographic quality, speed tricks beyond the obvious.
#pragma once

#include <cstdint>

namespace tenax {

// SplitMix64 (Steele, Lea, Flood 2014): used to expand one seed into independent stream states.
uint64_t SplitMix64(uint64_t* state);

// A seed for an independent stream derived from (seed, stream): different streams of one seed
// and equal streams of different seeds give unrelated generators.
uint64_t DeriveSeed(uint64_t seed, uint64_t stream);

// xoshiro256** 1.0 (Blackman, Vigna 2018), seeded through SplitMix64 as its authors recommend.
// Not thread-safe: one generator per thread.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n) without modulo bias (rejection sampling); n must be > 0.
  uint64_t Below(uint64_t n);
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Uniform in (0, 1): safe to take the log of.
  double UniformOpen();
  // Exponential with `rate` events per unit time (infinity when the rate is 0), by inversion of
  // a uniform in (0, 1] (the failure simulator's published numbers depend on this exact mapping).
  double Exponential(double rate);
  // Standard normal (Marsaglia polar method; the spare value is discarded for simplicity).
  double Normal();
  // log of a Gamma(shape, 1) sample, shape > 0 (Marsaglia-Tsang 2000, with the boost
  // G(a) = G(a+1) * U^(1/a) for a < 1). Returned as a log because for small shapes the sample
  // itself underflows double precision (U^(1/0.01) is often below 1e-300).
  double LogGamma(double shape);

 private:
  uint64_t s_[4];
};

}  // namespace tenax
