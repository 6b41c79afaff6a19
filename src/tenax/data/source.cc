#include "tenax/data/source.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "tenax/core/fs.h"
#include "tenax/data/brown.h"
#include "tenax/data/prepare.h"
#include "tenax/data/shard.h"
#include "tenax/data/synthetic.h"
#include "tenax/data/token_file.h"

namespace tenax::data {
namespace {

constexpr const char* kEvalForms =
    "brown[:val|:train], synthetic[:val|:train], DIR[:val|:train] (a folder written by "
    "`tenax prepare`), or FILE.bin (one token file: a tenax shard or an llm.c .bin)";

DataSplits FromPrepared(PreparedData d, const std::string& label) {
  DataSplits s;
  s.vocab_size = d.meta.vocab_size;
  s.eos = d.meta.eos;
  s.bos = d.meta.bos;
  s.tokenizer = d.meta.tokenizer;
  s.description = fmt::format(
      "{} ({}): {} train + {} val tokens, {} documents, vocab {}, "
      "tokenizer {}",
      label, d.dir, d.meta.train.tokens, d.meta.val.tokens,
      d.meta.train.documents + d.meta.val.documents, d.meta.vocab_size, d.meta.tokenizer);
  s.train = std::move(d.train);
  s.val = std::move(d.val);
  return s;
}

Result<DataSplits> OpenSynthetic(const SyntheticOptions& o) {
  TENAX_ASSIGN_OR_RETURN(SyntheticData d, MakeSynthetic(o));
  DataSplits s;
  s.vocab_size = static_cast<uint32_t>(o.vocab_size);
  s.entropy_rate_nats = d.entropy_rate_nats;
  s.description = fmt::format(
      "synthetic order-{} Markov chain over {} tokens (seed {}): {} train + {} val tokens, "
      "entropy rate {:.4f} nats/token",
      o.order, o.vocab_size, o.seed, d.train.size(), d.val.size(), d.entropy_rate_nats);
  s.train = std::move(d.train);
  s.val = std::move(d.val);
  return s;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

TokenFileOptions FileOptions(const DataOptions& o, const std::string& key) {
  TokenFileOptions f;
  f.format = o.token_format;
  f.vocab_size = static_cast<uint32_t>(o.vocab_size);
  f.key = key;
  return f;
}

Result<DataSplits> OpenTokens(const DataOptions& o) {
  DataSplits s;
  TENAX_ASSIGN_OR_RETURN(s.train, OpenTokenFiles(o.path, FileOptions(o, "data.path")));
  TENAX_ASSIGN_OR_RETURN(s.val, OpenTokenFiles(o.val_path, FileOptions(o, "data.val_path")));
  if (s.train.vocab_size() != s.val.vocab_size() || s.train.eos() != s.val.eos() ||
      s.train.bos() != s.val.bos()) {
    return DataError(
        fmt::format("data.path ({}: vocabulary {}) and data.val_path ({}: "
                    "vocabulary {}) hold ids of different tokenizers",
                    s.train.name(), s.train.vocab_size(), s.val.name(), s.val.vocab_size()));
  }
  s.vocab_size = s.train.vocab_size();
  s.eos = s.train.eos();
  s.bos = s.train.bos();
  s.description = fmt::format(
      "token files: {} train tokens from {}, {} val tokens from {}, "
      "vocab {}",
      s.train.size(), s.train.name(), s.val.size(), s.val.name(), s.vocab_size);
  return s;
}

}  // namespace

Result<DataSplits> OpenDataSource(const DataOptions& options) {
  if (options.source == "brown") {
    TENAX_ASSIGN_OR_RETURN(std::string dir, EnsureBrownPrepared(options));
    TENAX_ASSIGN_OR_RETURN(PreparedData d, OpenPrepared(dir));
    return FromPrepared(std::move(d), "Brown corpus");
  }
  if (options.source == "synthetic") return OpenSynthetic(options.synthetic);
  if (options.source == "shards") {
    if (options.path.empty()) {
      return InvalidArgument(
          "data.source = \"shards\" needs data.path: a folder written by "
          "`tenax prepare --input FILE... --out DIR`");
    }
    if (IsRegularFile(options.path)) {
      return InvalidArgument("data.path = \"" + options.path +
                             "\" is a file, but data.source = "
                             "\"shards\" reads a folder written by `tenax prepare`; to train on "
                             "token files (tenax, llm.c or nanoGPT .bin) set data.source = "
                             "\"tokens\" with data.path and data.val_path");
    }
    TENAX_ASSIGN_OR_RETURN(PreparedData d, OpenPrepared(options.path));
    return FromPrepared(std::move(d), "prepared shards");
  }
  if (options.source == "tokens") return OpenTokens(options);
  return InvalidArgument("data.source = \"" + options.source +
                         "\" is unknown; allowed: \"brown\", \"synthetic\", \"shards\", "
                         "\"tokens\"");
}

Result<TokenStream> OpenEvalSpec(const std::string& spec, const DataOptions& defaults) {
  std::string base = spec;
  std::optional<bool> want_train;
  if (HasSuffix(spec, ":train")) {
    base = spec.substr(0, spec.size() - 6);
    want_train = true;
  } else if (HasSuffix(spec, ":val")) {
    base = spec.substr(0, spec.size() - 4);
    want_train = false;
  }
  const bool train = want_train.value_or(false);
  if (base.empty()) {
    return InvalidArgument("empty --data spec; allowed forms: " + std::string(kEvalForms));
  }

  if (base == "brown" || base == "synthetic") {
    DataOptions o = defaults;
    o.source = base;
    TENAX_ASSIGN_OR_RETURN(DataSplits s, OpenDataSource(o));
    return train ? s.train : s.val;
  }
  if (HasSuffix(base, ".bin") && !LocalFs().Exists(JoinPath(base, "meta.json"))) {
    if (want_train) {
      return InvalidArgument("--data " + spec + ": a single shard has no splits; drop the \":" +
                             (train ? "train" : "val") + "\" suffix");
    }
    return OpenTokenFiles(base, FileOptions(defaults, "--data"));
  }
  if (!LocalFs().Exists(base)) {
    return NotFound("--data " + spec + ": " + base +
                    " does not exist; allowed forms: " + kEvalForms);
  }
  Result<PreparedData> d = OpenPrepared(base);
  if (!d.ok()) {
    return d.status().WithContext("--data " + spec + " (allowed forms: " + kEvalForms + ")");
  }
  return train ? d->train : d->val;
}

}  // namespace tenax::data
