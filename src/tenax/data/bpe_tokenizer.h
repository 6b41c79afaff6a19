// Byte-level BPE: the tokenizer family of Llama 3, GPT-2 and most models on the Hugging Face hub.
// Text is split into pieces by a regex (pretokenizer.h); each piece's UTF-8 bytes start as one
// token per byte and adjacent tokens are merged, lowest priority first (ties: leftmost), until
// no adjacent pair has a merge. Two ways to name the merges:
//   * ranks (tiktoken): a pair merges iff its concatenated bytes are a token; its priority is that
//     token's rank, which is also its id. tiktoken:FILE (tiktoken_file.cc) loads this form.
//   * merge list (Hugging Face tokenizer.json): pair (left id, right id) -> merged id, priority =
//     position in the list. hf:FILE (hf_tokenizer_json.cc) loads this form.
// With ignore_merges (Llama 3, and tiktoken always) a piece that is itself a token is emitted
// directly. Special tokens (<|begin_of_text|>, ...) are matched literally, and only by
// EncodeWithSpecialTokens: Encode treats their text as ordinary text, so a document quoting
// "<|end_of_text|>" cannot end itself early (tiktoken's encode_ordinary).
// Documents: BOS before and EOS after each document, as bos()/eos() say (prepare.h).
// Non-goals: SentencePiece-style BPE (Metaspace, byte fallback; use sentencepiece:MODEL),
// normalizers, dropout, training.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tenax/data/pretokenizer.h"
#include "tenax/data/tokenizer.h"

namespace tenax::data {

// Everything that defines a byte-level BPE tokenizer, as the loaders produce it.
struct BpeModel {
  std::string name;  // the spec that recreates it: "tiktoken:PATH" or "hf:PATH"
  std::string slug;  // Tokenizer::cache_slug()
  // Id -> bytes. Ordinary tokens hold raw bytes; special tokens hold their literal text; an empty
  // string is an unassigned id (decodes to U+FFFD).
  std::vector<std::string> tokens;
  std::vector<uint32_t> special_ids;  // ids in `tokens` that are special
  // Merge-list form: (left id, right id, merged id), highest priority first. Empty: rank form.
  std::vector<std::array<uint32_t, 3>> merges;
  bool ignore_merges = true;
  std::string pattern;            // pretokenizer regex
  bool add_prefix_space = false;  // Hugging Face ByteLevel: prepend ' ' unless text starts with one
  std::optional<uint32_t> bos;
  std::optional<uint32_t> eos;
};

// Thread safety: immutable after Create; every method may run concurrently.
class BpeTokenizer final : public Tokenizer {
 public:
  // Fails (naming the token) when the vocabulary cannot encode every byte, repeats a token, or a
  // merge does not concatenate its parts.
  static Result<std::unique_ptr<BpeTokenizer>> Create(BpeModel model);
  ~BpeTokenizer() override;

  uint32_t vocab_size() const override { return static_cast<uint32_t>(model_.tokens.size()); }
  Result<std::vector<uint32_t>> Encode(std::string_view text) const override;
  Result<std::vector<uint32_t>> EncodeWithSpecialTokens(std::string_view text) const override;
  Result<std::string> Decode(const std::vector<uint32_t>& ids) const override;
  std::optional<uint32_t> bos() const override { return model_.bos; }
  std::optional<uint32_t> eos() const override { return model_.eos; }
  bool SplitsAtLineStarts() const override {
    return model_.pattern == kLlama3Pattern && !model_.add_prefix_space;
  }
  std::string name() const override { return model_.name; }
  std::string cache_slug() const override { return model_.slug; }

  // The id of a special token's text, if it is one.
  std::optional<uint32_t> SpecialTokenId(std::string_view text) const;
  // BPE of one piece (no pretokenizer), appended to *out. use_heap picks the O(n log n) merge loop
  // that long pieces use instead of the O(n^2) one short pieces use; both give the same ids (the
  // tests check it).
  void EncodePiece(std::string_view piece, bool use_heap, std::vector<uint32_t>* out) const;

 private:
  struct Tables;
  explicit BpeTokenizer(BpeModel model);
  Status EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const;

  // Constant after construction.
  const BpeModel model_;
  std::unique_ptr<Pretokenizer> pretokenizer_;
  std::unique_ptr<Tables> tables_;
};

// tiktoken:FILE. Each line of FILE is "BASE64 RANK"; ranks must be 0..n-1, each once. Llama 3's
// 256 special tokens follow at ids n..n+255 (<|begin_of_text|> = n is BOS, <|end_of_text|> = n+1
// is EOS; names as in Llama 3.1), and the pretokenizer is Llama 3's. FILE may also be a folder
// holding tokenizer.model.
Result<std::unique_ptr<Tokenizer>> LoadTiktokenTokenizer(const std::string& path);
// The model LoadTiktokenTokenizer builds from PATH, unvalidated (for converting it to other forms,
// data/hf_tokenizer_files.h).
Result<BpeModel> ReadTiktokenModel(const std::string& path);

// hf:FILE. A Hugging Face tokenizer.json with a byte-level BPE model (Llama 3, GPT-2 style);
// FILE may be the folder holding it. BOS/EOS come from tokenizer_config.json beside it when
// present (bos_token unless add_bos_token is false, eos_token), else from the post-processor's
// template (BOS) and the usual names (<|end_of_text|>, <|endoftext|>, </s>). A BOS equal to the
// EOS (GPT-2's <|endoftext|>) is dropped, so documents are separated by one token.
Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path);

// The Llama 3.1 special tokens in id order (offset 0 = <|begin_of_text|>), 256 of them.
std::vector<std::string> Llama3SpecialTokens();

// Letters and digits of a path's file name (others become '-'), for cache slugs.
std::string SlugStem(const std::string& path);

}  // namespace tenax::data
