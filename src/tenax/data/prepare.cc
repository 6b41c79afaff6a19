// The streaming prepare pipeline (prepare.h states the contract). Three roles:
//   feeder   (one owned thread): reads inputs, cuts them into numbered work items;
//   workers  (`threads` owned threads): parse JSON Lines and tokenize, one item at a time;
//   writer   (the calling thread): consumes results strictly in item order, so the output is the
//            same for any number of workers, and appends them to the two shard writers.
// At most kMaxInFlight items exist between the feeder and the writer, which bounds memory.
// Shutdown: the first error (any role) sets `abort`, which every wait also watches; the
// Pipeline destructor then joins all threads. Shards are committed only after everything
// succeeded, old meta.json is removed just before that, and the new one is written last.
#include "tenax/data/prepare.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "tenax/core/log.h"
#include "tenax/data/parquet_input.h"
#include "tenax/data/shard.h"
#include "tenax/data/text_input.h"

namespace tenax::data {
namespace {

using nlohmann::json;

constexpr const char* kMetaFormat = "tenax-prepared";
constexpr int kMetaVersion = 2;
constexpr size_t kItemBytes = 1 << 20;  // target text per work item
constexpr size_t kItemLines = 8192;     // JSON Lines per work item, at most
constexpr int64_t kTailRuleDocs = 20;   // below this many documents, the tail-token rule

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int64_t CountWords(std::string_view text) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = IsSpace(c);
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

bool IsBlank(std::string_view line) { return std::all_of(line.begin(), line.end(), IsSpace); }

// The last position p >= from with text[p - 1] == '\n' and text[p] printable ASCII: a cut
// Tokenizer::SplitsAtLineStarts allows. 0 if there is none.
size_t LastLineStartCut(std::string_view text, size_t from) {
  for (size_t p = text.size(); p-- > std::max<size_t>(from, 1);) {
    if (text[p - 1] == '\n' && text[p] > ' ' && text[p] < 0x7F) return p;
  }
  return 0;
}

// A unit of work: text of one document (or a part of one), a batch of JSON lines, or a batch of
// whole documents (Parquet rows).
struct WorkItem {
  int64_t seq = 0;
  bool jsonl = false;
  std::string text;
  std::vector<std::string> docs;  // when not empty: documents first_doc, first_doc + 1, ...
  int64_t first_doc = 0;          // index of the (first) document in the whole corpus
  bool doc_start = true;          // text items: whether this part starts / ends its document
  bool doc_end = true;
  const std::string* source = nullptr;  // input name, for messages (outlives the pipeline)
  int64_t first_line = 0;               // JSON Lines: line number of the first line
};

// Tokens of one document (or part) inside a result.
struct Span {
  int64_t doc = 0;
  bool doc_end = true;
  size_t begin = 0, end = 0;  // into WorkResult::ids
};

struct WorkResult {
  std::vector<uint32_t> ids;
  std::vector<Span> spans;
  int64_t words = 0;
  int64_t bytes = 0;
  Status status;
};

// Tokenizes one item (runs on a worker).
WorkResult Process(const WorkItem& item, const Tokenizer& tok, const std::string& field) {
  WorkResult r;
  const auto add = [&](std::string_view text, int64_t doc, bool start, bool end) -> Status {
    Span s{doc, end, r.ids.size(), 0};
    if (start && tok.bos()) r.ids.push_back(*tok.bos());
    TENAX_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, tok.Encode(text));
    r.ids.insert(r.ids.end(), ids.begin(), ids.end());
    if (end && tok.eos()) r.ids.push_back(*tok.eos());
    s.end = r.ids.size();
    r.spans.push_back(s);
    r.words += CountWords(text);
    r.bytes += static_cast<int64_t>(text.size());
    return Status::Ok();
  };
  if (!item.docs.empty()) {
    for (size_t i = 0; i < item.docs.size() && r.status.ok(); ++i) {
      r.status = add(item.docs[i], item.first_doc + static_cast<int64_t>(i), true, true);
    }
    if (!r.status.ok()) r.status = r.status.WithContext("tokenizing " + *item.source);
    return r;
  }
  if (!item.jsonl) {
    r.status = add(item.text, item.first_doc, item.doc_start, item.doc_end);
    if (!r.status.ok()) r.status = r.status.WithContext("tokenizing " + *item.source);
    return r;
  }
  std::string_view rest = item.text;
  int64_t line_no = item.first_line - 1, doc = item.first_doc;
  JsonLineParser parser;
  std::string text;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (IsBlank(line)) continue;
    const auto where = [&] { return *item.source + " line " + std::to_string(line_no); };
    if (Status st = parser.TextField(line, field, &text); !st.ok()) {
      const bool field_problem = st.message().find("field") != std::string::npos ||
                                 st.message().find("object") != std::string::npos;
      r.status = Status(st.code(), where() + " " + st.message() +
                                       (field_problem ? " (each line must be a JSON object; name "
                                                        "the field holding the text with "
                                                        "--text-field)"
                                                      : ""));
      return r;
    }
    r.status = add(text, doc++, true, true);
    if (!r.status.ok()) {
      r.status = r.status.WithContext("tokenizing " + where());
      return r;
    }
  }
  return r;
}

