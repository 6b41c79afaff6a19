// Hand-written CPU loops for the pointwise steps whose at:: compositions cost a bf16 step most on
// CPU after its matmuls: RMSNorm (casts, squares, a mean, two products and their temporaries),
// RoPE (widened, rotated through a swapped copy, narrowed), SwiGLU's gate (libtorch 1.13 runs bf16
// silu element by element, and the widened composition in fused_layers.cc makes six passes and
// three fp32 temporaries in forward, twelve and seven in backward) and the causal softmax of
// short-sequence attention (scale, mask, softmax: three passes over the whole (T x T) scores, half
// of them masked). These loops make one pass over raw bf16 bits, with the math in fp32 and
// rounding to bf16 where the compositions round (round to nearest even, as at::Tensor::to). Plain
// C++ that the compiler vectorizes, built for x86-64-v4 (AVX-512 with BW/VL), AVX2 and baseline
// x86-64 and chosen at load time (GCC's target_clones); elsewhere the same loops, scalar or as the
// compiler can. Single-threaded: the caller splits the range (at::parallel_for). No result depends
// on the split (RMSNorm's weight gradient is summed by the caller over fixed blocks of rows), so
// they are the same at any thread count.
#pragma once

#include <cstdint>

namespace tenax::model::cpu {

// out[i] = bf16(silu(a[i]) * b[i]), silu(x) = x * sigmoid(x).
void SiluMulForward(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n);

// Given g = d loss / d out: ga[i] = bf16(g b sigmoid(a) (1 + a (1 - sigmoid(a)))),
// gb[i] = bf16(g silu(a)).
void SiluMulBackward(const uint16_t* a, const uint16_t* b, const uint16_t* g, uint16_t* ga,
                     uint16_t* gb, int64_t n);

// The same two in fp32 (no rounding but fp32's): one pass where the at:: composition makes three
// forward and five backward, and libtorch 1.13's fp32 silu is not vectorized in Debian's build
// (12 ms for 3.1M elements on one thread).
void SiluMulForward(const float* a, const float* b, float* out, int64_t n);
void SiluMulBackward(const float* a, const float* b, const float* g, float* ga, float* gb,
                     int64_t n);

// The causal softmax of attention scores, rows of `cols` keys: row r is query position
// first_position + (r % rows_per_slab) / group (a slab holds positions x G query heads,
// attention.cc's grouped layout; first_position > 0 for a block of later queries) and sees keys
// 0..that position; the keys after it get probability 0. p = softmax over the visible keys of
// scale * s, in fp32, rounded once. Rows [row_begin, row_end).
void CausalSoftmaxForward(const uint16_t* scores, uint16_t* probs, int64_t row_begin,
                          int64_t row_end, int64_t rows_per_slab, int64_t cols, int64_t group,
                          int64_t first_position, float scale);
// Its backward: d loss / d s = scale p (g - sum(g p)) over the visible keys, 0 after them.
void CausalSoftmaxBackward(const uint16_t* probs, const uint16_t* grad, uint16_t* grad_scores,
                           int64_t row_begin, int64_t row_end, int64_t rows_per_slab, int64_t cols,
                           int64_t group, int64_t first_position, float scale);

// RMSNorm of rows of `cols` bf16 values with an fp32 weight, as fused_layers.cc's composition
// rounds it: r = 1 / sqrt(mean(x^2) + eps) in fp32 (kept in rscale[row] for backward),
// out = bf16(bf16(x r) * bf16(w)). Rows [row_begin, row_end).
void RmsNormForward(const uint16_t* x, const float* weight, uint16_t* out, float* rscale,
                    int64_t row_begin, int64_t row_end, int64_t cols, float eps);
// Its backward with n = x r and gn = g w: gx = bf16(r (gn - n mean(gn n))), and
// gw_rows[c] += sum over the rows of g n (fp32; the caller sums blocks of rows in a fixed order).
void RmsNormBackward(const uint16_t* x, const float* weight, const float* rscale,
                     const uint16_t* grad, uint16_t* grad_x, float* gw_rows, int64_t row_begin,
                     int64_t row_end, int64_t cols);

// RoPE on rows of `dim` bf16 values, row r at position (r / heads) % positions of a
// (B, T, H, D) tensor: pairs (x0, x1) become (x0 c - x1 s, x0 s + x1 c) with c, s the fp32
// tables' (T', D/2) entries of that position; `transposed` rotates by the opposite angle
// (backward). Rows [row_begin, row_end).
void RopeRotate(const uint16_t* x, const float* cos, const float* sin, uint16_t* out,
                int64_t row_begin, int64_t row_end, int64_t positions, int64_t heads, int64_t dim,
                bool transposed);

// Cross-entropy over rows of `vocab` bf16 logits, in place: row r's loss, logsumexp(l) - l[t] with
// t = targets[r] (in [0, vocab): the caller checks), goes to row_loss[r] in fp32; when
// `write_grad`, the row is overwritten with its gradient (softmax(l) - onehot(t)) * grad_scale,
// computed in fp32 as fused_cross_entropy.cc's composition orders it and rounded once. Rows
// [row_begin, row_end).
void CrossEntropyRows(uint16_t* logits, const int64_t* targets, float* row_loss, int64_t row_begin,
                      int64_t row_end, int64_t vocab, bool write_grad, float grad_scale);

// exp(x) in fp32 for x in [-87, 88] (clamped outside: results stay finite and normal), relative
// error below 3e-7: 2^n e^r with |r| <= ln(2)/2 and e^r to degree 6 of its Taylor series.
// Exposed for its test.
float ExpForSigmoid(float x);

}  // namespace tenax::model::cpu
