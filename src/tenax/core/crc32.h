// Checksums: CRC-32 (zlib's polynomial) for what is on disk (checkpoint manifests, shards), and
// CRC-32C (Castagnoli) for TensorBoard's TFRecord framing, which requires it, and for the live
// state transfer between ranks, where its instruction (SSE4.2) checks memory at memory speed.
//
// Both take a seed to continue: Crc(b, Crc(a)) == Crc(a followed by b).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tenax {

uint32_t Crc32(const void* data, size_t size, uint32_t seed = 0);
uint32_t Crc32c(const void* data, size_t size, uint32_t seed = 0);
inline uint32_t Crc32(std::string_view s) { return Crc32(s.data(), s.size()); }

namespace crc_internal {
// The table-driven CRC-32C every CPU runs, and whether Crc32c uses the CPU's instruction instead
// (for tests: the two must agree).
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t seed);
bool Crc32cInHardware();
}  // namespace crc_internal

}  // namespace tenax
