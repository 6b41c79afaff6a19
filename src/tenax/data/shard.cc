// Shard encoding and validation. Every reader error names the file, what is wrong with it, and
// the fix (almost always: re-run `tenax prepare`, because shards are derived data).
#include "tenax/data/shard.h"

#include <cstring>

#include "tenax/core/check.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
// Shards are little-endian and read with memcpy; a big-endian host needs a byte-swapping reader.
#error "tenax token shards need a little-endian host"
#endif

namespace tenax::data {
namespace {

// Header layout (byte offsets); docs/data_format.md mirrors this table.
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffWidth = 12;
constexpr size_t kOffNumTokens = 16;
constexpr size_t kOffVocab = 24;
constexpr size_t kOffEos = 28;

template <typename T>
void Put(std::string& buf, size_t off, T v) {
  std::memcpy(&buf[off], &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

std::string Redo(const std::string& path) {
  return " (" + path + " is damaged or was not written by tenax; delete it and re-run "
         "`tenax prepare`, or delete the data cache folder to rebuild a built-in source)";
}

}  // namespace

uint32_t ShardTokenWidth(uint32_t vocab_size) { return vocab_size <= 65536u ? 2u : 4u; }

Result<std::string> EncodeShard(const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                                std::optional<uint32_t> eos) {
  if (vocab_size == 0) return InvalidArgument("shard vocab_size must be > 0");
  if (vocab_size == kShardNoEos) {
    return InvalidArgument("shard vocab_size 0xFFFFFFFF is reserved (it marks 'no eos')");
  }
  if (eos && *eos >= vocab_size) {
    return InvalidArgument("eos id " + std::to_string(*eos) + " is outside the vocabulary (size " +
                           std::to_string(vocab_size) + ")");
  }
  const uint32_t width = ShardTokenWidth(vocab_size);
  std::string buf(kShardHeaderBytes + tokens.size() * width, '\0');
  std::memcpy(&buf[kOffMagic], kShardMagic, sizeof(kShardMagic));
  Put<uint32_t>(buf, kOffVersion, kShardVersion);
  Put<uint32_t>(buf, kOffWidth, width);
  Put<uint64_t>(buf, kOffNumTokens, tokens.size());
  Put<uint32_t>(buf, kOffVocab, vocab_size);
  Put<uint32_t>(buf, kOffEos, eos ? *eos : kShardNoEos);
  char* out = &buf[kShardHeaderBytes];
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    if (t >= vocab_size) {
      return InvalidArgument("token " + std::to_string(i) + " has id " + std::to_string(t) +
                             ", outside the vocabulary (size " + std::to_string(vocab_size) + ")");
    }
    if (width == 2) {
      const uint16_t narrow = static_cast<uint16_t>(t);
      std::memcpy(out + i * 2, &narrow, 2);
    } else {
      std::memcpy(out + i * 4, &t, 4);
    }
  }
  return buf;
}

Status WriteShard(FileSystem& fs, const std::string& path, const std::vector<uint32_t>& tokens,
                  uint32_t vocab_size, std::optional<uint32_t> eos) {
  Result<std::string> bytes = EncodeShard(tokens, vocab_size, eos);
  if (!bytes.ok()) return bytes.status().WithContext("writing shard " + path);
  return fs.WriteFileAtomic(path, *bytes);
}

Result<ShardReader> ShardReader::Open(const std::string& path, bool verify_tokens) {
  Result<MappedFile> mapped = MappedFile::Open(path);
  if (!mapped.ok()) {
    if (mapped.status().code() == StatusCode::kNotFound) {
      return NotFound("token shard " + path + " does not exist (run `tenax prepare` to create it)");
    }
    return mapped.status().WithContext("opening token shard");
  }
  ShardReader r;
  r.file_ = std::move(mapped).value();
  const uint8_t* p = r.file_.data();
  const size_t size = r.file_.size();
  if (size < kShardHeaderBytes) {
    return DataError("token shard " + path + " is " + std::to_string(size) +
                     " bytes, shorter than the 64-byte header" + Redo(path));
  }
  if (std::memcmp(p + kOffMagic, kShardMagic, sizeof(kShardMagic)) != 0) {
    return DataError("token shard " + path + " does not start with the magic \"TENAXTOK\"" +
                     Redo(path));
  }
  const uint32_t version = Get<uint32_t>(p, kOffVersion);
  if (version != kShardVersion) {
    return DataError("token shard " + path + " has format version " + std::to_string(version) +
                     " but this tenax reads version " + std::to_string(kShardVersion) +
                     " (re-run `tenax prepare` with this tenax, or use the tenax that wrote it)");
  }
  r.width_ = Get<uint32_t>(p, kOffWidth);
  if (r.width_ != 2 && r.width_ != 4) {
    return DataError("token shard " + path + " has token width " + std::to_string(r.width_) +
                     " bytes; only 2 and 4 are valid" + Redo(path));
  }
  const uint64_t n = Get<uint64_t>(p, kOffNumTokens);
  r.vocab_size_ = Get<uint32_t>(p, kOffVocab);
  const uint32_t eos = Get<uint32_t>(p, kOffEos);
  if (r.vocab_size_ == 0 || (r.width_ == 2 && r.vocab_size_ > 65536u)) {
    return DataError("token shard " + path + " declares vocab_size " +
                     std::to_string(r.vocab_size_) + ", impossible with " +
                     std::to_string(r.width_) + "-byte tokens" + Redo(path));
  }
  if (eos != kShardNoEos && eos >= r.vocab_size_) {
    return DataError("token shard " + path + " declares eos id " + std::to_string(eos) +
                     " outside its vocabulary of " + std::to_string(r.vocab_size_) + Redo(path));
  }
  if (eos != kShardNoEos) r.eos_ = eos;
  // Divide rather than multiply so a garbage num_tokens cannot overflow the comparison.
  const uint64_t payload = size - kShardHeaderBytes;
  if (payload % r.width_ != 0 || payload / r.width_ != n) {
    return DataError("token shard " + path + " is " + std::to_string(size) +
                     " bytes but its header promises 64 + " + std::to_string(n) + " tokens * " +
                     std::to_string(r.width_) + " bytes = " +
                     std::to_string(kShardHeaderBytes + n * r.width_) +
                     " (truncated or partly overwritten)" + Redo(path));
  }
  r.num_tokens_ = static_cast<int64_t>(n);
  if (verify_tokens) {
    for (int64_t i = 0; i < r.num_tokens_; ++i) {
      const uint32_t t = LoadToken(r.token_data(), r.width_, i);
      if (t >= r.vocab_size_) {
        return DataError("token shard " + path + " holds id " + std::to_string(t) +
                         " at position " + std::to_string(i) + ", outside its vocabulary of " +
                         std::to_string(r.vocab_size_) + Redo(path));
      }
    }
  }
  return r;
}

uint32_t ShardReader::token(int64_t i) const {
  TENAX_CHECK(i >= 0 && i < num_tokens_);
  return LoadToken(token_data(), width_, i);
}

}  // namespace tenax::data
