// Opening tenax, llm.c and nanoGPT token files (see token_file.h).
#include "tenax/data/token_file.h"

#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "tenax/core/fs.h"
#include "tenax/data/shard.h"

namespace tenax::data {
namespace {

// llm.c's vocabularies by header version (dev/data/data_common.py: 1 = GPT-2, 2 = Llama 3).
constexpr uint32_t kGpt2Vocab = 50257;
constexpr uint32_t kGpt2Eot = 50256;
constexpr uint32_t kLlama3Vocab = 128256;
constexpr uint32_t kLlama3Bos = 128000;

struct Mappings {
  std::vector<MappedFile> files;
  std::vector<ShardReader> shards;
};

struct OneFile {
  TokenStream::Segment segment;
  uint32_t width = 0;
  uint32_t vocab = 0;
  std::optional<uint32_t> eos, bos;
  std::string format;
};

bool HasGlob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string NanoGptHint() {
  return "if it is a nanoGPT token file (raw uint16 ids without a header, as nanoGPT's "
         "prepare.py writes), set data.token_format = \"nanogpt\" and data.vocab_size (50257 "
         "for GPT-2 ids; meta.pkl's vocab_size for character-level data)";
}

Result<OneFile> OpenOne(const std::string& path, const TokenFileOptions& o, Mappings* keep) {
  std::string format = o.format;
  {
    Result<MappedFile> probe = MappedFile::Open(path);
    if (!probe.ok()) {
      if (probe.status().code() == StatusCode::kNotFound) {
        return NotFound(o.key + ": token file " + path + " does not exist");
      }
      return probe.status().WithContext(o.key);
    }
    const uint8_t* p = probe->data();
    if (format == "auto") {
      int32_t first = 0;
      if (probe->size() >= 4) std::memcpy(&first, p, 4);
      if (probe->size() >= 8 && std::memcmp(p, kShardMagic, 8) == 0) {
        format = "tenax";
      } else if (first == kLlmcMagic) {
        format = "llmc";
      } else {
        return DataError(o.key + ": " + path +
                         " starts with neither a tenax shard header "
                         "(\"TENAXTOK\") nor an llm.c header (int32 20240520); " +
                         NanoGptHint());
      }
    }
    if (format != "tenax") {
      keep->files.push_back(std::move(probe).value());
    }
  }
  OneFile f;
  f.format = format;
  if (format == "tenax") {
    TENAX_ASSIGN_OR_RETURN(ShardReader r, ShardReader::Open(path));
    if (o.vocab_size != 0 && o.vocab_size != r.vocab_size()) {
      return InvalidArgument(
          fmt::format("data.vocab_size = {} but the tenax shard {} records "
                      "vocabulary {}; leave data.vocab_size = 0 for tenax "
                      "shards",
                      o.vocab_size, path, r.vocab_size()));
    }
    f.segment = {r.token_data(), r.num_tokens()};
    f.width = r.token_width();
    f.vocab = r.vocab_size();
    f.eos = r.eos();
    f.bos = r.bos();
    keep->shards.push_back(std::move(r));
    return f;
  }
  const MappedFile& m = keep->files.back();
  const uint8_t* p = m.data();
  const size_t size = m.size();
  size_t header = 0;
  if (format == "llmc") {
    int32_t h[3] = {0, 0, 0};
    if (size >= kLlmcHeaderBytes) std::memcpy(h, p, sizeof(h));
    if (size < kLlmcHeaderBytes || h[0] != kLlmcMagic) {
      return DataError(o.key + ": " + path + " is not an llm.c token file (it needs a " +
                       std::to_string(kLlmcHeaderBytes) +
                       "-byte header starting with int32 "
                       "20240520); " +
                       NanoGptHint());
    }
    if (h[1] != 1 && h[1] != 2) {
      return DataError(
          fmt::format("{}: {} is an llm.c token file of version {}; tenax reads "
                      "versions 1 (uint16 GPT-2 ids) and 2 (uint32 Llama 3 ids)",
                      o.key, path, h[1]));
    }
    header = kLlmcHeaderBytes;
    f.width = h[1] == 1 ? 2 : 4;
    f.vocab = o.vocab_size != 0 ? o.vocab_size : (h[1] == 1 ? kGpt2Vocab : kLlama3Vocab);
    if (h[1] == 1 && kGpt2Eot < f.vocab) f.eos = kGpt2Eot;
    if (h[1] == 2 && kLlama3Bos < f.vocab) f.bos = kLlama3Bos;
    const uint64_t payload = size - header;
    if (h[2] < 0 || payload % f.width != 0 || payload / f.width != static_cast<uint64_t>(h[2])) {
      return DataError(
          fmt::format("{}: llm.c token file {} is {} bytes but its header promises "
                      "1024 + {} tokens * {} bytes (truncated or still being "
                      "written?)",
                      o.key, path, size, h[2], f.width));
    }
    f.segment = {p + header, h[2]};
  } else if (format == "nanogpt") {
    if (o.vocab_size == 0) {
      return InvalidArgument(o.key +
                             ": nanoGPT token files have no header, so data.vocab_size "
                             "must say how many distinct ids they use (50257 for GPT-2 ids; "
                             "meta.pkl's vocab_size for character-level data)");
    }
    if (size % 2 != 0) {
      return DataError(
          fmt::format("{}: {} has an odd number of bytes ({}), so it is not a file "
                      "of uint16 ids (nanoGPT format)",
                      o.key, path, size));
    }
    f.width = 2;
    f.vocab = o.vocab_size;
    if (f.vocab == kGpt2Vocab) f.eos = kGpt2Eot;  // nanoGPT appends <|endoftext|> per document
    f.segment = {p, static_cast<int64_t>(size / 2)};
  } else {
    return InvalidArgument("data.token_format = \"" + format +
                           "\" is unknown; allowed: \"auto\", \"tenax\", \"llmc\", \"nanogpt\"");
  }
  if (f.width == 2 && f.vocab > 65536) {
    return InvalidArgument(
        fmt::format("data.vocab_size = {} cannot be the vocabulary of {}: its "
                    "ids are uint16",
                    f.vocab, path));
  }
  TENAX_RETURN_IF_ERROR(VerifyTokens(
      format + " token file " + path, f.segment.data, f.width, f.segment.size, f.vocab,
      std::nullopt,
      fmt::format(" (its vocabulary was taken to be {}; if the ids come from a larger one, set "
                  "data.vocab_size)",
                  f.vocab)));
  return f;
}

}  // namespace

Result<std::vector<std::string>> ExpandTokenPaths(const std::string& pattern,
                                                  const std::string& key) {
  if (pattern.empty()) return InvalidArgument(key + " is empty: name a token file or a glob");
  if (!HasGlob(pattern)) return std::vector<std::string>{pattern};
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (paths.empty()) return NotFound(key + " = \"" + pattern + "\" matches no file");
  std::sort(paths.begin(), paths.end());
  return paths;
}

Result<TokenStream> OpenTokenFiles(const std::string& pattern, const TokenFileOptions& options) {
  TENAX_ASSIGN_OR_RETURN(std::vector<std::string> paths, ExpandTokenPaths(pattern, options.key));
  auto keep = std::make_shared<Mappings>();
  std::vector<TokenStream::Segment> segments;
  std::optional<OneFile> first;
  for (const std::string& path : paths) {
    TENAX_ASSIGN_OR_RETURN(OneFile f, OpenOne(path, options, keep.get()));
    if (first && (f.width != first->width || f.vocab != first->vocab || f.eos != first->eos ||
                  f.bos != first->bos)) {
      return DataError(
          fmt::format("{}: {} ({} format, {}-byte ids, vocabulary {}) does not match "
                      "{} ({} format, {}-byte ids, vocabulary {}); one stream needs "
                      "files of one tokenizer",
                      options.key, path, f.format, f.width, f.vocab, paths[0], first->format,
                      first->width, first->vocab));
    }
    if (!first) first = f;
    segments.push_back(f.segment);
  }
  const std::string name =
      paths.size() == 1 ? paths[0] : fmt::format("{} ({} files)", pattern, paths.size());
  return TokenStream::FromSegments(keep, std::move(segments), first->width, first->vocab,
                                   first->eos, first->bos, name);
}

Status WriteLlmcFile(const std::string& path, const std::vector<uint32_t>& ids, bool wide) {
  for (uint32_t id : ids) wide = wide || id > 0xFFFF;
  std::string bytes(kLlmcHeaderBytes, '\0');
  const int32_t h[3] = {kLlmcMagic, wide ? 2 : 1, static_cast<int32_t>(ids.size())};
  std::memcpy(&bytes[0], h, sizeof(h));
  for (uint32_t id : ids) {
    if (wide) {
      bytes.append(reinterpret_cast<const char*>(&id), 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(id);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    }
  }
  return LocalFs().WriteFileAtomic(path, bytes);
}

}  // namespace tenax::data
