// Prepared data: a folder holding a tokenized corpus split into train and validation shards,
// written by `tenax prepare` (text and JSON Lines files, optionally gzip/zstd-compressed, and
// Parquet files: data/parquet_input.h) and by
// the built-in Brown source (data/brown.h):
//   DIR/train.bin  DIR/val.bin  (token shards, data/shard.h)
//   DIR/meta.json              (tokenizer, vocabulary, counts, sources; written last)
// meta.json is the commit marker: it is written only after both shards are durable, and a
// folder without it is not a prepared folder. docs/data_format.md specifies both files.
//
// Documents: a text file is one document; a JSON Lines file holds one document per non-blank
// line (the string in its text field); a Parquet file one per row (the string in its text
// column; rows whose text is null are left out, with a warning). Every document is written as [BOS]
// ids [EOS], with the tokenizer's bos()/eos() where it has them (Llama 3: both; byte and
// SentencePiece: EOS only), so a model learns where documents start and end and a split never glues
// two documents together.
//
// Split rule (fixed, so every run and every machine agrees on what is validation data):
//   * >= 20 documents: document i (0-based, in input order) is validation iff i % 20 == 19.
//   * <  20 documents: the token stream of all documents is cut, and its last
//     max(ceil(n / 20), min(256, n / 2)) tokens are validation: 5%, but a span of a few hundred
//     tokens when the corpus allows it, so small corpora still get a meaningful val loss.
//
// Streaming: inputs are read by one thread, tokenized by `threads` workers and written in input
// order by the calling thread, with a bounded number of ~1 MB work items in flight, so memory does
// not grow with the corpus. A long text document is tokenized in parts cut after a line break
// when the tokenizer gives the same ids that way (Tokenizer::SplitsAtLineStarts); otherwise, and
// for one line of JSON, a document is held whole. Output is atomic: the shards are written under
// temporary names and the folder's previous contents stay valid until the new shards are
// complete; an interrupted prepare leaves the old folder (or none), never a mix.
// Non-goals: deduplication, filtering, multiple shards per split, resuming a half-done prepare.
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
  std::string name;  // file name, recorded in meta.json
  std::string text;
};

struct SplitCounts {
  int64_t tokens = 0;     // including BOS/EOS tokens
  int64_t documents = 0;  // documents with at least one token in this split
};

// The contents of meta.json.
struct PreparedMeta {
  std::string source;          // "brown" or "text"
  std::string tokenizer;       // spec, e.g. "byte" or "tiktoken:PATH"
  std::string tokenizer_slug;  // Tokenizer::cache_slug()
  uint32_t vocab_size = 0;
  std::optional<uint32_t> eos;
  std::optional<uint32_t> bos;  // version 2; null in version 1
  std::string split_rule;       // "document-mod-20" or "tail-tokens"
  int64_t words = 0;            // whitespace-separated words in all documents
  int64_t bytes = 0;            // UTF-8 bytes of all documents' text (version 2; 0 in version 1)
  SplitCounts train;
  SplitCounts val;
  std::vector<std::string> sources;  // input files (Brown: corpus file names), in order
};

struct PreparedData {
  std::string dir;
  PreparedMeta meta;
  TokenStream train;
  TokenStream val;
};

struct PrepareOptions {
  std::string source = "text";      // meta.json's "source"
  std::string text_field = "text";  // the JSON Lines field / Parquet column holding the text
  int threads = 0;                  // tokenizing threads; 0 = one per core
  bool progress = false;            // a progress line on stderr (MB/s, tokens/s)
};

// The split rule above, exposed for tests and docs.
bool IsValidationDocument(int64_t index, int64_t num_documents);
int64_t TailValidationTokens(int64_t total_tokens);

// Tokenizes the input files, splits them and writes the prepared layout into out_dir (created if
// missing). Returns what it wrote to meta.json. Fails, before writing anything, if an input is
// missing or a Parquet input is unreadable or lacks a text column named text_field; fails if the
// corpus yields fewer than 2 tokens.
Result<PreparedMeta> PrepareFiles(const std::vector<std::string>& inputs,
                                  const Tokenizer& tokenizer, const std::string& out_dir,
                                  const PrepareOptions& options = {});

// The same for documents already in memory (each one document).
Result<PreparedMeta> PrepareDocuments(const std::vector<Document>& docs, const Tokenizer& tokenizer,
                                      const std::string& out_dir, const std::string& source,
                                      int threads = 0);

// The earlier entry point (PrepareFiles with default options), kept so callers of it (the CLI
// being split) keep building.
Status Prepare(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
               const std::string& out_dir);

// `tenax prepare --input FILE... --tokenizer SPEC --out DIR`: makes the tokenizer, prepares, and
// prints a one-line summary on stdout.
Status PrepareCommand(const std::vector<std::string>& inputs, const std::string& tokenizer_spec,
                      const std::string& out_dir, const PrepareOptions& options);

// Parses and validates DIR/meta.json (versions 1 and 2).
Result<PreparedMeta> ReadPreparedMeta(const std::string& dir);

// Opens both shards and checks them against meta.json (sizes, vocabulary, eos, bos).
Result<PreparedData> OpenPrepared(const std::string& dir);

}  // namespace tenax::data
