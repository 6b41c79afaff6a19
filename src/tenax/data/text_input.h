// Reading `tenax prepare` inputs as a stream of bytes and of documents, in bounded memory.
//   Compression, told by the file's first bytes: gzip (1f 8b; concatenated members too, like
//   `cat a.gz b.gz`) through zlib, zstd (28 b5 2f fd; multiple frames) through libzstd when this
//   tenax was built with it, else plain.
//   Format, told by the name with any .gz/.zst/.zstd suffix removed: .jsonl and .ndjson are JSON
//   Lines (one JSON object per line, one document per non-blank line, its text in a field);
//   everything else is text, one document per file. A .parquet file is Parquet (not a byte
//   stream: data/parquet_input.h reads it).
// Non-goals: other archive formats (tar, zip, xz, bz2), JSON arrays.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tenax/core/status.h"

namespace tenax::data {

enum class InputFormat { kText, kJsonl, kParquet };

// The document format of an input path, by its name (see above).
InputFormat InputFormatOf(const std::string& path);

// A decompressing reader over one file. Not thread-safe.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills up to n bytes; returns 0 at the end of the data.
  virtual Result<size_t> Read(char* buf, size_t n) = 0;
  // Bytes of the file (compressed) consumed so far, for progress.
  virtual uint64_t file_bytes_read() const = 0;
  // "gzip", "zstd" or "plain".
  virtual const char* compression() const = 0;
};

// Opens `path`, detecting the compression. A .zst input on a tenax built without libzstd fails
// with how to enable it.
Result<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path);

// Whether this build reads zstd inputs.
bool HaveZstd();

// Reads the string in `field` of one JSON Lines line (a JSON object). Uses Debian's simdjson
// (fully validating DOM parser, ~1 GB/s) when this tenax was built with it, else the vendored
// nlohmann json (~0.1 GB/s, a third of the time of Llama 3 tokenization). Errors name what is
// wrong, not where (the caller adds the file and line). Reusable buffers: one parser per thread.
class JsonLineParser {
 public:
  JsonLineParser();
  ~JsonLineParser();
  JsonLineParser(const JsonLineParser&) = delete;
  JsonLineParser& operator=(const JsonLineParser&) = delete;
  // DataError: "is not valid JSON (...)", "is not a JSON object", "has no \"F\" field",
  // "field \"F\" is TYPE, not a string".
  Status TextField(std::string_view line, const std::string& field, std::string* text);
  static const char* backend();  // "simdjson" or "nlohmann"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits a ByteSource into lines ('\n' removed; a final line without '\n' counts). Lines longer
// than max_line bytes are an error naming the line, so a file without newlines cannot exhaust
// memory. Not thread-safe.
class LineReader {
 public:
  LineReader(ByteSource* source, std::string name, size_t max_line = size_t{1} << 30)
      : source_(source), name_(std::move(name)), max_line_(max_line) {}
  // Sets *line (valid until the next call) and returns true, or returns false at the end.
  Result<bool> Next(std::string_view* line);
  int64_t line_number() const { return line_number_; }  // of the line last returned (1-based)

 private:
  ByteSource* source_;
  const std::string name_;
  const size_t max_line_;
  std::string buf_;
  size_t pos_ = 0;   // start of unread data in buf_
  size_t scan_ = 0;  // buf_[pos_, scan_) holds no '\n' (already searched)
  bool eof_ = false;
  int64_t line_number_ = 0;
};

}  // namespace tenax::data
