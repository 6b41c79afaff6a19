// Data sources: the one entry point the trainer and the CLI use to get token streams.
//   data.source = "brown"     -> the Brown corpus, prepared once into data.cache_dir (brown.h)
//               = "synthetic" -> a Markov chain with a known entropy rate, in memory (synthetic.h)
//               = "shards"    -> a folder written by `tenax prepare` (data.path; prepare.h)
//               = "tokens"    -> token files read directly: tenax shards, llm.c or nanoGPT .bin
//                                (data.path and data.val_path, paths or globs; token_file.h)
// Non-goals: mixing sources, streaming from remote storage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/data/token_stream.h"

namespace tenax::data {

struct DataSplits {
  TokenStream train;
  TokenStream val;
  uint32_t vocab_size = 0;
  std::optional<uint32_t> eos;
  std::optional<uint32_t> bos;
  // Tokenizer spec that decodes these ids ("byte", "tiktoken:PATH", ...); empty for synthetic,
  // whose ids are not text, and for token files, which do not name their tokenizer.
  std::string tokenizer;
  std::string description;  // one line for the run log
  // Synthetic only: the exact entropy rate, i.e. the lowest achievable loss in nats per token.
  std::optional<double> entropy_rate_nats;
};

// Unknown source: InvalidArgument listing the allowed values.
Result<DataSplits> OpenDataSource(const DataOptions& options);

// For `tenax eval --data SPEC`. Forms:
//   brown | brown:val | brown:train            (prepared via `defaults`' tokenizer and cache_dir)
//   synthetic | synthetic:val | synthetic:train (with `defaults.synthetic`)
//   DIR | DIR:val | DIR:train                  (a folder written by `tenax prepare`)
//   FILE.bin                                   (one token file: tenax shard or llm.c; with
//                                               `defaults`' token_format and vocab_size)
// A form without a split means validation.
Result<TokenStream> OpenEvalSpec(const std::string& spec, const DataOptions& defaults);

}  // namespace tenax::data
