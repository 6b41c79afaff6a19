// Shard encoding, streaming writing and validation. Every reader error names the file, what is
// wrong with it, and the fix (re-run `tenax prepare`, because shards are derived data).
#include "tenax/data/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "tenax/core/check.h"
#include "tenax/core/crc32.h"
#include "tenax/core/log.h"
#include "tenax/data/token_file.h"

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
constexpr size_t kOffBos = 32;        // version 2
constexpr size_t kOffTokensCrc = 36;  // version 2: CRC-32 (zlib) of the token bytes
constexpr size_t kOffHeaderCrc = 60;  // version 2: CRC-32 of header bytes [0, 60)

template <typename T>
void Put(char* buf, size_t off, T v) {
  std::memcpy(buf + off, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

std::string Redo(const std::string& path) {
  return " (" + path +
         " is damaged or was not written by tenax: re-run `tenax prepare` to write "
         "it again from the source text; a built-in source rebuilds its cache by itself)";
}

Status Validate(uint32_t vocab_size, std::optional<uint32_t> eos, std::optional<uint32_t> bos) {
  if (vocab_size == 0) return InvalidArgument("shard vocab_size must be > 0");
  if (vocab_size == kShardNoToken) {
    return InvalidArgument("shard vocab_size 0xFFFFFFFF is reserved (it marks 'no token')");
  }
  for (const auto& [id, name] : {std::pair{eos, "eos"}, std::pair{bos, "bos"}}) {
    if (id && *id >= vocab_size) {
      return InvalidArgument(std::string(name) + " id " + std::to_string(*id) +
                             " is outside the vocabulary (size " + std::to_string(vocab_size) +
                             ")");
    }
  }
  return Status::Ok();
}

// Appends ids at `width` bytes each to `out`, failing on the first id outside the vocabulary.
Status EncodeIds(const uint32_t* ids, size_t n, uint32_t vocab_size, uint32_t width,
                 int64_t first_index, std::string* out) {
  const size_t at = out->size();
  out->resize(at + n * width);
  char* p = &(*out)[at];
  for (size_t i = 0; i < n; ++i) {
    const uint32_t t = ids[i];
    if (t >= vocab_size) {
      out->resize(at);
      return InvalidArgument("token " + std::to_string(first_index + static_cast<int64_t>(i)) +
                             " has id " + std::to_string(t) + ", outside the vocabulary (size " +
                             std::to_string(vocab_size) + ")");
    }
    if (width == 2) {
      const uint16_t narrow = static_cast<uint16_t>(t);
      std::memcpy(p + i * 2, &narrow, 2);
    } else {
      std::memcpy(p + i * 4, &t, 4);
    }
  }
  return Status::Ok();
}

void FillHeader(char* h, uint32_t width, uint64_t num_tokens, uint32_t vocab, uint32_t eos,
                uint32_t bos, uint32_t tokens_crc) {
  std::memset(h, 0, kShardHeaderBytes);
  std::memcpy(h + kOffMagic, kShardMagic, sizeof(kShardMagic));
  Put<uint32_t>(h, kOffVersion, kShardVersion);
  Put<uint32_t>(h, kOffWidth, width);
  Put<uint64_t>(h, kOffNumTokens, num_tokens);
  Put<uint32_t>(h, kOffVocab, vocab);
  Put<uint32_t>(h, kOffEos, eos);
  Put<uint32_t>(h, kOffBos, bos);
  Put<uint32_t>(h, kOffTokensCrc, tokens_crc);
  Put<uint32_t>(h, kOffHeaderCrc, Crc32(h, kOffHeaderCrc));
}

Status Errno(const std::string& what, const std::string& path) {
  return IoError(what + " " + path + ": " + std::strerror(errno));
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("writing", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status PreadAll(int fd, char* p, size_t n, off_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? IoError("unexpected end of " + path) : Errno("reading", path);
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return Status::Ok();
}

// One warning per old shard per process (train and eval open the same files repeatedly).
void WarnVersion1(const std::string& path) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(path).second) return;
  log::Warn(
      "token shard {} is format version 1, which has no checksum, so damage that keeps ids "
      "inside the vocabulary cannot be detected; re-run `tenax prepare` to rewrite it as "
      "version 2 (with checksums)",
      path);
}

constexpr size_t kFlushBytes = 1 << 20;

}  // namespace

uint32_t ShardTokenWidth(uint32_t vocab_size) { return vocab_size <= 65536u ? 2u : 4u; }

Result<std::string> EncodeShard(const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                                std::optional<uint32_t> eos, std::optional<uint32_t> bos) {
  TENAX_RETURN_IF_ERROR(Validate(vocab_size, eos, bos));
  const uint32_t width = ShardTokenWidth(vocab_size);
  std::string buf(kShardHeaderBytes, '\0');
  buf.reserve(kShardHeaderBytes + tokens.size() * width);
  TENAX_RETURN_IF_ERROR(EncodeIds(tokens.data(), tokens.size(), vocab_size, width, 0, &buf));
  const uint32_t crc = Crc32(buf.data() + kShardHeaderBytes, buf.size() - kShardHeaderBytes);
  FillHeader(&buf[0], width, tokens.size(), vocab_size, eos.value_or(kShardNoToken),
             bos.value_or(kShardNoToken), crc);
  return buf;
}

Status WriteShard(FileSystem& fs, const std::string& path, const std::vector<uint32_t>& tokens,
                  uint32_t vocab_size, std::optional<uint32_t> eos, std::optional<uint32_t> bos) {
  Result<std::string> bytes = EncodeShard(tokens, vocab_size, eos, bos);
  if (!bytes.ok()) return bytes.status().WithContext("writing shard " + path);
  return fs.WriteFileAtomic(path, *bytes);
}

// ---- ShardWriter ----

Result<ShardWriter> ShardWriter::Create(const std::string& path, uint32_t vocab_size,
                                        std::optional<uint32_t> eos, std::optional<uint32_t> bos) {
  Status valid = Validate(vocab_size, eos, bos);
  if (!valid.ok()) return valid.WithContext("writing shard " + path);
  static std::atomic<int> counter{0};
  ShardWriter w;
  w.path_ = path;
  w.tmp_path_ = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  w.vocab_size_ = vocab_size;
  w.width_ = ShardTokenWidth(vocab_size);
  w.eos_ = eos.value_or(kShardNoToken);
  w.bos_ = bos.value_or(kShardNoToken);
  w.fd_ = ::open(w.tmp_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return Errno("creating", w.tmp_path_);
  // A zero header for now; Commit writes the real one once the count and checksum are known.
  const char zeros[kShardHeaderBytes] = {};
  TENAX_RETURN_IF_ERROR(WriteAll(w.fd_, zeros, sizeof(zeros), w.tmp_path_));
  return w;
}

ShardWriter::ShardWriter(ShardWriter&& o) noexcept
    : path_(std::move(o.path_)),
      tmp_path_(std::move(o.tmp_path_)),
      vocab_size_(o.vocab_size_),
      width_(o.width_),
      eos_(o.eos_),
      bos_(o.bos_),
      fd_(o.fd_),
      num_tokens_(o.num_tokens_),
      crc_(o.crc_),
      buffer_(std::move(o.buffer_)) {
  o.fd_ = -1;
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

Status ShardWriter::Append(const uint32_t* ids, size_t n) {
  TENAX_CHECK(fd_ >= 0);
  const size_t before = buffer_.size();
  Status st = EncodeIds(ids, n, vocab_size_, width_, num_tokens_, &buffer_);
  if (!st.ok()) return st.WithContext("writing shard " + path_);
  crc_ = Crc32(buffer_.data() + before, buffer_.size() - before, crc_);
  num_tokens_ += static_cast<int64_t>(n);
  if (buffer_.size() >= kFlushBytes) return Flush();
  return Status::Ok();
}

Status ShardWriter::Flush() {
  TENAX_RETURN_IF_ERROR(WriteAll(fd_, buffer_.data(), buffer_.size(), tmp_path_));
  buffer_.clear();
  return Status::Ok();
}

Status ShardWriter::MoveTailTo(int64_t count, ShardWriter* dst) {
  TENAX_CHECK(count >= 0 && count <= num_tokens_ && dst != this);
  TENAX_RETURN_IF_ERROR(Flush());
  const int64_t keep = num_tokens_ - count;
  std::string chunk;
  std::vector<uint32_t> ids;
  constexpr int64_t kChunk = 1 << 18;
  for (int64_t at = keep; at < num_tokens_; at += kChunk) {
    const int64_t n = std::min(kChunk, num_tokens_ - at);
    chunk.resize(static_cast<size_t>(n) * width_);
    TENAX_RETURN_IF_ERROR(PreadAll(fd_, &chunk[0], chunk.size(),
                                   static_cast<off_t>(kShardHeaderBytes + at * width_), tmp_path_));
    ids.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = LoadToken(reinterpret_cast<const uint8_t*>(chunk.data()), width_, i);
    }
    TENAX_RETURN_IF_ERROR(dst->Append(ids));
  }
  // Cut the file back and recompute the checksum of what stays (CRC-32 cannot be un-extended).
  const off_t keep_bytes = static_cast<off_t>(kShardHeaderBytes + keep * width_);
  if (::ftruncate(fd_, keep_bytes) != 0) return Errno("truncating", tmp_path_);
  if (::lseek(fd_, keep_bytes, SEEK_SET) < 0) return Errno("seeking in", tmp_path_);
  crc_ = 0;
  for (off_t at = kShardHeaderBytes; at < keep_bytes; at += kFlushBytes) {
    chunk.resize(static_cast<size_t>(std::min<off_t>(kFlushBytes, keep_bytes - at)));
    TENAX_RETURN_IF_ERROR(PreadAll(fd_, &chunk[0], chunk.size(), at, tmp_path_));
    crc_ = Crc32(chunk.data(), chunk.size(), crc_);
  }
  num_tokens_ = keep;
  return Status::Ok();
}

Status ShardWriter::Commit() {
  TENAX_CHECK(fd_ >= 0);
  TENAX_RETURN_IF_ERROR(Flush());
  char header[kShardHeaderBytes];
  FillHeader(header, width_, static_cast<uint64_t>(num_tokens_), vocab_size_, eos_, bos_, crc_);
  if (::pwrite(fd_, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return Errno("writing the header of", tmp_path_);
  }
  // Durable before visible: fsync the data, rename, then fsync the folder so the rename is too.
  if (::fsync(fd_) != 0) return Errno("fsync of", tmp_path_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const Status st = Errno("renaming " + tmp_path_ + " to", path_);
    ::unlink(tmp_path_.c_str());
    return st;
  }
  return LocalFs().SyncDir(ParentDir(path_));
}

// ---- Reading ----

Status VerifyTokens(const std::string& path, const uint8_t* base, uint32_t width, int64_t count,
                    uint32_t vocab_size, std::optional<uint32_t> crc, const std::string& fix) {
  // Blocks of 256K tokens: the checksum and the range check share one pass through the cache.
  constexpr int64_t kBlock = 1 << 18;
  uint32_t running = 0;
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t n = std::min(kBlock, count - start);
    if (crc) running = Crc32(base + start * width, static_cast<size_t>(n) * width, running);
    uint32_t max_id = 0;
    if (width == 2) {
      for (int64_t i = 0; i < n; ++i) max_id = std::max(max_id, LoadToken(base, 2, start + i));
    } else {
      for (int64_t i = 0; i < n; ++i) max_id = std::max(max_id, LoadToken(base, 4, start + i));
    }
    if (max_id >= vocab_size) {
      for (int64_t i = start; i < start + n; ++i) {
        const uint32_t t = LoadToken(base, width, i);
        if (t >= vocab_size) {
          return DataError(
              fmt::format("{} holds id {} at position {}, outside its vocabulary of "
                          "{}{}",
                          path, t, i, vocab_size, fix));
        }
      }
    }
  }
  if (crc && running != *crc) {
    return DataError(fmt::format(
        "{} is corrupt: its tokens' CRC-32 is {:08x} but the header recorded {:08x} when the file "
        "was written, so some ids changed afterwards (disk or copy error){}",
        path, running, *crc, fix));
  }
  return Status::Ok();
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
  if (size >= 4 && Get<int32_t>(p, 0) == kLlmcMagic) {
    return DataError("token file " + path +
                     " is an llm.c token file (magic 20240520), not a "
                     "tenax shard: train on it with data.source = \"tokens\" and data.path = \"" +
                     path + "\" (see docs/data_format.md)");
  }
  if (size < kShardHeaderBytes) {
    return DataError("token shard " + path + " is " + std::to_string(size) +
                     " bytes, shorter than the 64-byte header" + Redo(path));
  }
  if (std::memcmp(p + kOffMagic, kShardMagic, sizeof(kShardMagic)) != 0) {
    return DataError("token shard " + path +
                     " does not start with the magic \"TENAXTOK\": it is "
                     "not a tenax shard (an llm.c or nanoGPT token file is read with "
                     "data.source = \"tokens\", see docs/data_format.md)" +
                     Redo(path));
  }
  r.version_ = Get<uint32_t>(p, kOffVersion);
  if (r.version_ != 1 && r.version_ != 2) {
    return DataError("token shard " + path + " has format version " + std::to_string(r.version_) +
                     " but this tenax reads versions 1 and 2 (re-run `tenax prepare` with this "
                     "tenax, or use the tenax that wrote it)");
  }
  std::optional<uint32_t> tokens_crc;
  if (r.version_ == 2) {
    const uint32_t stored = Get<uint32_t>(p, kOffHeaderCrc);
    const uint32_t actual = Crc32(p, kOffHeaderCrc);
    if (stored != actual) {
      return DataError(
          fmt::format("token shard {} has a damaged header (its CRC-32 is {:08x}, "
                      "the header recorded {:08x}){}",
                      path, actual, stored, Redo(path)));
    }
    tokens_crc = Get<uint32_t>(p, kOffTokensCrc);
    const uint32_t bos = Get<uint32_t>(p, kOffBos);
    if (bos != kShardNoToken) r.bos_ = bos;
  } else {
    WarnVersion1(path);
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
  for (const auto& [id, name] :
       {std::pair{std::optional<uint32_t>(eos), "eos"}, std::pair{r.bos_, "bos"}}) {
    if (id && *id != kShardNoToken && *id >= r.vocab_size_) {
      return DataError("token shard " + path + " declares " + name + " id " + std::to_string(*id) +
                       " outside its vocabulary of " + std::to_string(r.vocab_size_) + Redo(path));
    }
  }
  if (eos != kShardNoToken) r.eos_ = eos;
  // Divide rather than multiply so a garbage num_tokens cannot overflow the comparison.
  const uint64_t payload = size - kShardHeaderBytes;
  if (payload % r.width_ != 0 || payload / r.width_ != n) {
    return DataError("token shard " + path + " is " + std::to_string(size) +
                     " bytes but its header promises 64 + " + std::to_string(n) + " tokens * " +
                     std::to_string(r.width_) +
                     " bytes = " + std::to_string(kShardHeaderBytes + n * r.width_) +
                     " (truncated or partly overwritten)" + Redo(path));
  }
  r.num_tokens_ = static_cast<int64_t>(n);
  if (verify_tokens) {
    TENAX_RETURN_IF_ERROR(VerifyTokens("token shard " + path, r.token_data(), r.width_,
                                       r.num_tokens_, r.vocab_size_, tokens_crc, Redo(path)));
  }
  return r;
}

uint32_t ShardReader::token(int64_t i) const {
  TENAX_CHECK(i >= 0 && i < num_tokens_);
  return LoadToken(token_data(), width_, i);
}

}  // namespace tenax::data
