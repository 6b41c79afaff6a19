#include "tenax/model/attention.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tenax/core/check.h"
#include "tenax/core/torch_compat.h"
#include "tenax/model/fused_layers.h"

namespace tenax::model {

at::Tensor GroupQueries(const at::Tensor& q, int64_t n_kv) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), d = q.size(3);
  return q.view({b, t, n_kv, h / n_kv, d})
      .permute({0, 2, 1, 3, 4})
      .reshape({b * n_kv, t * h / n_kv, d});
}

at::Tensor GroupKeys(const at::Tensor& k) {
  const int64_t b = k.size(0), t = k.size(1), n_kv = k.size(2), d = k.size(3);
  return k.permute({0, 2, 1, 3}).reshape({b * n_kv, t, d});
}

at::Tensor UngroupOutput(const at::Tensor& o, int64_t b, int64_t t, int64_t h, int64_t n_kv) {
  const int64_t d = o.size(-1);
  return o.view({b, n_kv, t, h / n_kv, d}).permute({0, 2, 1, 3, 4}).reshape({b, t, h, d});
}

at::Tensor CausalMask(int64_t rows, int64_t cols, int64_t g, const at::Device& device,
                      int64_t first) {
  const auto opt = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor pos =
      at::arange(first, first + rows, opt).repeat_interleave(g).unsqueeze(1);  // (rows*G, 1)
  return at::arange(cols, opt).unsqueeze(0).gt(pos);                           // (rows*G, cols)
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// k or v (B, T, K, D) -> (B, T, H, D): each kv head repeated for its H / K query heads (what the
// grouped and blockwise paths avoid).
at::Tensor RepeatKv(const at::Tensor& x, int64_t h) {
  const int64_t b = x.size(0), t = x.size(1), n_kv = x.size(2), d = x.size(3);
  if (h == n_kv) return x;
  return x.unsqueeze(3).expand({b, t, n_kv, h / n_kv, d}).reshape({b, t, h, d});
}

}  // namespace

void CheckAttentionShapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TENAX_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes());
  TENAX_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3));
  TENAX_CHECK_MSG(k.size(2) > 0 && q.size(2) % k.size(2) == 0,
                  "attention: query heads must be a multiple of kv heads");
}

FlashBlocks::FlashBlocks(const at::Tensor& qg, int64_t groups, int64_t block)
    : scale_(1.0 / std::sqrt(static_cast<double>(qg.size(2)))),
      dtype_(qg.scalar_type()),
      stats_(StatsDtype(dtype_)),
      mask_(CausalMask(block, block, groups, qg.device())) {}

at::Tensor FlashBlocks::Scores(const at::Tensor& qb, const at::Tensor& kb, bool diagonal) const {
  at::Tensor s = at::bmm(qb, kb.transpose(1, 2)).to(stats_).mul_(scale_);
  if (diagonal) s.masked_fill_(mask_.narrow(0, 0, s.size(1)).narrow(1, 0, s.size(2)), -kInf);
  return s;
}

void FlashBlocks::Accumulate(const at::Tensor& qb, const at::Tensor& kb, const at::Tensor& vb,
                             bool diagonal, at::Tensor m, at::Tensor l, at::Tensor acc) const {
  at::Tensor s = Scores(qb, kb, diagonal);  // (BK, rows, cols)
  const at::Tensor m_new = at::maximum(m, std::get<0>(s.max(2, true)));
  const at::Tensor p = s.sub_(m_new).exp_();
  const at::Tensor corr = (m - m_new).exp_();  // 0 on a row's first pair (m = -inf)
  l.mul_(corr).add_(p.sum(2, true));
  acc.mul_(corr).add_(at::bmm(p.to(dtype_), vb).to(stats_));
  m.copy_(m_new);
}