// Shared state of one prepare run. Owns its threads (joined in the destructor).
class Pipeline {
 public:
  // Emits work items in order; returns false when the pipeline is aborting.
  using Push = std::function<bool(WorkItem)>;
  using Feed = std::function<Status(const Push&)>;

  Pipeline(const Tokenizer& tok, std::string field, int threads)
      : tok_(tok), field_(std::move(field)), threads_(threads) {}
  ~Pipeline() {
    Abort();
    for (std::thread& t : threads_list_) t.join();
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  void Start(Feed feed) {
    threads_list_.emplace_back([this, feed = std::move(feed)] {
      Status st = feed([this](WorkItem item) { return PushItem(std::move(item)); });
      std::lock_guard<std::mutex> lock(mu_);
      feed_done_ = true;
      if (!st.ok() && status_.ok()) {
        status_ = st;
        abort_ = true;
      }
      cv_.notify_all();
    });
    for (int i = 0; i < threads_; ++i) threads_list_.emplace_back([this] { Work(); });
  }

  // The next result in order, or nullopt when all are consumed or the run failed (see status()).
  std::optional<WorkResult> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock,
             [&] { return abort_ || results_.count(next_) || (feed_done_ && next_ == pushed_); });
    if (abort_ || !results_.count(next_)) return std::nullopt;
    WorkResult r = std::move(results_[next_]);
    results_.erase(next_++);
    --in_flight_;
    cv_.notify_all();
    if (!r.status.ok()) {
      status_ = r.status;
      abort_ = true;
      cv_.notify_all();
      return std::nullopt;
    }
    return r;
  }

  Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  void Fail(Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = std::move(st);
    abort_ = true;
    cv_.notify_all();
  }
  void Abort() {
    std::lock_guard<std::mutex> lock(mu_);
    abort_ = true;
    cv_.notify_all();
  }

 private:
  // Items tokenize in ~1 MB units; a few per worker keeps every core busy while the writer and
  // the feeder catch up, and bounds memory to a few tens of MB.
  int64_t MaxInFlight() const { return 2 * static_cast<int64_t>(threads_) + 2; }

  bool PushItem(WorkItem item) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return abort_ || in_flight_ < MaxInFlight(); });
    if (abort_) return false;
    item.seq = pushed_++;
    ++in_flight_;
    work_.push_back(std::move(item));
    cv_.notify_all();
    return true;
  }

  void Work() {
    for (;;) {
      WorkItem item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return abort_ || !work_.empty() || feed_done_; });
        if (abort_ || (work_.empty() && feed_done_)) return;
        item = std::move(work_.front());
        work_.pop_front();
      }
      WorkResult r = Process(item, tok_, field_);
      std::lock_guard<std::mutex> lock(mu_);
      results_[item.seq] = std::move(r);
      cv_.notify_all();
    }
  }

  // Constant after construction.
  const Tokenizer& tok_;
  const std::string field_;
  const int threads_;
  std::vector<std::thread> threads_list_;  // started by Start, joined by the destructor
  // Guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;  // one variable: every wait re-checks its own predicate
  std::deque<WorkItem> work_;
  std::map<int64_t, WorkResult> results_;
  int64_t pushed_ = 0;
  int64_t next_ = 0;
  int64_t in_flight_ = 0;  // pushed, not yet consumed by Next
  bool feed_done_ = false;
  bool abort_ = false;
  Status status_;
};

