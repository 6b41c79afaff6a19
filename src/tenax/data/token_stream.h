// TokenStream: one read-only sequence of token ids, backed either by a memory-mapped shard or by
// an in-memory vector (the synthetic source). The loader and evaluation see only this type, so
// they never care where tokens came from.
// Non-goals: multi-shard concatenation (one prepared split is one shard), writing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tenax/data/shard.h"

namespace tenax::data {

// Copies are cheap and share the immutable backing storage, which lives as long as any copy.
// Thread safety: all methods are const and safe to call concurrently.
class TokenStream {
 public:
  // An empty stream (size 0, vocab 0): the state of a default-constructed member.
  TokenStream() = default;
  static TokenStream FromShard(ShardReader shard, std::string name);
  // Ids must be < vocab_size (checked: violating it is a bug in the producer).
  static TokenStream FromVector(std::vector<uint32_t> tokens, uint32_t vocab_size,
                                std::optional<uint32_t> eos, std::string name);

  int64_t size() const { return size_; }
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> eos() const { return eos_; }
  // Where the tokens came from, for messages ("brown val (data/cache/brown-byte-v1/val.bin)").
  const std::string& name() const { return name_; }

  // Token i; i must be in [0, size()) (checked).
  uint32_t at(int64_t i) const;
  // Tokens [start, start + count) widened to int64 (the dtype of token tensors); the range must
  // lie inside the stream (checked once, then a tight loop).
  void Read(int64_t start, int64_t count, int64_t* out) const;

 private:
  std::shared_ptr<const void> owner_;  // keeps the mapping or the vector alive
  const uint8_t* data_ = nullptr;      // first token, little-endian
  uint32_t width_ = 4;                 // bytes per token: 2 or 4
  int64_t size_ = 0;
  uint32_t vocab_size_ = 0;
  std::optional<uint32_t> eos_;
  std::string name_;
};

}  // namespace tenax::data
