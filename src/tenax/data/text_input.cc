// Decompressing readers and line splitting for `tenax prepare` (see text_input.h).
#include "tenax/data/text_input.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#ifdef TENAX_WITH_ZSTD
#include <zstd.h>
#endif
#ifdef TENAX_WITH_SIMDJSON
#include <simdjson.h>
#else
#include <nlohmann/json.hpp>
#endif

#include "tenax/core/fs.h"

namespace tenax::data {
namespace {

constexpr size_t kInBytes = 1 << 18;

// Reads the raw file; the base of the decompressors.
class File {
 public:
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      if (errno == ENOENT) return NotFound("input " + path + " does not exist");
      return IoError("cannot open input " + path + ": " + std::strerror(errno));
    }
    return Status::Ok();
  }
  Result<size_t> Read(char* buf, size_t n) {
    for (;;) {
      const ssize_t r = ::read(fd_, buf, n);
      if (r >= 0) {
        read_ += static_cast<uint64_t>(r);
        return static_cast<size_t>(r);
      }
      if (errno != EINTR) return IoError("reading " + path_ + ": " + std::strerror(errno));
    }
  }
  uint64_t read() const { return read_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t read_ = 0;
};

class PlainSource final : public ByteSource {
 public:
  explicit PlainSource(std::unique_ptr<File> f, std::string head)
      : file_(std::move(f)), head_(std::move(head)) {}
  Result<size_t> Read(char* buf, size_t n) override {
    if (!head_.empty()) {  // the bytes read to detect the compression
      const size_t k = std::min(n, head_.size());
      std::memcpy(buf, head_.data(), k);
      head_.erase(0, k);
      return k;
    }
    return file_->Read(buf, n);
  }
  uint64_t file_bytes_read() const override { return file_->read(); }
  const char* compression() const override { return "plain"; }

 private:
  std::unique_ptr<File> file_;
  std::string head_;
};

class GzipSource final : public ByteSource {
 public:
  GzipSource(std::unique_ptr<File> f, std::string head)
      : file_(std::move(f)), in_(std::move(head)) {
    std::memset(&z_, 0, sizeof(z_));
    // 16 + MAX_WBITS: gzip framing (header and CRC checked by zlib).
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipSource() override {
    if (ok_) inflateEnd(&z_);
  }
  Result<size_t> Read(char* buf, size_t n) override {
    if (!ok_) return Internal("zlib could not be initialised");
    if (done_) return size_t{0};
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    while (z_.avail_out > 0) {
      if (z_.avail_in == 0) {
        if (in_pos_ >= in_.size()) {
          in_.resize(kInBytes);
          TENAX_ASSIGN_OR_RETURN(size_t got, file_->Read(&in_[0], in_.size()));
          in_.resize(got);
          in_pos_ = 0;
          if (got == 0) {
            if (member_started_) {
              return DataError("input " + file_->path() + " is a truncated gzip file");
            }
            done_ = true;
            break;
          }
        }
        z_.next_in = reinterpret_cast<Bytef*>(&in_[in_pos_]);
        z_.avail_in = static_cast<uInt>(in_.size() - in_pos_);
        in_pos_ = in_.size();
      }
      member_started_ = true;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        // Another member may follow (concatenated .gz files are one valid gzip file).
        member_started_ = false;
        inflateReset(&z_);
        continue;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return DataError("input " + file_->path() + " is not valid gzip data (" +
                         (z_.msg != nullptr ? z_.msg : "zlib error " + std::to_string(rc)) + ")");
      }
    }
    return n - z_.avail_out;
  }
  uint64_t file_bytes_read() const override { return file_->read(); }
  const char* compression() const override { return "gzip"; }

