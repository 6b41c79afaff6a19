#include "tenax/data/token_stream.h"

#include <algorithm>
#include <cstring>

#include "tenax/core/check.h"

namespace tenax::data {

TokenStream TokenStream::FromShard(ShardReader shard, std::string name) {
  auto owned = std::make_shared<const ShardReader>(std::move(shard));
  const ShardReader& r = *owned;
  return FromSegments(owned, {{r.token_data(), r.num_tokens()}}, r.token_width(), r.vocab_size(),
                      r.eos(), r.bos(), std::move(name));
}

TokenStream TokenStream::FromVector(std::vector<uint32_t> tokens, uint32_t vocab_size,
                                    std::optional<uint32_t> eos, std::string name) {
  for (uint32_t t : tokens) TENAX_CHECK(t < vocab_size);
  TENAX_CHECK(!eos || *eos < vocab_size);
  auto owned = std::make_shared<const std::vector<uint32_t>>(std::move(tokens));
  const std::vector<uint32_t>& v = *owned;
  return FromSegments(
      owned, {{reinterpret_cast<const uint8_t*>(v.data()), static_cast<int64_t>(v.size())}}, 4,
      vocab_size, eos, std::nullopt, std::move(name));
}

TokenStream TokenStream::FromSegments(std::shared_ptr<const void> owner,
                                      std::vector<Segment> segments, uint32_t width,
                                      uint32_t vocab_size, std::optional<uint32_t> eos,
                                      std::optional<uint32_t> bos, std::string name) {
  TENAX_CHECK(width == 2 || width == 4);
  TokenStream s;
  s.owner_ = std::move(owner);
  for (const Segment& seg : segments) {
    if (seg.size == 0) continue;  // keeps SegmentOf's search free of empty runs
    s.starts_.push_back(s.size_);
    s.segments_.push_back(seg);
    s.size_ += seg.size;
  }
  s.width_ = width;
  s.vocab_size_ = vocab_size;
  s.eos_ = eos;
  s.bos_ = bos;
  s.name_ = std::move(name);
  return s;
}

size_t TokenStream::SegmentOf(int64_t i) const {
  if (segments_.size() == 1) return 0;
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) -
                             starts_.begin()) -
         1;
}

uint32_t TokenStream::at(int64_t i) const {
  TENAX_CHECK(i >= 0 && i < size_);
  const size_t k = SegmentOf(i);
  return LoadToken(segments_[k].data, width_, i - starts_[k]);
}

void TokenStream::Read(int64_t start, int64_t count, int64_t* out) const {
  TENAX_CHECK(start >= 0 && count >= 0 && start + count <= size_);
  if (count == 0) return;
  for (size_t k = SegmentOf(start); count > 0; ++k) {
    const int64_t offset = start - starts_[k];
    const int64_t n = std::min(count, segments_[k].size - offset);
    const uint8_t* p = segments_[k].data + static_cast<size_t>(offset) * width_;
    if (width_ == 2) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + i * 2, 2);
        out[i] = v;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        uint32_t v;
        std::memcpy(&v, p + i * 4, 4);
        out[i] = v;
      }
    }
    out += n;
    start += n;
    count -= n;
  }
}

}  // namespace tenax::data