// Reads the input files into work items (runs on the feeder thread). `parquet`: what
// InspectParquet found in each Parquet input, by path.
class FileFeeder {
 public:
  FileFeeder(const std::vector<std::string>& inputs, bool cut_lines, std::string column,
             const std::map<std::string, ParquetInfo>& parquet, std::atomic<uint64_t>* file_bytes)
      : inputs_(inputs),
        cut_lines_(cut_lines),
        column_(std::move(column)),
        parquet_(parquet),
        file_bytes_(file_bytes) {}

  Status Run(const Pipeline::Push& push) {
    uint64_t done_bytes = 0;
    for (const std::string& path : inputs_) {
      if (auto it = parquet_.find(path); it != parquet_.end()) {
        TENAX_RETURN_IF_ERROR(Parquet(path, it->second, push, &done_bytes));
        continue;
      }
      TENAX_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, OpenByteSource(path));
      const auto progress = [&] { file_bytes_->store(done_bytes + src->file_bytes_read()); };
      Status st = InputFormatOf(path) == InputFormat::kJsonl ? Jsonl(path, *src, push, progress)
                                                             : Text(path, *src, push, progress);
      if (!st.ok()) return st;
      done_bytes += src->file_bytes_read();
      progress();
    }
    return Status::Ok();
  }

 private:
  Status Text(const std::string& path, ByteSource& src, const Pipeline::Push& push,
              const std::function<void()>& progress) {
    std::string buf;
    bool doc_start = true, eof = false;
    size_t searched = 0;  // buf[1, searched) holds no allowed cut
    while (!eof) {
      const size_t old = buf.size();
      buf.resize(old + kItemBytes);
      TENAX_ASSIGN_OR_RETURN(size_t got, src.Read(&buf[old], kItemBytes));
      buf.resize(old + got);
      eof = got == 0;
      progress();
      if (!eof && (!cut_lines_ || buf.size() < kItemBytes)) continue;
      // Cut after the last line break that allows it; keep the rest for the next item.
      const size_t cut = eof ? buf.size() : LastLineStartCut(buf, searched);
      searched = buf.size();
      if (cut == 0 && !eof) continue;  // no line break yet: hold the document part whole
      WorkItem item;
      item.text = buf.substr(0, cut);
      buf.erase(0, cut);
      searched = buf.size();  // the rest follows the last cut, so it holds none
      item.first_doc = docs_;
      item.doc_start = doc_start;
      item.doc_end = eof;
      item.source = &path;
      doc_start = false;
      if (!push(std::move(item))) return Status::Ok();
    }
    ++docs_;
    return Status::Ok();
  }

  // Row group by row group; a row group's documents go out in items of about kItemBytes.
  Status Parquet(const std::string& path, const ParquetInfo& info, const Pipeline::Push& push,
                 uint64_t* done_bytes) {
    int64_t nulls = 0;
    for (size_t g = 0; g < info.group_rows.size(); ++g) {
      TENAX_ASSIGN_OR_RETURN(std::vector<std::string> values,
                             ReadParquetRowGroup(path, column_, static_cast<int>(g), &nulls));
      WorkItem item;
      size_t bytes = 0;
      const auto flush = [&]() -> bool {
        if (item.docs.empty()) return true;
        item.source = &path;
        const bool ok = push(std::move(item));
        item = WorkItem();
        bytes = 0;
        return ok;
      };
      for (std::string& v : values) {
        if (item.docs.empty()) item.first_doc = docs_;
        bytes += v.size();
        item.docs.push_back(std::move(v));
        ++docs_;
        if ((bytes >= kItemBytes || item.docs.size() >= kItemLines) && !flush()) {
          return Status::Ok();
        }
      }
      if (!flush()) return Status::Ok();
      *done_bytes += static_cast<uint64_t>(info.group_bytes[g]);
      file_bytes_->store(*done_bytes);
    }
    if (nulls > 0) {
      log::Warn("{}: {} of {} rows have a null \"{}\" and were left out", path, nulls, info.rows,
                column_);
    }
    return Status::Ok();
  }

  Status Jsonl(const std::string& path, ByteSource& src, const Pipeline::Push& push,
               const std::function<void()>& progress) {
    LineReader lines(&src, path);
    WorkItem item;
    size_t n_lines = 0;
    const auto flush = [&]() -> bool {
      if (n_lines == 0) return true;
      const bool ok = push(std::move(item));
      item = WorkItem();
      n_lines = 0;
      progress();
      return ok;
    };
    for (;;) {
      std::string_view line;
      TENAX_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
      if (!more) break;
      if (n_lines == 0) {
        item.jsonl = true;
        item.first_doc = docs_;
        item.first_line = lines.line_number();
        item.source = &path;
      }
      item.text.append(line.data(), line.size());
      item.text.push_back('\n');
      ++n_lines;
      if (!IsBlank(line)) ++docs_;
      if ((item.text.size() >= kItemBytes || n_lines >= kItemLines) && !flush()) {
        return Status::Ok();
      }
    }
    flush();
    return Status::Ok();
  }

  const std::vector<std::string>& inputs_;
  const bool cut_lines_;
  const std::string column_;
  const std::map<std::string, ParquetInfo>& parquet_;
  std::atomic<uint64_t>* file_bytes_;
  int64_t docs_ = 0;
};

