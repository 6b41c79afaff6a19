#include "tenax/data/token_stream.h"

#include <cstring>

#include "tenax/core/check.h"

namespace tenax::data {

TokenStream TokenStream::FromShard(ShardReader shard, std::string name) {
  auto owned = std::make_shared<const ShardReader>(std::move(shard));
  TokenStream s;
  s.data_ = owned->token_data();
  s.width_ = owned->token_width();
  s.size_ = owned->num_tokens();
  s.vocab_size_ = owned->vocab_size();
  s.eos_ = owned->eos();
  s.name_ = std::move(name);
  s.owner_ = std::move(owned);
  return s;
}

TokenStream TokenStream::FromVector(std::vector<uint32_t> tokens, uint32_t vocab_size,
                                    std::optional<uint32_t> eos, std::string name) {
  for (uint32_t t : tokens) TENAX_CHECK(t < vocab_size);
  TENAX_CHECK(!eos || *eos < vocab_size);
  auto owned = std::make_shared<const std::vector<uint32_t>>(std::move(tokens));
  TokenStream s;
  s.data_ = reinterpret_cast<const uint8_t*>(owned->data());
  s.width_ = 4;
  s.size_ = static_cast<int64_t>(owned->size());
  s.vocab_size_ = vocab_size;
  s.eos_ = eos;
  s.name_ = std::move(name);
  s.owner_ = std::move(owned);
  return s;
}

uint32_t TokenStream::at(int64_t i) const {
  TENAX_CHECK(i >= 0 && i < size_);
  return LoadToken(data_, width_, i);
}

void TokenStream::Read(int64_t start, int64_t count, int64_t* out) const {
  TENAX_CHECK(start >= 0 && count >= 0 && start + count <= size_);
  const uint8_t* p = data_ + static_cast<size_t>(start) * width_;
  if (width_ == 2) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, p + i * 2, 2);
      out[i] = v;
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t v;
      std::memcpy(&v, p + i * 4, 4);
      out[i] = v;
    }
  }
}

}  // namespace tenax::data
