// Token files read directly, without `tenax prepare` (data.source = "tokens", and
// `tenax eval --data FILE.bin`). Three formats (docs/data_format.md has the byte layouts):
//   tenax    a tenax token shard (magic "TENAXTOK"; shard.h)
//   llmc     llm.c's dev/data files: a 256 x int32 header (magic 20240520, version, num_tokens)
//            then the ids; version 1 = uint16 GPT-2 ids (vocabulary 50,257, <|endoftext|> = 50256
//            before each document), version 2 = uint32 Llama 3 ids (vocabulary 128,256,
//            <|begin_of_text|> = 128000 before each document)
//   nanogpt  nanoGPT's data/*/prepare.py output: raw uint16 ids, no header; the vocabulary size
//            must be given (50,257 for GPT-2 ids, meta.pkl's vocab_size for character data)
// "auto" tells tenax and llm.c files apart by their magic; a file with neither is refused with a
// message naming the setting that reads it as nanoGPT (a headerless file cannot be recognised).
// Every id is checked against the vocabulary when the file is opened.
// Non-goals: writing these formats, numpy .npy files, remote storage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/data/token_stream.h"

namespace tenax::data {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;

struct TokenFileOptions {
  std::string format = "auto";  // auto | tenax | llmc | nanogpt (data.token_format)
  uint32_t vocab_size = 0;      // 0: the format's (llm.c: by version; tenax: the header)
  // Config key or flag that named the files, for messages ("data.path").
  std::string key = "data.path";
};

// The files a path names: the path itself, or the sorted matches of a glob pattern (* ? [...]).
// NotFound (naming options.key) when nothing matches.
Result<std::vector<std::string>> ExpandTokenPaths(const std::string& pattern,
                                                  const std::string& key);

// Opens every file `pattern` names and returns their concatenation. All files must agree on
// token width, vocabulary size and separators.
Result<TokenStream> OpenTokenFiles(const std::string& pattern, const TokenFileOptions& options);

// Writes an llm.c token file (version 1 when every id fits in uint16 and wide is false, else 2);
// for tests and for users converting data. Written atomically.
Status WriteLlmcFile(const std::string& path, const std::vector<uint32_t>& ids, bool wide);

}  // namespace tenax::data
