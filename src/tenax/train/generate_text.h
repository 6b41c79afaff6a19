// `tenax generate`: text from a trained model. Loads a tenax checkpoint or a Hugging Face folder
// and its tokenizer, encodes the prompt, samples with the KV-cache decoder (model/generate.h) and
// streams the text as tokens arrive.
//
// The tokenizer: --tokenizer SPEC when given; else the one the checkpoint records (the training
// data's, train/train_checkpoint.h) or, for an HF folder, its tokenizer.json. Prompts start where
// training documents start: after the BOS when the tokenizer has one (Llama 3), else after an EOS
// (byte, SentencePiece: documents are separated by EOS), unless `add_bos` is false. Generation
// stops at the EOS (HF folders: any of generation_config.json's eos_token_id) unless
// `stop_at_eos` is false.
// Streaming: a token that ends inside a UTF-8 character is held back until the character is
// complete, so the stream never shows half a character.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/model/generate.h"

namespace tenax::train {

struct GenerateRequest {
  std::string checkpoint;  // a tenax step or checkpoint folder, or
  std::string hf_dir;      // a Hugging Face folder (exactly one of the two)
  std::string prompt;      // text; special-token text such as <|eot_id|> becomes that token
  // Ids instead of text (no tokenizer needed, nothing prepended): for comparing with references.
  std::vector<int64_t> prompt_ids;
  std::string tokenizer;  // "" : as recorded
  bool add_bos = true;
  bool stop_at_eos = true;
  int64_t max_new_tokens = 64;
  model::SamplingOptions sampling;
  std::string device = "auto";  // auto | cpu | cuda
  bool use_cache = true;        // false: full recomputation per token (for checking the cache)
};

struct GenerateResult {
  std::vector<int64_t> prompt_ids;  // what the model was given, BOS included
  std::vector<int64_t> ids;         // the new tokens
  std::string text;                 // their text ("" without a tokenizer)
  double tokens_per_s = 0;          // new tokens per second of decoding (after the prompt)
};

// `on_text` receives the text as it becomes printable (may be empty: no streaming).
Result<GenerateResult> GenerateText(const GenerateRequest& request,
                                    const std::function<void(const std::string&)>& on_text = {});

// The length of the longest prefix of `s` that does not end inside a UTF-8 character.
size_t CompleteUtf8Prefix(const std::string& s);

}  // namespace tenax::train
