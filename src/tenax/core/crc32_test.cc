// CRC-32 and CRC-32C against bitwise references written here (one bit at a time, from the
// polynomials), over random buffers of every length class the fast paths split on, at odd
// alignments, and continued from a seed.
#include "tenax/core/crc32.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tenax {
namespace {

uint32_t Bitwise(uint32_t polynomial, const uint8_t* p, size_t n, uint32_t seed) {
  uint32_t crc = ~seed;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (polynomial & (0u - (crc & 1)));
  }
  return ~crc;
}
uint32_t BitwiseCrc32c(const uint8_t* p, size_t n, uint32_t seed = 0) {
  return Bitwise(0x82F63B78u, p, n, seed);
}
uint32_t BitwiseCrc32(const uint8_t* p, size_t n, uint32_t seed = 0) {
  return Bitwise(0xEDB88320u, p, n, seed);
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(gen());
  return v;
}

TEST(Crc32cTest, KnownVectors) {
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(crc_internal::Crc32cPortable(digits.data(), digits.size(), 0), 0xE3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  const std::vector<uint8_t> zeros(32, 0);  // RFC 3720, B.4
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::vector<uint8_t> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

// Lengths around the 8-byte words, the three-lane threshold (12 KiB) and its split into parts
// whose size is a multiple of 8, at every alignment of the first byte.
TEST(Crc32cTest, MatchesTheBitwiseReferenceAtEveryLengthClassAndAlignment) {
  const std::vector<uint8_t> data = RandomBytes(3 * 4096 * 4 + 64, 7);
  std::printf("CRC-32C in hardware: %s\n", crc_internal::Crc32cInHardware() ? "yes" : "no");
  for (size_t n :
       {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{4095}, size_t{3 * 4096 - 1},
        size_t{3 * 4096}, size_t{3 * 4096 + 1}, size_t{3 * 4096 + 23}, size_t{3 * 4096 * 4 + 17}}) {
    for (size_t offset = 0; offset < 8; ++offset) {
      const uint8_t* p = data.data() + offset;
      const uint32_t want = BitwiseCrc32c(p, n);
      EXPECT_EQ(Crc32c(p, n), want) << n << " bytes at +" << offset;
      EXPECT_EQ(crc_internal::Crc32cPortable(p, n, 0), want) << n << " bytes at +" << offset;
    }
  }
}

// A buffer checked in pieces, each continuing from the last, gives the whole buffer's CRC.
TEST(Crc32cTest, ContinuesFromASeed) {
  const std::vector<uint8_t> data = RandomBytes(100003, 11);
  const uint32_t whole = BitwiseCrc32c(data.data(), data.size());
  EXPECT_EQ(Crc32c(data.data(), data.size()), whole);
  std::mt19937 gen(3);
  for (int trial = 0; trial < 20; ++trial) {
    uint32_t crc = 0;
    size_t at = 0;
    while (at < data.size()) {
      const size_t n = std::min<size_t>(data.size() - at, gen() % 40000);
      crc = Crc32c(data.data() + at, n, crc);
      at += n;
    }
    EXPECT_EQ(crc, whole) << "trial " << trial;
  }
  EXPECT_EQ(Crc32c(data.data() + 5, 50000, 0x12345678u),
            BitwiseCrc32c(data.data() + 5, 50000, 0x12345678u));
}

TEST(Crc32Test, MatchesTheBitwiseReferenceAndContinues) {
  const std::vector<uint8_t> data = RandomBytes(20011, 5);
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32(digits), 0xCBF43926u);
  const uint32_t whole = BitwiseCrc32(data.data(), data.size());
  EXPECT_EQ(Crc32(data.data(), data.size()), whole);
  EXPECT_EQ(Crc32(data.data() + 777, data.size() - 777, Crc32(data.data(), 777)), whole);
}

}  // namespace
}  // namespace tenax
