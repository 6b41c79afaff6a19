// JsonlWriter and TruncateAfterStep: plain stdio appends for the log, the FileSystem seam (atomic
// rewrite) for the one operation that replaces the file.
#include "tenax/core/metrics_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"

namespace tenax {
namespace {

// True if the file's last byte exists and is not '\n' (a previous run died mid-line).
bool EndsMidLine(std::FILE* f) {
  if (std::fseek(f, -1, SEEK_END) != 0) return false;  // empty file
  const int last = std::fgetc(f);
  return last != EOF && last != '\n';
}

}  // namespace

Result<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path) {
  // "a+": every write lands at the end even if something else appended meanwhile; "+" lets us
  // peek at the last byte. "e" is O_CLOEXEC, so child processes do not inherit the descriptor.
  std::FILE* f = std::fopen(path.c_str(), "a+be");
  if (f == nullptr) return IoError("cannot open metrics log " + path + ": " + ErrnoText());
  std::unique_ptr<JsonlWriter> w(new JsonlWriter(path, f));
  if (EndsMidLine(f)) {
    // C requires a positioning call between reading and writing the same stream.
    std::fseek(f, 0, SEEK_END);
    if (std::fputc('\n', f) == EOF || std::fflush(f) != 0) {
      return IoError("writing " + path + ": " + ErrnoText());
    }
  }
  std::fseek(f, 0, SEEK_END);
  return w;
}

JsonlWriter::~JsonlWriter() { std::fclose(file_); }

Status JsonlWriter::Write(const nlohmann::json& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // One fwrite + fflush per line: a crash leaves at most this line torn, and the lines before it
  // have reached the kernel.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return IoError("writing metrics log " + path_ + ": " + ErrnoText() + " (is the disk full?)");
  }
  return Status::Ok();
}

Status TruncateAfterStep(const std::string& path, int64_t step, FileSystem& fs) {
  Result<std::string> text = fs.ReadFile(path);
  if (!text.ok()) {
    return text.status().code() == StatusCode::kNotFound ? Status::Ok() : text.status();
  }
  std::string kept;
  int64_t dropped_torn = 0;
  size_t begin = 0;
  while (begin < text->size()) {
    size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    const std::string_view line(text->data() + begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      ++dropped_torn;
      continue;
    }
    if (j.is_object()) {
      auto s = j.find("step");
      if (s != j.end() && s->is_number_integer() && s->get<int64_t>() > step) continue;
      if (s != j.end() && s->is_number_float() && s->get<double>() > static_cast<double>(step)) {
        continue;
      }
    }
    kept.append(line);  // verbatim: re-serializing could change number formatting
    kept.push_back('\n');
  }
  if (dropped_torn > 0) {
    log::Warn("{}: dropped {} line(s) that are not JSON (left by a crash mid-write)", path,
              dropped_torn);
  }
  if (kept == *text) return Status::Ok();
  return fs.WriteFileAtomic(path, kept);
}

Result<int64_t> LastStepWith(const std::string& path, const std::string& key, FileSystem& fs) {
  Result<std::string> text = fs.ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return int64_t{-1};
    return text.status();
  }
  int64_t last = -1;
  size_t begin = 0;
  while (begin < text->size()) {
    size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    const auto j = nlohmann::json::parse(std::string_view(text->data() + begin, end - begin),
                                         nullptr, /*allow_exceptions=*/false);
    begin = end + 1;
    if (!j.is_object() || !j.contains(key)) continue;
    auto s = j.find("step");
    if (s != j.end() && s->is_number_integer()) last = std::max(last, s->get<int64_t>());
  }
  return last;
}

}  // namespace tenax
