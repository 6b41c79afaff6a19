// Tokenizers turn document text into token ids and back. Two exist: ByteTokenizer (ids 0..255
// are the bytes, 256 is the end-of-document token) and SentencePieceTokenizer (a trained .model
// file), which runs in the helper program tenax-spm because Debian's libsentencepiece and
// libtorch cannot share a process (see sentencepiece_tokenizer.cc).
// A tokenizer is named by a spec string, the same one stored in a prepared folder's meta.json:
//   "byte" | "sentencepiece:PATH"
// Non-goals: training tokenizers (use spm_train), special-token parsing inside text, BOS
// handling (documents are separated by EOS only).
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
  // The end-of-document id, if the tokenizer has one.
  virtual std::optional<uint32_t> eos() const = 0;
  // The spec that recreates this tokenizer: "byte" or "sentencepiece:PATH".
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
  std::string name() const override { return "byte"; }
  std::string cache_slug() const override { return "byte"; }
};

// Loads a SentencePiece model through tenax-spm; when tenax-spm is missing the error says how to
// build it.
Result<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(const std::string& model_path);

// "byte" or "sentencepiece:PATH"; anything else is an error listing the allowed forms.
Result<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& spec);

// tenax-spm: $TENAX_SPM if set, else beside the running executable or one folder up (build/ for
// build/tests/*), else in PATH. NotFound says how to build it.
Result<std::string> FindSpmBinary();
// Whether SentencePiece models can be loaded (tenax-spm was found).
bool HaveSentencePiece();

}  // namespace tenax::data