void FlashBlocks::AccumulateGrads(const at::Tensor& qb, const at::Tensor& kb, const at::Tensor& vb,
                                  const at::Tensor& dob, const at::Tensor& lse,
                                  const at::Tensor& delta, bool diagonal, at::Tensor dq,
                                  at::Tensor dk, at::Tensor dv) const {
  at::Tensor s = Scores(qb, kb, diagonal);
  const at::Tensor p = s.sub_(lse).exp_();  // the forward's probabilities
  dv.add_(at::bmm(p.to(dtype_).transpose(1, 2), dob).to(stats_));
  at::Tensor dp = at::bmm(dob, vb.transpose(1, 2)).to(stats_);           // (BK, rows, cols)
  const at::Tensor ds = p.mul_(dp.sub_(delta)).mul_(scale_).to(dtype_);  // dS * scale
  dq.add_(at::bmm(ds, kb).to(stats_));
  dk.add_(at::bmm(ds.transpose(1, 2), qb).to(stats_));
}

namespace {

// FlashAttention-2 with at:: ops on blocks (FlashBlocks). q (BK, T*G, D), k and v (BK, T, D),
// all contiguous; returns (BK, T*G, D). Query block i holds positions [i*bs, min((i+1)*bs, T));
// it meets key blocks 0..i, only block i straddles the diagonal (the same mask for every i,
// narrowed for a short last block). Every row's first key block (block 0) has at least one
// unmasked key, so the running max is finite from the first block on.
// Block size (kAttentionBlock = 128): bench/attention blockwise at B=8 H=8 K=4 T=1024 D=64, one
// thread, two interleaved sweeps under load 6-7 (2026-11-25), median ms fp32 / bf16: block 32
// 2264 2127 / 2043 1458; 64 2900 3283 / 1349 1318; 128 2180 1762 / 1234 1010; 256 2433 2865 /
// 2029 1189. Smaller blocks make each bmm too small for the BLAS and multiply the per-op
// overhead (a dozen ops per block pair); larger ones waste more of the masked half of each
// diagonal block and leave the (B*K, block*G, block) fp32 scores out of cache.
struct BlockwiseCausal : public torch::autograd::Function<BlockwiseCausal> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, int64_t g, int64_t bs) {
    const int64_t bk = q.size(0), t = k.size(1);
    const FlashBlocks fb(q, g, std::min(bs, t));
    at::Tensor out = at::empty_like(q);                                         // (BK, T*G, D)
    at::Tensor lse = at::empty({bk, t * g, 1}, q.options().dtype(fb.stats()));  // (BK, T*G, 1)
    for (int64_t i0 = 0; i0 < t; i0 += bs) {
      const int64_t len = std::min(bs, t - i0);
      const at::Tensor qb = q.narrow(1, i0 * g, len * g);  // (BK, len*G, D)
      // The rows' running max m, sum l and weighted values acc, in the statistics dtype.
      at::Tensor m = at::full({bk, len * g, 1}, -kInf, q.options().dtype(fb.stats()));
      at::Tensor l = at::zeros_like(m);
      at::Tensor acc = at::zeros(qb.sizes(), q.options().dtype(fb.stats()));
      for (int64_t j0 = 0; j0 <= i0; j0 += bs) {
        const int64_t cols = std::min(bs, t - j0);
        fb.Accumulate(qb, k.narrow(1, j0, cols), v.narrow(1, j0, cols), j0 == i0, m, l, acc);
      }
      out.narrow(1, i0 * g, len * g).copy_(acc.div_(l));
      lse.narrow(1, i0 * g, len * g).copy_(l.log_().add_(m));
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["g"] = g;
    ctx->saved_data["bs"] = bs;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t g = ctx->saved_data["g"].toInt(), bs = ctx->saved_data["bs"].toInt();
    const int64_t t = k.size(1);
    const FlashBlocks fb(q, g, std::min(bs, t));
    const at::Tensor dout = grads[0].contiguous();  // (BK, T*G, D)
    // delta_r = sum_d dO_rd O_rd = sum_c P_rc dP_rc: the softmax backward's row term.
    const at::Tensor delta = (dout.to(fb.stats()) * out.to(fb.stats())).sum(2, true);
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(fb.stats()));
    at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(fb.stats()));
    at::Tensor dv = at::zeros(v.sizes(), v.options().dtype(fb.stats()));
    for (int64_t i0 = 0; i0 < t; i0 += bs) {
      const int64_t len = std::min(bs, t - i0);
      const int64_t row0 = i0 * g, rows = len * g;
      for (int64_t j0 = 0; j0 <= i0; j0 += bs) {
        const int64_t cols = std::min(bs, t - j0);
        fb.AccumulateGrads(q.narrow(1, row0, rows), k.narrow(1, j0, cols), v.narrow(1, j0, cols),
                           dout.narrow(1, row0, rows), lse.narrow(1, row0, rows),
                           delta.narrow(1, row0, rows), j0 == i0, dq.narrow(1, row0, rows),
                           dk.narrow(1, j0, cols), dv.narrow(1, j0, cols));
      }
    }
    return {dq.to(fb.dtype()), dk.to(fb.dtype()), dv.to(fb.dtype()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ReferenceAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  CheckAttentionShapes(q, k, v);
  const int64_t t = q.size(1), h = q.size(2), d = q.size(3);
  const at::Tensor qt = q.transpose(1, 2);
  const at::Tensor kt = RepeatKv(k, h).transpose(1, 2), vt = RepeatKv(v, h).transpose(1, 2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor scores = at::matmul(qt, kt.transpose(-2, -1)).mul_(scale);  // (B, H, T, T)
  const at::Tensor mask = at::ones({t, t}, q.options().dtype(at::kBool)).triu_(1);
  scores.masked_fill_(mask, -kInf);
  return at::matmul(at::softmax(scores, -1), vt).transpose(1, 2);  // (B, T, H, D)
}

at::Tensor GroupedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t query_block) {
  CheckAttentionShapes(q, k, v);
  TENAX_CHECK(query_block > 0);
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), n_kv = k.size(2), d = q.size(3);
  const int64_t g = h / n_kv;
  const at::Tensor qg = GroupQueries(q, n_kv);            // (BK, T*G, D)
  const at::Tensor kg = GroupKeys(k), vg = GroupKeys(v);  // (BK, T, D)
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool loops = q.device().is_cpu() && q.scalar_type() == at::kBFloat16;
  // Queries in blocks, each against the keys up to its last position only: the scores right of
  // the diagonal's blocks are never computed (a quarter of them with two blocks).
  std::vector<at::Tensor> outs;
  for (int64_t t0 = 0; t0 < t; t0 += query_block) {
    const int64_t t1 = std::min(t, t0 + query_block);
    const at::Tensor kb = kg.narrow(1, 0, t1), vb = vg.narrow(1, 0, t1);
    at::Tensor scores = at::bmm(qg.narrow(1, t0 * g, (t1 - t0) * g), kb.transpose(1, 2));
    at::Tensor p;  // (BK, (t1-t0)*G, t1)
    if (loops) {
      p = Bf16CpuCausalSoftmax(scores, g, scale, t0);
    } else {
      scores.mul_(scale).masked_fill_(CausalMask(t1 - t0, t1, g, q.device(), t0), -kInf);
      p = at::softmax(scores, -1);
    }
    outs.push_back(at::bmm(p, vb));
  }
  return UngroupOutput(outs.size() == 1 ? outs[0] : at::cat(outs, 1), b, t, h, n_kv);
}

