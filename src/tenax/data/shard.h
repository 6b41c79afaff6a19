// Token shard: the on-disk format of tokenized data (the normative spec is docs/data_format.md).
// A shard is a 64-byte header followed by num_tokens little-endian token ids, each 2 or 4 bytes
// wide. Readers memory-map the file, so opening a multi-GB shard costs nothing up front and every
// rank on a host shares one copy in the page cache.
// Non-goals: compression, per-document indexes, appending to an existing shard (shards are
// written once, atomically, by `tenax prepare`), big-endian hosts (rejected at compile time).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::data {

inline constexpr char kShardMagic[8] = {'T', 'E', 'N', 'A', 'X', 'T', 'O', 'K'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;
inline constexpr uint32_t kShardNoEos = 0xFFFFFFFFu;

// 2 when every id fits in a uint16 (vocab_size <= 65536), else 4.
uint32_t ShardTokenWidth(uint32_t vocab_size);

// The complete bytes of a shard (header + tokens). Fails if an id or eos is >= vocab_size.
Result<std::string> EncodeShard(const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                                std::optional<uint32_t> eos);

// Writes a shard with FileSystem::WriteFileAtomic: a crash leaves the old file or the new one.
Status WriteShard(FileSystem& fs, const std::string& path, const std::vector<uint32_t>& tokens,
                  uint32_t vocab_size, std::optional<uint32_t> eos);

// A validated, memory-mapped shard. Immutable after Open, so concurrent reads are safe.
// Invariants: token_width() is 2 or 4; the file holds exactly 64 + num_tokens * width bytes;
// when opened with verify_tokens, every id is < vocab_size.
// Token i of a little-endian array of `width`-byte tokens (2 or 4) at `base`; memcpy because
// mapped token data need not be aligned.
inline uint32_t LoadToken(const uint8_t* base, uint32_t width, int64_t i) {
  const uint8_t* p = base + static_cast<size_t>(i) * width;
  if (width == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

class ShardReader {
 public:
  // verify_tokens scans every id once (about 1 GB/s): an out-of-range id would otherwise surface
  // much later as an index error inside the embedding lookup, far from the file that caused it.
  static Result<ShardReader> Open(const std::string& path, bool verify_tokens = true);

  ShardReader(ShardReader&&) = default;
  ShardReader& operator=(ShardReader&&) = default;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  int64_t num_tokens() const { return num_tokens_; }
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> eos() const { return eos_; }
  uint32_t token_width() const { return width_; }
  const std::string& path() const { return file_.path(); }
  // Pointer to the first token (little-endian, token_width() bytes each).
  const uint8_t* token_data() const { return file_.data() + kShardHeaderBytes; }
  // Token i; i must be in [0, num_tokens()) (checked: an out-of-range index is a bug).
  uint32_t token(int64_t i) const;

 private:
  ShardReader() = default;

  MappedFile file_;
  int64_t num_tokens_ = 0;
  uint32_t vocab_size_ = 0;
  uint32_t width_ = 0;
  std::optional<uint32_t> eos_;
};

}  // namespace tenax::data
