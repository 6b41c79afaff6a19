// Tokenizers turn document text into token ids and back:
//   * ByteTokenizer: ids 0..255 are the bytes, 256 is the end-of-document token.
//   * byte-level BPE (bpe_tokenizer.h): Llama 3's tiktoken file or a Hugging Face tokenizer.json.
//   * SentencePieceTokenizer (a trained .model file), which runs in the helper program tenax-spm
//     because Debian's libsentencepiece and libtorch cannot share a process.
// A tokenizer is named by a spec string, the same one stored in a prepared folder's meta.json:
//   "byte" | "tiktoken:PATH" | "hf:PATH" | "sentencepiece:PATH"
// Documents are framed by bos() and eos() where the tokenizer has them (prepare.h): byte and
// SentencePiece use EOS only, Llama 3 both.
// Non-goals: training tokenizers (use spm_train), chat templates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::data {

// Thread safety: implementations are immutable after construction; concurrent calls are safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual uint32_t vocab_size() const = 0;
  // Ids of `text`, without any EOS (the caller places document separators). Fails only when
  // an out-of-process tokenizer cannot be run.
  virtual Result<std::vector<uint32_t>> Encode(std::string_view text) const = 0;
  // Text of `ids`. EOS decodes to nothing, and an id outside the vocabulary (a model whose
  // embedding is padded past vocab_size can sample one) decodes to U+FFFD rather than failing.
  virtual Result<std::string> Decode(const std::vector<uint32_t>& ids) const = 0;
  // Like Encode, but the text of a special token ("<|eot_id|>") becomes that token, as a chat
  // prompt needs; Encode keeps such text ordinary so documents cannot inject separators.
  // Tokenizers without special tokens encode as Encode does.
  virtual Result<std::vector<uint32_t>> EncodeWithSpecialTokens(std::string_view text) const {
    return Encode(text);
  }
  // The end-of-document id, if the tokenizer has one.
  virtual std::optional<uint32_t> eos() const = 0;
  // The beginning-of-document id placed before every document, if the tokenizer uses one.
  virtual std::optional<uint32_t> bos() const { return std::nullopt; }
  // Whether encoding a text in two parts cut right after a '\n' that is followed by a printable
  // ASCII character gives the same ids as encoding it whole, so `tenax prepare` may tokenize a
  // long document in parts. True for bytes and for Llama 3's pretokenizer (no match can cross such
  // a cut, and no lookahead is consulted there); false where unknown (SentencePiece adds a word
  // boundary at the start of every call).
  virtual bool SplitsAtLineStarts() const { return false; }
  // The spec that recreates this tokenizer, e.g. "byte" or "tiktoken:PATH".
  virtual std::string name() const = 0;
  // A file-name-safe key that changes whenever the ids would (e.g. the model file's contents),
  // used to name caches of prepared data.
  virtual std::string cache_slug() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kEos = 256;
  uint32_t vocab_size() const override { return 257; }
  Result<std::vector<uint32_t>> Encode(std::string_view text) const override;
  Result<std::string> Decode(const std::vector<uint32_t>& ids) const override;
  std::optional<uint32_t> eos() const override { return kEos; }
  bool SplitsAtLineStarts() const override { return true; }
  std::string name() const override { return "byte"; }
  std::string cache_slug() const override { return "byte"; }
};

// Loads a SentencePiece model through tenax-spm; when tenax-spm is missing the error says how to
// build it.
Result<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(const std::string& model_path);

// "byte", "tiktoken:PATH", "hf:PATH" or "sentencepiece:PATH"; anything else is an error listing
// the allowed forms.
Result<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& spec);

// tenax-spm: $TENAX_SPM if set, else beside the running executable or one folder up (build/ for
// build/tests/*), else in PATH. NotFound says how to build it.
Result<std::string> FindSpmBinary();
// Whether SentencePiece models can be loaded (tenax-spm was found).
bool HaveSentencePiece();

}  // namespace tenax::data
