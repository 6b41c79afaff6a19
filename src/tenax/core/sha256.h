// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104): a keyed tag that proves a message came from a
// holder of the job's secret (parallel/live_group.h signs the state a live member sends to a
// replacement with it). Small and dependency-free: tenax links OpenSSL only for multi-node
// launches.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tenax {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(std::string_view data);
Sha256Digest HmacSha256(std::string_view key, std::string_view message);
std::string HexOf(const Sha256Digest& d);  // 64 lowercase hex digits
// Compares in time that depends only on the length, not on where the first difference is.
bool DigestsEqual(const Sha256Digest& a, const Sha256Digest& b);
// `bytes` random bytes from the system's source (std::random_device: /dev/urandom), as hex: a
// job's secret.
std::string RandomHex(int bytes);

}  // namespace tenax
