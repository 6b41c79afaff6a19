// TokenStream: one read-only sequence of token ids, backed by memory-mapped files (tenax shards,
// llm.c or nanoGPT token files; several files read as their concatenation) or by an in-memory
// vector (the synthetic source). The loader and evaluation see only this type, so they never
// care where tokens came from.
// Non-goals: writing; files of different token widths in one stream.
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
  // A run of `size` tokens of `width` bytes at `data`, kept alive by `owner`.
  struct Segment {
    const uint8_t* data = nullptr;
    int64_t size = 0;
  };

  // An empty stream (size 0, vocab 0): the state of a default-constructed member.
  TokenStream() = default;
  static TokenStream FromShard(ShardReader shard, std::string name);
  // Ids must be < vocab_size (checked: violating it is a bug in the producer).
  static TokenStream FromVector(std::vector<uint32_t> tokens, uint32_t vocab_size,
                                std::optional<uint32_t> eos, std::string name);
  // The concatenation of `segments` (validated by the caller), all `width` bytes per token.
  static TokenStream FromSegments(std::shared_ptr<const void> owner, std::vector<Segment> segments,
                                  uint32_t width, uint32_t vocab_size, std::optional<uint32_t> eos,
                                  std::optional<uint32_t> bos, std::string name);

  int64_t size() const { return size_; }
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> eos() const { return eos_; }
  std::optional<uint32_t> bos() const { return bos_; }
  // Where the tokens came from, for messages ("brown val (data/cache/brown-byte-v2/val.bin)").
  const std::string& name() const { return name_; }

  // Token i; i must be in [0, size()) (checked).
  uint32_t at(int64_t i) const;
  // Tokens [start, start + count) widened to int64 (the dtype of token tensors); the range must
  // lie inside the stream (checked once, then a tight loop per segment).
  void Read(int64_t start, int64_t count, int64_t* out) const;

 private:
  // Index of the segment holding token i.
  size_t SegmentOf(int64_t i) const;

  std::shared_ptr<const void> owner_;  // keeps the mappings or the vector alive
  std::vector<Segment> segments_;      // in order; usually one
  std::vector<int64_t> starts_;        // first global index of each segment
  uint32_t width_ = 4;                 // bytes per token: 2 or 4
  int64_t size_ = 0;
  uint32_t vocab_size_ = 0;
  std::optional<uint32_t> eos_;
  std::optional<uint32_t> bos_;
  std::string name_;
};

}  // namespace tenax::data
