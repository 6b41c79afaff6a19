// A small seeded PRNG for the failure simulator: xoshiro256** seeded through SplitMix64 (Blackman
// and Vigna). std:: distributions are not used on purpose: their algorithms differ between
// standard libraries, and a simulation must give the same numbers for the same seed everywhere.
// Thread safety: none; one generator per thread (each simulated run derives its own).
#pragma once

#include <cmath>
#include <cstdint>

namespace tenax::plan {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = SplitMix64(&seed);
  }

  uint64_t Next() {
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

  // Uniform in (0, 1]: never 0, so -log(u) below is finite.
  double Uniform() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }

  // Exponential with the given rate (events per unit time); infinity when the rate is 0.
  double Exponential(double rate) { return rate > 0 ? -std::log(Uniform()) / rate : INFINITY; }

  static uint64_t SplitMix64(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace tenax::plan
