// `tenax tokenize --tokenizer SPEC`: token ids of text on stdin, one JSON list per line, so a
// tokenizer can be compared with other implementations (tiktoken, Hugging Face,
// llama3-tokenizer-js) with nothing but a pipe.
//   default       each input line (without its '\n') is one text
//   --json-input  each input line is a JSON string, so texts may hold newlines
//   --special     special-token text (<|eot_id|>) becomes the special token
//   --bos-eos     frame each text with the tokenizer's BOS/EOS, as `tenax prepare` does
// Non-goals: decoding, counting statistics.
#pragma once

#include <istream>
#include <ostream>
#include <string>

#include "tenax/core/status.h"
#include "tenax/data/tokenizer.h"

namespace tenax::data {

struct TokenizeOptions {
  bool json_input = false;
  bool special = false;
  bool bos_eos = false;
};

// Reads `in` to the end and writes one line per input line to `out`. A line that is not a JSON
// string under json_input is an error naming its number.
Status TokenizeStream(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                      const TokenizeOptions& options);

// The command: makes the tokenizer from `spec`, then stdin -> stdout.
Status TokenizeCommand(const std::string& spec, const TokenizeOptions& options);

}  // namespace tenax::data