// A progress line on stderr: redrawn in place on a terminal, every 10 s otherwise.
class Progress {
 public:
  Progress(bool enabled, uint64_t total_file_bytes)
      : enabled_(enabled),
        tty_(::isatty(2) == 1),
        total_(total_file_bytes),
        start_(Clock::now()),
        last_(start_) {}
  void Update(uint64_t file_bytes, int64_t text_bytes, int64_t tokens, int64_t docs, bool final) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!final &&
        now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(10))) {
      return;
    }
    last_ = now;
    const double s = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
    const double frac = total_ > 0 ? std::min(1.0, double(file_bytes) / double(total_)) : 1.0;
    const int filled = static_cast<int>(frac * 20);
    const std::string line = fmt::format(
        "prepare [{}{}] {:3.0f}% | {:.1f} MB text, {:.1f} MB/s | {:.2f}M tokens, {:.2f}M tokens/s "
        "| {} documents | {:.0f}s",
        std::string(filled, '#'), std::string(20 - filled, '.'), 100 * frac, text_bytes / 1e6,
        text_bytes / 1e6 / s, tokens / 1e6, tokens / 1e6 / s, docs, s);
    std::fprintf(stderr, tty_ ? "\r%s%s" : "%s%s", line.c_str(), tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  const bool enabled_, tty_;
  const uint64_t total_;
  const Clock::time_point start_;
  Clock::time_point last_;
};

json SplitJson(const std::string& file, const SplitCounts& c) {
  return json{{"file", file}, {"tokens", c.tokens}, {"documents", c.documents}};
}

std::string MetaToJson(const PreparedMeta& m) {
  json j;
  j["format"] = kMetaFormat;
  j["version"] = kMetaVersion;
  j["source"] = m.source;
  j["tokenizer"] = m.tokenizer;
  j["tokenizer_slug"] = m.tokenizer_slug;
  j["vocab_size"] = m.vocab_size;
  j["eos"] = m.eos ? json(*m.eos) : json(nullptr);
  j["bos"] = m.bos ? json(*m.bos) : json(nullptr);
  j["split_rule"] = m.split_rule;
  j["words"] = m.words;
  j["bytes"] = m.bytes;
  j["train"] = SplitJson("train.bin", m.train);
  j["val"] = SplitJson("val.bin", m.val);
  j["sources"] = m.sources;
  return j.dump(2) + "\n";
}

