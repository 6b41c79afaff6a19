// How context parallelism (parallel/context_parallel.h) cuts a sequence: pure arithmetic, shared
// by the mesh's checks, the model's RoPE positions and the tests.
//
// Load balance (the head-tail layout of torchtitan and of Llama 3's context parallelism): a
// sequence of T tokens is cut into 2N chunks of T / (2N); rank r of N holds chunk r (from the
// head) and chunk 2N-1-r (from the tail), in that order. Under causal attention, chunk c attends
// to c + 1 chunks' worth of keys, so every rank's two chunks cost (r + 1) + (2N - r) = 2N + 1
// half-blocks: equal work on every rank, where N contiguous pieces would leave the last rank with
// 2N - 1 times the first one's work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"

namespace tenax::parallel {

// The two chunks of rank `rank` of `size`: tokens [head * chunk, (head + 1) * chunk) then
// [tail * chunk, (tail + 1) * chunk) of the full sequence.
struct ContextChunks {
  int64_t chunk = 0;  // tokens per chunk: seq_len / (2 size)
  int64_t head = 0;   // rank
  int64_t tail = 0;   // 2 size - 1 - rank
};
inline ContextChunks ContextChunksOf(int64_t seq_len, int rank, int size) {
  return {seq_len / (2 * size), rank, 2 * static_cast<int64_t>(size) - 1 - rank};
}

// What stops `spec` from training with context_parallel = cp (and tensor_parallel = tp) at
// sequence length seq_len, each naming the factors and the fix; empty when it fits.
std::vector<std::string> ContextParallelProblems(const ModelSpec& spec, int64_t cp, int64_t tp,
                                                 int64_t seq_len);

}  // namespace tenax::parallel
