// Token shard: the on-disk format of tokenized data (the normative spec is docs/data_format.md).
// A shard is a 64-byte header followed by num_tokens little-endian token ids, each 2 or 4 bytes
// wide. Version 2 headers carry a CRC-32 of the tokens and of the header itself, verified on open,
// so corruption that keeps every id inside the vocabulary is still caught. Version 1 shards (no
// checksums) still load, with a warning. Readers memory-map the file, so every rank on a host
// shares one copy in the page cache.
// Non-goals: compression, per-document indexes, appending to a committed shard (shards are
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
inline constexpr uint32_t kShardVersion = 2;  // what writers write; readers also take 1
inline constexpr size_t kShardHeaderBytes = 64;
inline constexpr uint32_t kShardNoToken = 0xFFFFFFFFu;  // "no eos" / "no bos" in the header
inline constexpr uint32_t kShardNoEos = kShardNoToken;

// 2 when every id fits in a uint16 (vocab_size <= 65536), else 4.
uint32_t ShardTokenWidth(uint32_t vocab_size);

// The complete bytes of a shard (header + tokens). Fails if an id, bos or eos is >= vocab_size.
Result<std::string> EncodeShard(const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                                std::optional<uint32_t> eos,
                                std::optional<uint32_t> bos = std::nullopt);

// Writes a shard with FileSystem::WriteFileAtomic: a crash leaves the old file or the new one.
Status WriteShard(FileSystem& fs, const std::string& path, const std::vector<uint32_t>& tokens,
                  uint32_t vocab_size, std::optional<uint32_t> eos,
                  std::optional<uint32_t> bos = std::nullopt);

// Writes a shard of any size in bounded memory: tokens stream into PATH.tmp-PID-N in the same
// folder, and Commit writes the header (with both checksums), fsyncs, renames onto PATH and
// fsyncs the folder. A writer destroyed without Commit removes its temporary file, so a failed
// or interrupted prepare never leaves a partial shard under the real name.
// Not thread-safe; one writer per file.
class ShardWriter {
 public:
  static Result<ShardWriter> Create(const std::string& path, uint32_t vocab_size,
                                    std::optional<uint32_t> eos, std::optional<uint32_t> bos);
  ShardWriter(ShardWriter&& other) noexcept;
  ShardWriter& operator=(ShardWriter&&) = delete;
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();

  // Appends ids; an id >= vocab_size is InvalidArgument (nothing of this call is written).
  Status Append(const uint32_t* ids, size_t n);
  Status Append(const std::vector<uint32_t>& ids) { return Append(ids.data(), ids.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  // Moves this shard's last `count` tokens to the end of `dst` (the tail-token split rule of
  // prepare.h), re-reading them from the temporary file.
  Status MoveTailTo(int64_t count, ShardWriter* dst);
  Status Commit();

 private:
  ShardWriter() = default;
  Status Flush();

  // Constant after construction.
  std::string path_;
  std::string tmp_path_;
  uint32_t vocab_size_ = 0;
  uint32_t width_ = 0;
  uint32_t eos_ = kShardNoToken;
  uint32_t bos_ = kShardNoToken;
  // Mutable state.
  int fd_ = -1;
  int64_t num_tokens_ = 0;
  uint32_t crc_ = 0;    // CRC-32 of the token bytes written so far (flushed or buffered)
  std::string buffer_;  // encoded tokens not yet written
};

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

// Checks `count` tokens at `base` against the vocabulary, and (when crc is given) their CRC-32,
// in one pass. The error names `path`, the first bad position, and `fix`.
Status VerifyTokens(const std::string& path, const uint8_t* base, uint32_t width, int64_t count,
                    uint32_t vocab_size, std::optional<uint32_t> crc, const std::string& fix);

// A validated, memory-mapped shard. Immutable after Open, so concurrent reads are safe.
// Invariants: token_width() is 2 or 4; the file holds exactly 64 + num_tokens * width bytes;
// when opened with verify_tokens, every id is < vocab_size and (version 2) both checksums match.
class ShardReader {
 public:
  // verify_tokens scans every id and checks the token checksum (one pass, about 1 GB/s): an
  // out-of-range id would otherwise surface much later as an index error inside the embedding
  // lookup, and an in-range flipped id never at all. The header checksum is always checked.
  static Result<ShardReader> Open(const std::string& path, bool verify_tokens = true);

  ShardReader(ShardReader&&) = default;
  ShardReader& operator=(ShardReader&&) = default;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  int64_t num_tokens() const { return num_tokens_; }
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> eos() const { return eos_; }
  std::optional<uint32_t> bos() const { return bos_; }
  uint32_t token_width() const { return width_; }
  uint32_t version() const { return version_; }
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
  uint32_t version_ = 0;
  std::optional<uint32_t> eos_;
  std::optional<uint32_t> bos_;
};

}  // namespace tenax::data
