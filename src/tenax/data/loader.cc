#include "tenax/data/loader.h"

#include <algorithm>
#include <string>
#include <utility>

#include "tenax/core/check.h"
#include "tenax/core/random.h"

namespace tenax::data {
namespace {

Status CheckShape(const TokenStream& stream, int64_t seq_len, int64_t batch_size, int64_t rank,
                  int64_t world) {
  if (seq_len < 1 || batch_size < 1) {
    return InvalidArgument("seq_len (" + std::to_string(seq_len) + ") and batch size (" +
                           std::to_string(batch_size) + ") must both be at least 1");
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return InvalidArgument("rank " + std::to_string(rank) + " is outside world size " +
                           std::to_string(world));
  }
  if (stream.size() < seq_len + 1) {
    return InvalidArgument(
        "the data stream " + stream.name() + " holds " + std::to_string(stream.size()) +
        " tokens, fewer than one window of seq_len + 1 = " + std::to_string(seq_len + 1) +
        "; use a smaller training.seq_len (at most " +
        std::to_string(std::max<int64_t>(stream.size() - 1, 0)) + ") or more data");
  }
  return Status::Ok();
}

void FillRow(const TokenStream& stream, int64_t window, int64_t seq_len, Batch* b, int64_t row) {
  const int64_t start = window * seq_len;
  stream.Read(start, seq_len, b->inputs.data() + row * seq_len);
  stream.Read(start + 1, seq_len, b->targets.data() + row * seq_len);
}

Batch EmptyBatch(int64_t rows, int64_t seq_len) {
  Batch b;
  b.batch = rows;
  b.seq_len = seq_len;
  b.inputs.resize(static_cast<size_t>(rows * seq_len));
  b.targets.resize(static_cast<size_t>(rows * seq_len));
  return b;
}

}  // namespace

std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  Rng rng(DeriveSeed(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i + 1)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

Result<BatchLoader> BatchLoader::Create(TokenStream stream, int64_t seq_len, int64_t batch_size,
                                        uint64_t seed, int64_t rank, int64_t world) {
  TENAX_RETURN_IF_ERROR(CheckShape(stream, seq_len, batch_size, rank, world));
  BatchLoader l;
  l.windows_ = (stream.size() - 1) / seq_len;
  l.stream_ = std::move(stream);
  l.seq_len_ = seq_len;
  l.batch_ = batch_size;
  l.seed_ = seed;
  l.rank_ = rank;
  l.world_ = world;
  return l;
}

const std::vector<int64_t>& BatchLoader::Permutation(int64_t epoch) {
  for (int i = 0; i < 2; ++i) {
    if (cached_epoch_[i] == epoch) return cached_perm_[i];
  }
  // Replace the older of the two entries (the smaller epoch: positions only move forward
  // between seeks).
  const int slot = cached_epoch_[0] <= cached_epoch_[1] ? 0 : 1;
  cached_epoch_[slot] = epoch;
  cached_perm_[slot] = EpochPermutation(seed_, epoch, windows_);
  return cached_perm_[slot];
}

int64_t BatchLoader::WindowAt(int64_t g) {
  TENAX_CHECK(g >= 0);
  return Permutation(g / windows_)[static_cast<size_t>(g % windows_)];
}

Batch BatchLoader::Next() {
  Batch b = BatchOf(position_, rank_);
  position_ += batch_ * world_;
  return b;
}

Batch BatchLoader::BatchOf(int64_t position, int64_t rank) {
  TENAX_CHECK(position >= 0 && rank >= 0 && rank < world_);
  Batch b = EmptyBatch(batch_, seq_len_);
  const int64_t first = position + rank * batch_;
  for (int64_t row = 0; row < batch_; ++row) {
    FillRow(stream_, WindowAt(first + row), seq_len_, &b, row);
  }
  return b;
}

void BatchLoader::Seek(int64_t position) {
  TENAX_CHECK(position >= 0);
  position_ = position;
}

Result<EvalLoader> EvalLoader::Create(TokenStream stream, int64_t seq_len, int64_t batch_size,
                                      int64_t max_tokens, int64_t rank, int64_t world) {
  TENAX_RETURN_IF_ERROR(CheckShape(stream, seq_len, batch_size, rank, world));
  if (max_tokens < 1) {
    return InvalidArgument("evaluation token budget must be at least 1, got " +
                           std::to_string(max_tokens));
  }
  const int64_t available = (stream.size() - 1) / seq_len;
  // At least one window: a budget below seq_len still evaluates something.
  int64_t total = std::min(available, std::max<int64_t>(1, max_tokens / seq_len));
  total = total / world * world;
  if (total == 0) {
    return InvalidArgument(
        "the evaluation stream " + stream.name() + " holds " + std::to_string(available) +
        " windows of seq_len + 1 = " + std::to_string(seq_len + 1) + " tokens, fewer than the " +
        std::to_string(world) + " ranks that must each evaluate one; use a smaller seq_len");
  }
  EvalLoader l;
  l.stream_ = std::move(stream);
  l.seq_len_ = seq_len;
  l.batch_ = batch_size;
  l.rank_ = rank;
  l.world_ = world;
  l.per_rank_ = total / world;
  return l;
}

std::optional<Batch> EvalLoader::Next() {
  if (next_ >= per_rank_) return std::nullopt;
  const int64_t rows = std::min(batch_, per_rank_ - next_);
  Batch b = EmptyBatch(rows, seq_len_);
  for (int64_t row = 0; row < rows; ++row) {
    FillRow(stream_, (next_ + row) * world_ + rank_, seq_len_, &b, row);
  }
  next_ += rows;
  return b;
}

}  // namespace tenax::data
