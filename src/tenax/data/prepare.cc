#include "tenax/data/prepare.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "tenax/data/shard.h"

namespace tenax::data {
namespace {

using nlohmann::json;

constexpr const char* kMetaFormat = "tenax-prepared";
constexpr int kMetaVersion = 1;

int64_t CountWords(const std::string& text) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

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
  j["split_rule"] = m.split_rule;
  j["words"] = m.words;
  j["train"] = SplitJson("train.bin", m.train);
  j["val"] = SplitJson("val.bin", m.val);
  j["sources"] = m.sources;
  return j.dump(2) + "\n";
}

}  // namespace

bool IsValidationDocument(int64_t index, int64_t num_documents) {
  return num_documents >= 20 && index % 20 == 19;
}

int64_t TailValidationTokens(int64_t total_tokens) {
  const int64_t five_percent = (total_tokens + 19) / 20;
  return std::max(five_percent, std::min<int64_t>(256, total_tokens / 2));
}

Result<PreparedMeta> PrepareDocuments(const std::vector<Document>& docs, const Tokenizer& tokenizer,
                                      const std::string& out_dir, const std::string& source,
                                      FileSystem& fs) {
  if (docs.empty()) return InvalidArgument("no documents to prepare (give at least one --input)");
  PreparedMeta meta;
  meta.source = source;
  meta.tokenizer = tokenizer.name();
  meta.tokenizer_slug = tokenizer.cache_slug();
  meta.vocab_size = tokenizer.vocab_size();
  meta.eos = tokenizer.eos();
  const int64_t n_docs = static_cast<int64_t>(docs.size());
  meta.split_rule = n_docs >= 20 ? "document-mod-20" : "tail-tokens";

  std::vector<uint32_t> train, val;
  // Token ranges of each document in the concatenated stream, for the tail-token rule.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t i = 0; i < n_docs; ++i) {
    meta.sources.push_back(docs[i].name);
    meta.words += CountWords(docs[i].text);
    Result<std::vector<uint32_t>> encoded = tokenizer.Encode(docs[i].text);
    if (!encoded.ok()) return encoded.status().WithContext("tokenizing " + docs[i].name);
    std::vector<uint32_t> ids = std::move(encoded).value();
    if (meta.eos) ids.push_back(*meta.eos);
    const bool to_val = IsValidationDocument(i, n_docs);
    std::vector<uint32_t>& dst = to_val ? val : train;
    const int64_t start = static_cast<int64_t>(dst.size());
    dst.insert(dst.end(), ids.begin(), ids.end());
    ranges.emplace_back(start, static_cast<int64_t>(dst.size()));
    if (meta.split_rule == "document-mod-20" && !ids.empty()) {
      (to_val ? meta.val : meta.train).documents++;
    }
  }
  if (meta.split_rule == "tail-tokens") {
    const int64_t total = static_cast<int64_t>(train.size());
    if (total < 2) {
      return DataError("the input holds " + std::to_string(total) +
                       " tokens; at least 2 are needed to make a train and a validation split");
    }
    const int64_t cut = total - TailValidationTokens(total);
    val.assign(train.begin() + cut, train.end());
    train.resize(static_cast<size_t>(cut));
    for (const auto& [start, end] : ranges) {
      if (start < end && start < cut) meta.train.documents++;
      if (start < end && end > cut) meta.val.documents++;
    }
  }
  meta.train.tokens = static_cast<int64_t>(train.size());
  meta.val.tokens = static_cast<int64_t>(val.size());
  if (train.empty() || val.empty()) {
    return DataError("after splitting, train has " + std::to_string(train.size()) +
                     " tokens and validation " + std::to_string(val.size()) +
                     "; both need at least one (are most input documents empty?)");
  }

  TENAX_RETURN_IF_ERROR(fs.CreateDirs(out_dir));
  // Uncommit an older prepare in the same folder first: a crash while the shards are replaced
  // must leave a folder readers refuse, not old metadata beside new shards.
  const std::string meta_path = JoinPath(out_dir, "meta.json");
  if (fs.Exists(meta_path)) TENAX_RETURN_IF_ERROR(fs.RemoveAll(meta_path));
  TENAX_RETURN_IF_ERROR(
      WriteShard(fs, JoinPath(out_dir, "train.bin"), train, meta.vocab_size, meta.eos));
  TENAX_RETURN_IF_ERROR(
      WriteShard(fs, JoinPath(out_dir, "val.bin"), val, meta.vocab_size, meta.eos));
  // Last: meta.json commits the folder (see prepare.h).
  TENAX_RETURN_IF_ERROR(fs.WriteFileAtomic(meta_path, MetaToJson(meta)));
  return meta;
}

Status Prepare(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
               const std::string& out_dir) {
  std::vector<Document> docs;
  for (const std::string& path : inputs) {
    Result<std::string> text = LocalFs().ReadFile(path);
    if (!text.ok()) return text.status().WithContext("reading --input");
    docs.push_back({path, std::move(text).value()});
  }
  return PrepareDocuments(docs, tokenizer, out_dir, "text").status();
}

Result<PreparedMeta> ReadPreparedMeta(const std::string& dir) {
  const std::string path = JoinPath(dir, "meta.json");
  Result<std::string> text = LocalFs().ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound(dir + " is not a prepared data folder: it has no meta.json (create one "
                            "with `tenax prepare --input FILE... --out " + dir +
                      "`; a folder without meta.json may be an interrupted prepare)");
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
    if (j.at("version").get<int>() != kMetaVersion) {
      return DataError(path + " has version " + j.at("version").dump() + "; this tenax reads " +
                       std::to_string(kMetaVersion) + redo);
    }
    m.source = j.at("source").get<std::string>();
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.tokenizer_slug = j.at("tokenizer_slug").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<uint32_t>();
    if (!j.at("eos").is_null()) m.eos = j.at("eos").get<uint32_t>();
    m.split_rule = j.at("split_rule").get<std::string>();
    m.words = j.at("words").get<int64_t>();
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
    if (shard.num_tokens() != want || shard.vocab_size() != d.meta.vocab_size ||
        shard.eos() != d.meta.eos) {
      return DataError(path + " does not match " + JoinPath(dir, "meta.json") + " (shard: " +
                       std::to_string(shard.num_tokens()) + " tokens, vocab " +
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
