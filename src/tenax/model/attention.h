// Causal grouped-query attention (issue 17): the one function every attention layer calls
// (model::Attention, hence tensor parallel and the pipeline stages), and the paths it chooses
// between.
//   - libtorch >= 2.0 (the GPU build): at::scaled_dot_product_attention (flash / memory-efficient
//     kernels on CUDA), with enable_gqa from 2.5 on, else K and V expanded to H heads.
//   - libtorch 1.13 on CPU: K and V are never repeated. Short sequences use GroupedAttention (one
//     bmm per kv head for all its query heads, scores materialised); from kBlockwiseMinSeq on,
//     BlockwiseAttention (FlashAttention-2 style, the (T x T) scores never held).
//   - libtorch 1.13 on CUDA: the plain path (ReferenceAttention).
// Non-goals: attention masks other than causal, dropout, hand-written SIMD or GPU kernels (the
// blockwise path is at:: ops on blocks, so it runs anywhere, but on CUDA the fused kernels win).
//
// Shapes: B batch, T sequence, H query heads, K kv heads, G = H/K, D head dim. Query head h uses
// kv head h / G (G consecutive query heads share one kv head, as in Meta's Llama 3).
// Tensors are in the layout the projections produce: q (B, T, H, D), k and v (B, T, K, D); the
// result is (B, T, H, D). Softmax statistics are fp32 (fp64 for fp64 inputs); the matmuls run in
// the input dtype.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace tenax::model {

// Query positions and keys per block of BlockwiseAttention (measured: see attention.cc).
inline constexpr int64_t kAttentionBlock = 128;
// Query positions per block of GroupedAttention (measured: docs/performance.md, "Attention").
inline constexpr int64_t kGroupedQueryBlock = 128;
// Sequence length from which CausalGqaAttention takes the blockwise path on libtorch 1.13 CPU
// (below it, the blockwise path lost at two threads on the 2-core machine; docs/performance.md,
// "Attention").
inline constexpr int64_t kBlockwiseMinSeq = 512;

// softmax(q k^T / sqrt(D) + causal mask) v, per query head, with the path chosen as above.
at::Tensor CausalGqaAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// An attention of the shapes above that a layer may be given instead of CausalGqaAttention:
// context parallelism's ring attention (parallel/context_parallel.h), whose queries and keys are
// one rank's part of the sequence. Empty: CausalGqaAttention.
using AttentionFn =
    std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;

// The plain path, kept as the reference: K and V expanded to H heads (copies), the (B, H, T, T)
// scores, a bool mask, masked_fill and softmax (what tenax ran before issue 17 on libtorch 1.13).
at::Tensor ReferenceAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// No repeated K/V: the queries of one kv head are viewed as (B*K, T*G, D) so that one bmm serves
// all G query heads. The queries go in blocks of `query_block` positions, each block's scores
// (B*K, block*G, keys up to its last position) materialised, so the blocks right of the diagonal
// are skipped. Plain autograd, except the bf16 CPU softmax (fused_layers.h).
at::Tensor GroupedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t query_block = kGroupedQueryBlock);

// FlashAttention-2 on blocks of `block` query and key rows: key blocks above the diagonal are
// skipped, the softmax is accumulated with running fp32 max/sum, and only the output and the
// per-row logsumexp are saved; backward recomputes each block's scores. A custom autograd
// function (no double backward). Deterministic: blocks are visited in a fixed order.
at::Tensor BlockwiseAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              int64_t block = kAttentionBlock);

// q (B, T, H, D), k and v (B, T, K, D), the same B, T and D, H a multiple of K (TENAX_CHECK).
void CheckAttentionShapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// ---- The grouped layout the grouped, blockwise and ring paths compute in. ----
// q (B, T, H, D) -> (B*K, T*G, D), rows ordered (t, g): the queries of one kv head in one slab, so
// a block of query positions [t0, t1) is the contiguous row range [t0*G, t1*G).
at::Tensor GroupQueries(const at::Tensor& q, int64_t n_kv);
// k or v (B, T, K, D) -> (B*K, T, D)
at::Tensor GroupKeys(const at::Tensor& k);
// (B*K, T*G, D) -> (B, T, H, D)
at::Tensor UngroupOutput(const at::Tensor& o, int64_t b, int64_t t, int64_t h, int64_t n_kv);
// (rows*G, cols) bool, true where key column c lies after the query of row r (rows ordered
// (t, g)), for queries at positions first..first+rows-1 and keys from position 0.
at::Tensor CausalMask(int64_t rows, int64_t cols, int64_t g, const at::Device& device,
                      int64_t first = 0);

// One block pair of FlashAttention-2 (Dao 2023, algorithms 1 and 2) in the grouped layout, the
// work that BlockwiseAttention and context parallelism's ring attention share: query rows qb
// (B*K, rows, D) against keys kb and values vb (B*K, cols, D). A `diagonal` pair starts its
// queries and keys at the same position, so the keys after each query are masked. Statistics and
// accumulators are in StatsDtype (fp32; fp64 for fp64), the matmuls in the input dtype. The
// forward and the backward compute the scores alike, so the backward's probabilities are the
// forward's.
class FlashBlocks {
 public:
  // qg: the grouped queries (B*K, T*G, D); `block` query positions and keys per diagonal pair.
  FlashBlocks(const at::Tensor& qg, int64_t groups, int64_t block);
  // Scaled scores (B*K, rows, cols) in the statistics dtype, masked on a diagonal pair.
  at::Tensor Scores(const at::Tensor& qb, const at::Tensor& kb, bool diagonal) const;
  // Forward: folds the pair into the rows' running max m, sum l (B*K, rows, 1) and weighted values
  // acc (B*K, rows, D), updated in place (views are fine). Start: m = -inf, l = acc = 0. Every
  // row must see at least one key of its first pair (true of causal attention's key block 0 and
  // of every diagonal pair), so the running max is finite from then on.
  void Accumulate(const at::Tensor& qb, const at::Tensor& kb, const at::Tensor& vb, bool diagonal,
                  at::Tensor m, at::Tensor l, at::Tensor acc) const;
  // Backward: adds the pair's gradients into dq (B*K, rows, D), dk and dv (B*K, cols, D), given
  // the output gradient dob and the rows' saved logsumexp and delta = sum_d dO O (B*K, rows, 1).
  void AccumulateGrads(const at::Tensor& qb, const at::Tensor& kb, const at::Tensor& vb,
                       const at::Tensor& dob, const at::Tensor& lse, const at::Tensor& delta,
                       bool diagonal, at::Tensor dq, at::Tensor dk, at::Tensor dv) const;

  double scale() const { return scale_; }
  at::ScalarType dtype() const { return dtype_; }
  at::ScalarType stats() const { return stats_; }

 private:
  double scale_ = 1;
  at::ScalarType dtype_ = at::kFloat, stats_ = at::kFloat;
  at::Tensor mask_;  // (block*G, block): a diagonal pair's, narrowed for a short one
};

}  // namespace tenax::model
