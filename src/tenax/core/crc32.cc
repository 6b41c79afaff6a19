#include "tenax/core/crc32.h"

#include <zlib.h>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tenax {

uint32_t Crc32(const void* data, size_t size, uint32_t seed) {
  // zlib's crc32 takes a uInt length; feed it in chunks so multi-GiB tensors work.
  uLong crc = seed;
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const uInt n = size > (1u << 30) ? (1u << 30) : static_cast<uInt>(size);
    crc = ::crc32(crc, p, n);
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78u;  // reflected

// Slicing by 8: table[k][b] is the register after byte b followed by k zero bytes.
using Slices = std::array<std::array<uint32_t, 256>, 8>;
const Slices& Crc32cTables() {
  static const Slices tables = [] {
    Slices t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (kCastagnoli ^ (c >> 1)) : (c >> 1);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
    return t;
  }();
  return tables;
}

// The register (not inverted) after `size` bytes from register `reg`.
uint32_t PortableRegister(uint32_t reg, const uint8_t* p, size_t size) {
  const Slices& t = Crc32cTables();
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little endian (x86, arm64)
    v ^= reg;
    reg = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
          t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
  }
  for (; size > 0; ++p, --size) reg = (reg >> 8) ^ t[0][(reg ^ *p) & 0xFF];
  return reg;
}

#if defined(__x86_64__)
// Polynomials modulo the CRC's, in its reflected bit order (bit 31 is x^0): what appending zero
// bytes does to a register, so three lanes over three parts of a buffer can be joined.
uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  while (true) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kCastagnoli : b >> 1;
  }
  return p;
}

// x^(2^k) mod P for k = 0..31.
const std::array<uint32_t, 32>& PowersOfTwo() {
  static const std::array<uint32_t, 32> table = [] {
    std::array<uint32_t, 32> t{};
    uint32_t p = 1u << 30;  // x^1
    for (uint32_t& e : t) {
      e = p;
      p = MultModP(p, p);
    }
    return t;
  }();
  return table;
}

// The register after `bytes` zero bytes from register `reg`.
uint32_t ShiftRegister(uint32_t reg, size_t bytes) {
  const std::array<uint32_t, 32>& x2n = PowersOfTwo();
  uint32_t xn = 1u << 31;  // x^0
  for (size_t n = bytes, k = 3; n != 0; n >>= 1, ++k) {
    if (n & 1) xn = MultModP(x2n[k & 31], xn);
  }
  return MultModP(xn, reg);
}

__attribute__((target("sse4.2"))) uint32_t LaneRegister(uint32_t reg, const uint8_t* p,
                                                        size_t size) {
  uint64_t r = reg;
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    r = _mm_crc32_u64(r, v);
  }
  auto r32 = static_cast<uint32_t>(r);
  for (; size > 0; ++p, --size) r32 = _mm_crc32_u8(r32, *p);
  return r32;
}

// Three independent lanes keep the instruction's pipeline full (latency 3, one a cycle): the
// buffer in three parts, their registers joined by shifting the first two past what follows.
__attribute__((target("sse4.2"))) uint32_t HardwareRegister(uint32_t reg, const uint8_t* p,
                                                            size_t size) {
  constexpr size_t kLanesFrom = 3 * 4096;  // below this the joins cost more than they save
  if (size < kLanesFrom) return LaneRegister(reg, p, size);
  const size_t part = (size / 3) & ~size_t{7};
  const uint8_t* a = p;
  const uint8_t* b = p + part;
  const uint8_t* c = p + 2 * part;
  uint64_t ra = reg, rb = 0, rc = 0;
  for (size_t i = 0; i < part; i += 8) {
    uint64_t va, vb, vc;
    std::memcpy(&va, a + i, 8);
    std::memcpy(&vb, b + i, 8);
    std::memcpy(&vc, c + i, 8);
    ra = _mm_crc32_u64(ra, va);
    rb = _mm_crc32_u64(rb, vb);
    rc = _mm_crc32_u64(rc, vc);
  }
  const size_t rest = size - 3 * part;
  const uint32_t tail = LaneRegister(static_cast<uint32_t>(rc), c + part, rest);
  return ShiftRegister(static_cast<uint32_t>(ra), 2 * part + rest) ^
         ShiftRegister(static_cast<uint32_t>(rb), part + rest) ^ tail;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

namespace crc_internal {

uint32_t Crc32cPortable(const void* data, size_t size, uint32_t seed) {
  return ~PortableRegister(~seed, static_cast<const uint8_t*>(data), size);
}

bool Crc32cInHardware() {
#if defined(__x86_64__)
  return HasSse42();
#else
  return false;
#endif
}

}  // namespace crc_internal

uint32_t Crc32c(const void* data, size_t size, uint32_t seed) {
#if defined(__x86_64__)
  if (HasSse42()) return ~HardwareRegister(~seed, static_cast<const uint8_t*>(data), size);
#endif
  return crc_internal::Crc32cPortable(data, size, seed);
}

}  // namespace tenax