int Threads(int requested) {
  if (requested > 0) return requested;
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs the pipeline over `feed` and writes out_dir. `total_file_bytes` scales the progress bar.
Result<PreparedMeta> RunInto(const Pipeline::Feed& feed, const Tokenizer& tok,
                             const std::string& out_dir, const PrepareOptions& o,
                             std::vector<std::string> sources, uint64_t total_file_bytes,
                             const std::atomic<uint64_t>* file_bytes) {
  PreparedMeta meta;
  meta.source = o.source;
  meta.tokenizer = tok.name();
  meta.tokenizer_slug = tok.cache_slug();
  meta.vocab_size = tok.vocab_size();
  meta.eos = tok.eos();
  meta.bos = tok.bos();
  meta.sources = std::move(sources);
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(out_dir));
  TENAX_ASSIGN_OR_RETURN(
      ShardWriter train,
      ShardWriter::Create(JoinPath(out_dir, "train.bin"), meta.vocab_size, meta.eos, meta.bos));
  TENAX_ASSIGN_OR_RETURN(ShardWriter val, ShardWriter::Create(JoinPath(out_dir, "val.bin"),
                                                              meta.vocab_size, meta.eos, meta.bos));
  Progress progress(o.progress, total_file_bytes);
  // Per-document token ranges in the train stream, kept for the first documents only: the
  // tail-token rule (fewer than 20 documents) needs them to count documents on each side.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t docs = 0, doc_tokens = 0;
  {
    Pipeline pipeline(tok, o.text_field, Threads(o.threads));
    pipeline.Start(feed);
    while (std::optional<WorkResult> r = pipeline.Next()) {
      meta.words += r->words;
      meta.bytes += r->bytes;
      for (const Span& s : r->spans) {
        const bool to_val = s.doc % kTailRuleDocs == kTailRuleDocs - 1;
        ShardWriter& dst = to_val ? val : train;
        const int64_t start = dst.num_tokens();
        Status st = dst.Append(r->ids.data() + s.begin, s.end - s.begin);
        if (!st.ok()) {
          pipeline.Fail(st);
          break;
        }
        if (s.doc < kTailRuleDocs) {
          if (static_cast<int64_t>(ranges.size()) <= s.doc) ranges.emplace_back(start, start);
          ranges[s.doc].second = dst.num_tokens();
        }
        doc_tokens += static_cast<int64_t>(s.end - s.begin);
        if (s.doc_end) {
          if (doc_tokens > 0) (to_val ? meta.val : meta.train).documents++;
          doc_tokens = 0;
          docs = s.doc + 1;
        }
      }
      progress.Update(file_bytes ? file_bytes->load() : 0, meta.bytes,
                      train.num_tokens() + val.num_tokens(), docs, false);
    }
    TENAX_RETURN_IF_ERROR(pipeline.status());
  }
  progress.Update(total_file_bytes, meta.bytes, train.num_tokens() + val.num_tokens(), docs, true);
  if (docs == 0) return InvalidArgument("no documents to prepare (the inputs hold no text)");
  meta.split_rule = docs >= kTailRuleDocs ? "document-mod-20" : "tail-tokens";
  if (meta.split_rule == "tail-tokens") {
    const int64_t total = train.num_tokens();
    if (total < 2) {
      return DataError("the input holds " + std::to_string(total) +
                       " tokens; at least 2 are needed to make a train and a validation split");
    }
    const int64_t cut = total - TailValidationTokens(total);
    TENAX_RETURN_IF_ERROR(train.MoveTailTo(total - cut, &val));
    meta.train.documents = meta.val.documents = 0;
    for (const auto& [start, end] : ranges) {
      if (start < end && start < cut) meta.train.documents++;
      if (start < end && end > cut) meta.val.documents++;
    }
  }
  meta.train.tokens = train.num_tokens();
  meta.val.tokens = val.num_tokens();
  if (meta.train.tokens == 0 || meta.val.tokens == 0) {
    return DataError("after splitting, train has " + std::to_string(meta.train.tokens) +
                     " tokens and validation " + std::to_string(meta.val.tokens) +
                     "; both need at least one (are most input documents empty?)");
  }
  // Uncommit an older prepare in the same folder first: a crash while the shards are replaced
  // must leave a folder readers refuse, not old metadata beside new shards.
  const std::string meta_path = JoinPath(out_dir, "meta.json");
  if (LocalFs().Exists(meta_path)) TENAX_RETURN_IF_ERROR(LocalFs().RemoveAll(meta_path));
  TENAX_RETURN_IF_ERROR(train.Commit());
  TENAX_RETURN_IF_ERROR(val.Commit());
  // Last: meta.json commits the folder (see prepare.h).
  TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(meta_path, MetaToJson(meta)));
  return meta;
}