 private:
  std::unique_ptr<File> file_;
  std::string in_;
  size_t in_pos_ = 0;
  z_stream z_;
  bool ok_ = false;
  bool done_ = false;
  bool member_started_ = false;
};

#ifdef TENAX_WITH_ZSTD
class ZstdSource final : public ByteSource {
 public:
  ZstdSource(std::unique_ptr<File> f, std::string head)
      : file_(std::move(f)), data_(std::move(head)), ctx_(ZSTD_createDCtx()) {
    in_ = {data_.data(), data_.size(), 0};  // the detection head is decompressed first
  }
  ~ZstdSource() override { ZSTD_freeDCtx(ctx_); }
  Result<size_t> Read(char* buf, size_t n) override {
    if (ctx_ == nullptr) return Internal("libzstd could not be initialised");
    ZSTD_outBuffer out = {buf, n, 0};
    while (out.pos < out.size) {
      if (in_.pos >= in_.size) {
        data_.resize(kInBytes);
        TENAX_ASSIGN_OR_RETURN(size_t got, file_->Read(&data_[0], data_.size()));
        if (got == 0) {
          if (frame_open_) return DataError("input " + file_->path() + " is a truncated zstd file");
          break;
        }
        in_ = {data_.data(), got, 0};
      }
      const size_t rc = ZSTD_decompressStream(ctx_, &out, &in_);
      if (ZSTD_isError(rc)) {
        return DataError("input " + file_->path() + " is not valid zstd data (" +
                         ZSTD_getErrorName(rc) + ")");
      }
      frame_open_ = rc != 0;  // 0: a frame just ended (another may follow)
    }
    return out.pos;
  }
  uint64_t file_bytes_read() const override { return file_->read(); }
  const char* compression() const override { return "zstd"; }

 private:
  std::unique_ptr<File> file_;
  std::string data_;
  ZSTD_inBuffer in_;
  ZSTD_DCtx* ctx_;
  bool frame_open_ = false;
};
#endif

}  // namespace

bool HaveZstd() {
#ifdef TENAX_WITH_ZSTD
  return true;
#else
  return false;
#endif
}

InputFormat InputFormatOf(const std::string& path) {
  if (HasSuffix(path, ".parquet")) return InputFormat::kParquet;  // compressed inside, by pages
  std::string p = path;
  for (const char* z : {".gz", ".zst", ".zstd"}) {
    if (HasSuffix(p, z)) p.resize(p.size() - std::strlen(z));
  }
  return HasSuffix(p, ".jsonl") || HasSuffix(p, ".ndjson") ? InputFormat::kJsonl
                                                           : InputFormat::kText;
}

Result<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path) {
  auto file = std::make_unique<File>();
  TENAX_RETURN_IF_ERROR(file->Open(path));
  std::string head(4, '\0');
  size_t have = 0;
  while (have < head.size()) {
    TENAX_ASSIGN_OR_RETURN(size_t got, file->Read(&head[have], head.size() - have));
    if (got == 0) break;
    have += got;
  }
  head.resize(have);
  const auto starts = [&](std::string_view magic) {
    return head.size() >= magic.size() && head.compare(0, magic.size(), magic) == 0;
  };
  if (starts("\x1F\x8B")) {
    return std::unique_ptr<ByteSource>(std::make_unique<GzipSource>(std::move(file), head));
  }
  if (starts("\x28\xB5\x2F\xFD")) {
#ifdef TENAX_WITH_ZSTD
    return std::unique_ptr<ByteSource>(std::make_unique<ZstdSource>(std::move(file), head));
#else
    return InvalidArgument("input " + path +
                           " is zstd-compressed, but this tenax was built "
                           "without libzstd: apt-get install libzstd-dev, re-run cmake and "
                           "rebuild, or decompress it first (zstd -d " +
                           path + ")");
#endif
  }
  return std::unique_ptr<ByteSource>(std::make_unique<PlainSource>(std::move(file), head));
}

namespace {
Status NoField(const std::string& field) { return DataError("has no \"" + field + "\" field"); }
Status NotString(const std::string& field, const std::string& type) {
  return DataError("field \"" + field + "\" is " + type + ", not a string");
}
}  // namespace

