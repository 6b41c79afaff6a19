// Prepared data: a folder holding a tokenized corpus split into train and validation shards,
// written by `tenax prepare` (text files) and by the built-in Brown source (data/brown.h):
//   DIR/train.bin  DIR/val.bin  (token shards, data/shard.h)
//   DIR/meta.json              (tokenizer, vocabulary, counts, sources; written last)
// meta.json is the commit marker: it is written only after both shards are durable, and a
// folder without it is not a prepared folder. docs/data_format.md specifies both files.
//
// Split rule (fixed, so every run and every machine agrees on what is validation data):
//   * >= 20 documents: document i (0-based, in input order) is validation iff i % 20 == 19.
//   * <  20 documents: the token stream of all documents is cut, and its last
//     max(ceil(n / 20), min(256, n / 2)) tokens are validation: 5%, but a span of a few hundred
//     tokens when the corpus allows it, so small corpora still get a meaningful val loss.
// Every document is followed by the tokenizer's EOS id (if it has one), so a model learns where
// documents end and a split never glues two documents together without a separator.
// Non-goals: streaming corpora larger than memory, deduplication, multiple shards per split.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"
#include "tenax/data/token_stream.h"
#include "tenax/data/tokenizer.h"

namespace tenax::data {

struct Document {
  std::string name;  // file name or path, recorded in meta.json
  std::string text;
};

struct SplitCounts {
  int64_t tokens = 0;     // including EOS tokens
  int64_t documents = 0;  // documents with at least one token in this split
};

// The contents of meta.json.
struct PreparedMeta {
  std::string source;          // "brown" or "text"
  std::string tokenizer;       // spec, e.g. "byte" or "sentencepiece:PATH"
  std::string tokenizer_slug;  // Tokenizer::cache_slug()
  uint32_t vocab_size = 0;
  std::optional<uint32_t> eos;
  std::string split_rule;      // "document-mod-20" or "tail-tokens"
  int64_t words = 0;           // whitespace-separated words in all documents
  SplitCounts train;
  SplitCounts val;
  std::vector<std::string> sources;  // document names, in order
};

struct PreparedData {
  std::string dir;
  PreparedMeta meta;
  TokenStream train;
  TokenStream val;
};

// The split rule above, exposed for tests and docs.
bool IsValidationDocument(int64_t index, int64_t num_documents);
int64_t TailValidationTokens(int64_t total_tokens);

// Tokenizes `docs`, splits them and writes the prepared layout into out_dir (created if
// missing). Returns what it wrote to meta.json. Fails if the corpus has fewer than 2 tokens.
Result<PreparedMeta> PrepareDocuments(const std::vector<Document>& docs, const Tokenizer& tokenizer,
                                      const std::string& out_dir, const std::string& source,
                                      FileSystem& fs = LocalFs());

// `tenax prepare --input FILE... --tokenizer SPEC --out DIR`: each input file is one document.
Status Prepare(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
               const std::string& out_dir);

// Parses and validates DIR/meta.json.
Result<PreparedMeta> ReadPreparedMeta(const std::string& dir);

// Opens both shards and checks them against meta.json (sizes, vocabulary, eos).
Result<PreparedData> OpenPrepared(const std::string& dir);

}  // namespace tenax::data