// RunInto; a failed run leaves no folder where there was none (an existing one keeps its earlier
// prepare: meta.json and the shards are replaced only at the end).
Result<PreparedMeta> Run(const Pipeline::Feed& feed, const Tokenizer& tok,
                         const std::string& out_dir, const PrepareOptions& o,
                         std::vector<std::string> sources, uint64_t total_file_bytes,
                         const std::atomic<uint64_t>* file_bytes) {
  const bool existed = LocalFs().Exists(out_dir);
  Result<PreparedMeta> meta =
      RunInto(feed, tok, out_dir, o, std::move(sources), total_file_bytes, file_bytes);
  if (!meta.ok() && !existed) (void)LocalFs().RemoveAll(out_dir);
  return meta;
}

}  // namespace

bool IsValidationDocument(int64_t index, int64_t num_documents) {
  return num_documents >= kTailRuleDocs && index % kTailRuleDocs == kTailRuleDocs - 1;
}

int64_t TailValidationTokens(int64_t total_tokens) {
  const int64_t five_percent = (total_tokens + 19) / 20;
  return std::max(five_percent, std::min<int64_t>(256, total_tokens / 2));
}

Result<PreparedMeta> PrepareFiles(const std::vector<std::string>& inputs,
                                  const Tokenizer& tokenizer, const std::string& out_dir,
                                  const PrepareOptions& options) {
  if (inputs.empty()) return InvalidArgument("no inputs to prepare (give at least one --input)");
  // Every input must open before any work starts: a typo in the 40th file should not cost the
  // time of tokenizing the first 39.
  uint64_t total = 0;
  std::map<std::string, ParquetInfo> parquet;
  for (const std::string& path : inputs) {
    if (InputFormatOf(path) == InputFormat::kParquet) {
      // The schema and footer too, so a truncated file or a wrong column stops here.
      Result<ParquetInfo> info = InspectParquet(path, options.text_field);
      if (!info.ok()) return info.status().WithContext("--input");
      for (const int64_t b : info->group_bytes) total += static_cast<uint64_t>(b);
      parquet[path] = std::move(*info);
      continue;
    }
    Result<std::unique_ptr<ByteSource>> src = OpenByteSource(path);
    if (!src.ok()) return src.status().WithContext("--input");
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
  }
  std::atomic<uint64_t> file_bytes{0};
  FileFeeder feeder(inputs, tokenizer.SplitsAtLineStarts(), options.text_field, parquet,
                    &file_bytes);
  return Run([&](const Pipeline::Push& push) { return feeder.Run(push); }, tokenizer, out_dir,
             options, inputs, total, &file_bytes);
}

Result<PreparedMeta> PrepareDocuments(const std::vector<Document>& docs, const Tokenizer& tokenizer,
                                      const std::string& out_dir, const std::string& source,
                                      int threads) {
  if (docs.empty()) return InvalidArgument("no documents to prepare (give at least one --input)");
  std::vector<std::string> names;
  for (const Document& d : docs) names.push_back(d.name);
  PrepareOptions o;
  o.source = source;
  o.threads = threads;
  const auto feed = [&](const Pipeline::Push& push) -> Status {
    for (size_t i = 0; i < docs.size(); ++i) {
      WorkItem item;
      item.text = docs[i].text;
      item.first_doc = static_cast<int64_t>(i);
      item.source = &docs[i].name;
      if (!push(std::move(item))) break;
    }
    return Status::Ok();
  };
  return Run(feed, tokenizer, out_dir, o, std::move(names), 0, nullptr);
}

Status Prepare(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
               const std::string& out_dir) {
  return PrepareFiles(inputs, tokenizer, out_dir).status();
}