at::Tensor BlockwiseAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              int64_t block) {
  CheckAttentionShapes(q, k, v);
  TENAX_CHECK(block > 0);
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), n_kv = k.size(2);
  const at::Tensor o =
      BlockwiseCausal::apply(GroupQueries(q, n_kv), GroupKeys(k), GroupKeys(v), h / n_kv, block);
  return UngroupOutput(o, b, t, h, n_kv);
}

at::Tensor CausalGqaAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  CheckAttentionShapes(q, k, v);
#if TENAX_TORCH_AT_LEAST(2, 5)
  // enable_gqa maps query head h to kv head h / G, the layout above.
  return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true, /*scale=*/{},
                                          /*enable_gqa=*/q.size(2) != k.size(2))
      .transpose(1, 2);
#elif TENAX_TORCH_AT_LEAST(2, 0)
  const int64_t h = q.size(2);
  return compat::CausalAttention(q.transpose(1, 2), RepeatKv(k, h).transpose(1, 2),
                                 RepeatKv(v, h).transpose(1, 2))
      .transpose(1, 2);
#else
  if (!q.device().is_cpu()) return ReferenceAttention(q, k, v);
  if (q.size(1) >= kBlockwiseMinSeq) return BlockwiseAttention(q, k, v);
  return GroupedAttention(q, k, v);
#endif
}

}  // namespace tenax::model
