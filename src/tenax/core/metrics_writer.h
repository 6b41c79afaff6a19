// JSON-lines metrics log (metrics.jsonl): one JSON object per line, appended and flushed line by
// line, so a crashed run loses at most the line being written and the file stays readable with
// `jq`, pandas or a one-line Python loop. On resume the trainer calls TruncateAfterStep so that
// steps replayed after the checkpoint are not logged twice.
// Non-goals: atomicity of the whole file (it is a log, not state); fsync per line (a flush to the
// kernel survives a process crash, which is the failure that matters for a training run);
// thread safety (one writer per file, on the thread that logs).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax {

// Thread safety: none; call from one thread. Not copyable; closes the file on destruction.
class JsonlWriter {
 public:
  // Opens `path` for appending, creating it (not its folder) if needed. If a previous run died
  // mid-line, a newline is added first so the next record starts on its own line.
  static Result<std::unique_ptr<JsonlWriter>> Open(const std::string& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Appends `record` (normally an object with a "step" field) as one line and flushes it.
  // NaN and infinities become null (JSON has no spelling for them); invalid UTF-8 is replaced.
  Status Write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  JsonlWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  const std::string path_;
  std::FILE* file_;  // owned
};

// Rewrites `path` atomically keeping only the lines whose "step" is <= `step`. Lines without a
// numeric "step" (e.g. run-level events) are kept; lines that are not JSON (a crash's torn last
// line) are dropped with a warning. A missing file is not an error: there is nothing to trim.
// Call it before JsonlWriter::Open: the rewrite replaces the file, and a writer opened earlier
// would go on appending to the replaced (unlinked) one.
Status TruncateAfterStep(const std::string& path, int64_t step, FileSystem& fs = LocalFs());
// The largest integer "step" among the lines of `path` that have `key` (e.g. "loss": training
// lines, not evaluations); -1 when none does or the file does not exist. Torn lines are skipped.
Result<int64_t> LastStepWith(const std::string& path, const std::string& key,
                             FileSystem& fs = LocalFs());

}  // namespace tenax
