// Checksums used on disk: CRC-32 (zlib's polynomial) for checkpoint manifests and CRC-32C
// (Castagnoli) for TensorBoard's TFRecord framing, which requires it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tenax {

uint32_t Crc32(const void* data, size_t size, uint32_t seed = 0);
uint32_t Crc32c(const void* data, size_t size);
inline uint32_t Crc32(std::string_view s) { return Crc32(s.data(), s.size()); }

}  // namespace tenax