#ifdef TENAX_WITH_SIMDJSON

struct JsonLineParser::Impl {
  simdjson::dom::parser parser;
  simdjson::padded_string padded;
};

const char* JsonLineParser::backend() { return "simdjson"; }

Status JsonLineParser::TextField(std::string_view line, const std::string& field,
                                 std::string* text) {
  using simdjson::dom::element_type;
  // simdjson reads up to SIMDJSON_PADDING bytes past the end, so the line is copied into a
  // padded buffer that keeps its capacity across lines.
  if (impl_->padded.size() < line.size()) {
    impl_->padded = simdjson::padded_string(line.size() + line.size() / 2);
  }
  std::memcpy(impl_->padded.data(), line.data(), line.size());
  simdjson::dom::element doc;
  if (auto error = impl_->parser.parse(impl_->padded.data(), line.size(), false).get(doc)) {
    return DataError(std::string("is not valid JSON (") + simdjson::error_message(error) + ")");
  }
  simdjson::dom::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) return DataError("is not a JSON object");
  simdjson::dom::element value;
  if (obj.at_key(field).get(value) != simdjson::SUCCESS) return NoField(field);
  std::string_view sv;
  if (value.get_string().get(sv) != simdjson::SUCCESS) {
    const char* type = "null";
    switch (value.type()) {
      case element_type::ARRAY:
        type = "array";
        break;
      case element_type::OBJECT:
        type = "object";
        break;
      case element_type::INT64:
      case element_type::UINT64:
      case element_type::DOUBLE:
        type = "number";
        break;
      case element_type::BOOL:
        type = "boolean";
        break;
      default:
        break;
    }
    return NotString(field, type);
  }
  text->assign(sv.data(), sv.size());
  return Status::Ok();
}

#else  // !TENAX_WITH_SIMDJSON

struct JsonLineParser::Impl {};

const char* JsonLineParser::backend() { return "nlohmann"; }

Status JsonLineParser::TextField(std::string_view line, const std::string& field,
                                 std::string* text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.is_object()) return DataError("is not a JSON object");
    const auto it = j.find(field);
    if (it == j.end()) return NoField(field);
    if (!it->is_string()) return NotString(field, it->type_name());
    *text = it->get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return DataError(std::string("is not valid JSON (") + e.what() + ")");
  }
  return Status::Ok();
}

#endif

JsonLineParser::JsonLineParser() : impl_(std::make_unique<Impl>()) {}
JsonLineParser::~JsonLineParser() = default;

Result<bool> LineReader::Next(std::string_view* line) {
  for (;;) {
    // scan_ skips what an earlier pass already searched, so a long line costs O(length).
    const size_t nl = buf_.find('\n', std::max(pos_, scan_));
    const size_t end = nl == std::string::npos ? buf_.size() : nl;
    if (end - pos_ > max_line_) {
      return DataError(name_ + " line " + std::to_string(line_number_ + 1) + " is longer than " +
                       std::to_string(max_line_) + " bytes (is this really a JSON Lines file?)");
    }
    if (nl != std::string::npos || (eof_ && pos_ < buf_.size())) {
      *line = std::string_view(buf_).substr(pos_, end - pos_);
      pos_ = scan_ = nl == std::string::npos ? end : end + 1;
      ++line_number_;
      return true;
    }
    if (eof_) return false;
    scan_ = buf_.size();
    buf_.erase(0, pos_);
    scan_ -= pos_;
    pos_ = 0;
    const size_t old = buf_.size();
    buf_.resize(old + kInBytes);
    TENAX_ASSIGN_OR_RETURN(size_t got, source_->Read(&buf_[old], kInBytes));
    buf_.resize(old + got);
    if (got == 0) eof_ = true;
  }
}

}  // namespace tenax::data
