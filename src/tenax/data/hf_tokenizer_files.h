// The tokenizer files of a Hugging Face model folder, made from the tokenizer a run trained with,
// so that `tenax export-hf` writes a folder transformers' AutoTokenizer loads as is
// (PreTrainedTokenizerFast):
//   tiktoken:FILE  tokenizer.json converted from the ranks: the vocabulary in GPT-2's byte-level
//                  alphabet, and for every token of two or more bytes one merge per way of
//                  splitting it into two tokens, ordered by the token's rank, then by the parts'
//                  ranks (the conversion transformers' TikTokenConverter does; for Llama 3's file
//                  it reproduces Meta's tokenizer.json merges exactly); Llama 3's special tokens as
//                  added tokens, Llama 3's pre-tokenizer regex, a BOS post-processor; plus
//                  tokenizer_config.json and special_tokens_map.json naming BOS and EOS
//   hf:FILE        tokenizer.json as it is; tokenizer_config.json and special_tokens_map.json
//                  copied from beside it, or written from the BOS/EOS tenax uses when absent
//   byte, sentencepiece:FILE   none (no byte-level BPE form); the caller says so
// Non-goals: chat templates, slow (Python) tokenizer files, tokenizers other than byte-level BPE.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tenax/core/status.h"

namespace tenax::data {

struct HfTokenizerFiles {
  std::map<std::string, std::string> files;  // file name -> contents; empty: no HF form
  std::optional<uint32_t> bos;
  std::optional<uint32_t> eos;
  std::string note;  // why there are no files, when there are none
};

// For the tokenizer `spec` (tokenizer.h's forms). `model_max_length` goes into
// tokenizer_config.json when written here. Fails when the tokenizer's file cannot be read.
Result<HfTokenizerFiles> MakeHfTokenizerFiles(const std::string& spec, int64_t model_max_length);

// `spec` with a relative file path made absolute (against the working directory), so a spec
// recorded in a checkpoint still names the file from another directory. Other specs unchanged.
std::string AbsoluteTokenizerSpec(const std::string& spec);

}  // namespace tenax::data
