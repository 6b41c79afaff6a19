#include "tenax/core/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tenax {
namespace {

TEST(Random, SplitMix64MatchesReferenceOutput) {
  // First outputs of the reference splitmix64.c from state 0.
  uint64_t s = 0;
  EXPECT_EQ(SplitMix64(&s), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(&s), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(SplitMix64(&s), 0x06C45D188009454Full);
}

TEST(Random, SameSeedSameStreamDifferentSeedDifferent) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_NE(x, c.Next());
  }
  EXPECT_NE(DeriveSeed(1, 0), DeriveSeed(1, 1));
  EXPECT_NE(DeriveSeed(1, 0), DeriveSeed(2, 0));
}

TEST(Random, BelowIsUniform) {
  Rng r(7);
  std::vector<int> counts(6, 0);
  const int n = 600000;
  for (int i = 0; i < n; ++i) counts[r.Below(6)]++;
  for (int c : counts) EXPECT_NEAR(c, n / 6, 1000);  // sd is about 290
}

TEST(Random, UniformRange) {
  Rng r(9);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = r.UniformOpen();
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

TEST(Random, GammaHasMeanAndVarianceShape) {
  for (double shape : {0.3, 1.0, 2.5}) {
    Rng r(11);
    const int n = 400000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; ++i) {
      const double g = std::exp(r.LogGamma(shape));
      sum += g;
      sum2 += g * g;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, shape, 0.01 * std::max(1.0, shape)) << shape;
    EXPECT_NEAR(var, shape, 0.04 * std::max(1.0, shape)) << shape;
  }
}

TEST(Random, NormalMoments) {
  Rng r(13);
  const int n = 400000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = r.Normal();
    sum += x;
    sum2 += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.01);
}

}  // namespace
}  // namespace tenax