Status PrepareCommand(const std::vector<std::string>& inputs, const std::string& tokenizer_spec,
                      const std::string& out_dir, const PrepareOptions& options) {
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, MakeTokenizer(tokenizer_spec));
  const auto start = std::chrono::steady_clock::now();
  TENAX_ASSIGN_OR_RETURN(PreparedMeta m, PrepareFiles(inputs, *tok, out_dir, options));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "prepared %lld documents (%.1f MB of text) into %s: %lld train + %lld val tokens, "
      "tokenizer %s (vocab %u), %.1fs (%.1f MB/s)\n",
      static_cast<long long>(m.train.documents + m.val.documents), m.bytes / 1e6, out_dir.c_str(),
      static_cast<long long>(m.train.tokens), static_cast<long long>(m.val.tokens),
      m.tokenizer.c_str(), m.vocab_size, s, m.bytes / 1e6 / std::max(s, 1e-9));
  return Status::Ok();
}

Result<PreparedMeta> ReadPreparedMeta(const std::string& dir) {
  const std::string path = JoinPath(dir, "meta.json");
  Result<std::string> text = LocalFs().ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound(dir +
                      " is not a prepared data folder: it has no meta.json (create one "
                      "with `tenax prepare --input FILE... --out " +
                      dir + "`; a folder without meta.json may be an interrupted prepare)");
    }
    return text.status();
  }
  const std::string redo = " (re-run `tenax prepare` into a fresh folder)";
  PreparedMeta m;
  try {
    const json j = json::parse(*text);
    if (j.value("format", "") != kMetaFormat) {
      return DataError(path + " is not a tenax prepared-data meta file (format is not \"" +
                       std::string(kMetaFormat) + "\")" + redo);
    }
    const int version = j.at("version").get<int>();
    if (version != 1 && version != 2) {
      return DataError(path + " has version " + j.at("version").dump() +
                       "; this tenax reads 1 and 2" + redo);
    }
    m.source = j.at("source").get<std::string>();
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.tokenizer_slug = j.at("tokenizer_slug").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<uint32_t>();
    if (!j.at("eos").is_null()) m.eos = j.at("eos").get<uint32_t>();
    if (version >= 2 && !j.at("bos").is_null()) m.bos = j.at("bos").get<uint32_t>();
    m.split_rule = j.at("split_rule").get<std::string>();
    m.words = j.at("words").get<int64_t>();
    if (version >= 2) m.bytes = j.at("bytes").get<int64_t>();
    m.train = {j.at("train").at("tokens").get<int64_t>(),
               j.at("train").at("documents").get<int64_t>()};
    m.val = {j.at("val").at("tokens").get<int64_t>(), j.at("val").at("documents").get<int64_t>()};
    m.sources = j.at("sources").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return DataError("cannot parse " + path + ": " + e.what() + redo);
  }
  return m;
}

Result<PreparedData> OpenPrepared(const std::string& dir) {
  PreparedData d;
  d.dir = dir;
  TENAX_ASSIGN_OR_RETURN(d.meta, ReadPreparedMeta(dir));
  for (const bool is_val : {false, true}) {
    const std::string path = JoinPath(dir, is_val ? "val.bin" : "train.bin");
    TENAX_ASSIGN_OR_RETURN(ShardReader shard, ShardReader::Open(path));
    const int64_t want = is_val ? d.meta.val.tokens : d.meta.train.tokens;
    // A version-1 shard has no BOS field; version-1 meta has none either.
    if (shard.num_tokens() != want || shard.vocab_size() != d.meta.vocab_size ||
        shard.eos() != d.meta.eos || (shard.version() >= 2 && shard.bos() != d.meta.bos)) {
      return DataError(path + " does not match " + JoinPath(dir, "meta.json") +
                       " (shard: " + std::to_string(shard.num_tokens()) + " tokens, vocab " +
                       std::to_string(shard.vocab_size()) + "; meta: " + std::to_string(want) +
                       " tokens, vocab " + std::to_string(d.meta.vocab_size) +
                       "): the folder mixes two prepare runs; re-run `tenax prepare` into it");
    }
    TokenStream s = TokenStream::FromShard(std::move(shard), path);
    (is_val ? d.val : d.train) = std::move(s);
  }
  return d;
}

}  // namespace tenax::data
