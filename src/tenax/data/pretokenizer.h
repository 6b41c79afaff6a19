// Pretokenizer: splits text into the pieces a byte-level BPE encodes one at a time, with the
// regular expression the tokenizer was trained with (Llama 3's, GPT-2's, or the one a Hugging Face
// tokenizer.json names). Matching runs on Debian's PCRE2 (JIT-compiled, UTF-8 mode).
//
// Regex dialect. Patterns are written for Rust's regex crate (tiktoken) or Oniguruma (Hugging Face
// tokenizers); PCRE2 reads them the same way except for \s, whose Unicode meaning differs between
// engines. \s and \S are therefore rewritten into the explicit Unicode White_Space set (the Rust
// and Oniguruma meaning: U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028,
// U+2029, U+202F, U+205F, U+3000). Case-insensitive groups fold with Unicode rules, so (?i:'s)
// also matches "'ſ" (U+017F), as Rust's regex does. \p{L} and \p{N} follow PCRE2's Unicode tables
// (Unicode 14 in Debian 12's PCRE2 10.42); code points assigned after that are not letters here.
//
// Invalid UTF-8: bytes that are not part of a valid character are never matched; each maximal run
// of them becomes a piece of its own, so every input byte lands in exactly one piece and encoding
// stays lossless (Python tokenizers never see such bytes: they decode text first).
//
// Non-goals: other regex dialect differences (lookbehind, Oniguruma-only syntax fails to compile
// with a message), normalisation (NFC etc.), splitting on special tokens (bpe_tokenizer.h does).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tenax/core/status.h"

namespace tenax::data {

// Llama 3's pre-tokenizer (tiktoken's pat_str for Llama 3, also in its tokenizer.json).
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's (Hugging Face ByteLevel pre-tokenizer with use_regex = true).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Whether this build has PCRE2 (the CMake option; without it Create says how to enable it).
bool HavePcre2();

// The pattern with \s and \S replaced by the explicit White_Space class (see above). Fails on a
// \S inside a character class, which has no class-member equivalent.
Result<std::string> RewriteWhitespaceClasses(std::string_view pattern);

// Thread safety: immutable after Create; Split may run concurrently from any number of threads.
class Pretokenizer {
 public:
  static Result<std::unique_ptr<Pretokenizer>> Create(std::string_view pattern);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls `piece` for each piece of `text`, in order; the pieces concatenate to `text` exactly.
  // Fails only on a regex engine error (e.g. a resource limit), never on the text.
  Status Split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  explicit Pretokenizer(std::string pattern);

  // Constant after construction.
  const std::string pattern_;  // as given (before the \s rewrite)
  std::unique_ptr<Impl> impl_;
};

}  // namespace tenax::data
