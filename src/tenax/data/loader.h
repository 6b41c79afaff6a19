// Batch loaders over a TokenStream.
//
// BatchLoader (training): the stream is cut into W = floor((size - 1) / T) windows of T + 1
// tokens at stride T (window w = tokens [w*T, w*T + T]; inputs are its first T tokens, targets
// its last T), so each epoch predicts every token in [1, W*T] exactly once. Each epoch visits the
// windows in a Fisher-Yates permutation that depends only on (seed, epoch), drawn with tenax's
// portable PRNG, so the order is the same on every machine.
//
// Position and ranks: position() counts windows consumed by all ranks together; global window
// index g maps to epoch g / W and slot g % W of that epoch's permutation. Each global step
// consumes B * world windows and rank r takes the r-th contiguous block of B:
//   rank r's batch at position p = global windows [p + r*B, p + (r+1)*B), then p += B * world.
// Every rank therefore holds the same position, which is the single number a checkpoint saves;
// Seek(p) on a fresh loader continues exactly where a loader at position p would have. An
// optimizer step of A micro-batches consumes the global batch G = A * B * world windows [p, p + G),
// however they are dealt out, so a run resumed on another number of ranks with the same G (the
// trainer re-derives A; config/batch.h) sees the same samples in the same steps.
//
// EvalLoader (validation): windows 0, 1, 2, ... in order, no shuffle, capped to cover at most
// max_tokens targets. With world > 1 the window count is rounded down to a multiple of world and
// rank r takes windows r, r + world, ...: every rank runs the same number of batches, which
// collectives inside the forward pass require.
// Non-goals: document-aware packing or attention masks (windows cross EOS tokens like GPT-2
// pretraining does), background prefetch (a batch is a few memcpy's of an mmap).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/data/token_stream.h"

namespace tenax::data {

struct Batch {
  std::vector<int64_t> inputs;   // (batch, seq_len) row-major
  std::vector<int64_t> targets;  // (batch, seq_len) row-major: inputs shifted left by one
  int64_t batch = 0;
  int64_t seq_len = 0;
};

// Not thread-safe (it advances a position); one loader per rank.
class BatchLoader {
 public:
  // Fails if the stream is shorter than one window or any argument is out of range.
  static Result<BatchLoader> Create(TokenStream stream, int64_t seq_len, int64_t batch_size,
                                    uint64_t seed, int64_t rank = 0, int64_t world = 1);

  // This rank's next batch; advances position() by batch_size * world.
  Batch Next();
  int64_t position() const { return position_; }
  // Continue from `position` (as saved from position()); position must be >= 0.
  void Seek(int64_t position);
  // The batch rank `rank` (of this loader's world) takes at `position`, without moving this
  // loader: live recovery runs a lost rank's samples on another (train/trainer_live.cc).
  Batch BatchOf(int64_t position, int64_t rank);

  int64_t windows_per_epoch() const { return windows_; }
  int64_t epoch() const { return position_ / windows_; }  // of the next window to be consumed
  // Global window index g -> window (its first token is window * seq_len); for tests.
  int64_t WindowAt(int64_t g);

 private:
  BatchLoader() = default;
  const std::vector<int64_t>& Permutation(int64_t epoch);

  // Constant after construction.
  TokenStream stream_;
  int64_t seq_len_ = 0;
  int64_t batch_ = 0;
  uint64_t seed_ = 0;
  int64_t rank_ = 0;
  int64_t world_ = 1;
  int64_t windows_ = 0;
  // Mutable state.
  int64_t position_ = 0;
  // Two cached epochs: a batch that straddles an epoch boundary alternates between them.
  int64_t cached_epoch_[2] = {-1, -1};
  std::vector<int64_t> cached_perm_[2];
};

// The permutation of [0, n) used for `epoch` (Fisher-Yates on Rng(DeriveSeed(seed, epoch))).
std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n);

class EvalLoader {
 public:
  static Result<EvalLoader> Create(TokenStream stream, int64_t seq_len, int64_t batch_size,
                                   int64_t max_tokens, int64_t rank = 0, int64_t world = 1);
  // The next batch (the last may hold fewer than batch_size rows), or nullopt when done.
  std::optional<Batch> Next();
  void Reset() { next_ = 0; }
  // Windows this rank evaluates per pass; their targets total num_windows() * seq_len tokens.
  int64_t num_windows() const { return per_rank_; }

 private:
  EvalLoader() = default;

  TokenStream stream_;
  int64_t seq_len_ = 0;
  int64_t batch_ = 0;
  int64_t rank_ = 0;
  int64_t world_ = 1;
  int64_t per_rank_ = 0;
  int64_t next_ = 0;  // index into this rank's windows
};

}  // namespace tenax::data
