#include "tenax/parallel/context_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tenax/core/check.h"
#include "tenax/model/attention.h"

namespace tenax::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Tags of the two messages that travel the ring (Gloo matches on them; NCCL on issue order).
constexpr int kKvTag = 61;
constexpr int kGradTag = 62;

// One pair of a query chunk and a key chunk that causality leaves something of.
struct ChunkPair {
  int q = 0;  // local query chunk: 0 (head) or 1 (tail)
  int k = 0;  // chunk of the keys held this step: 0 (their owner's head) or 1 (its tail)
  bool diagonal = false;  // the same chunk of the sequence: masked inside; otherwise unmasked
};

// The pairs of rank r's queries against the keys of rank `owner`, head before tail: query
// chunk a sees key chunk b entirely when a > b, causally when a == b, not at all when a < b.
std::vector<ChunkPair> PairsOf(int r, int owner, int n) {
  const ContextChunks mine = ContextChunksOf(2 * n, r, n),
                      theirs = ContextChunksOf(2 * n, owner, n);
  const int64_t a[2] = {mine.head, mine.tail}, b[2] = {theirs.head, theirs.tail};
  std::vector<ChunkPair> pairs;
  for (int qi = 0; qi < 2; ++qi) {
    for (int kj = 0; kj < 2; ++kj) {
      if (a[qi] >= b[kj]) pairs.push_back({qi, kj, a[qi] == b[kj]});
    }
  }
  return pairs;
}

// The geometry shared by forward and backward, in the grouped layout (model/attention.h):
// q rows (BK, L*G, D) ordered (t, g), keys (BK, L, D); a chunk is c = L / 2 positions, split
// into sub-blocks of bs positions so that no (c*G x c) score matrix is ever held. Each sub-block
// pair is FlashAttention-2's, computed by model::FlashBlocks as BlockwiseAttention's are.
struct Geometry {
  int64_t g = 1, c = 0, bs = model::kAttentionBlock;
  model::FlashBlocks blocks;

  Geometry(const at::Tensor& qg, const at::Tensor& kg, int64_t groups)
      : g(groups),
        c(kg.size(1) / 2),
        bs(std::min<int64_t>(model::kAttentionBlock, c)),
        blocks(qg, groups, bs) {}
  // Calls f(q_row0, rows, key0, cols, diagonal) for every sub-block pair of `pair` that is not
  // masked entirely: query rows [q_row0, + rows) and keys [key0, + cols) of the local tensors.
  template <class F>
  void ForEachBlock(const ChunkPair& pair, F&& f) const {
    for (int64_t i0 = 0; i0 < c; i0 += bs) {
      const int64_t len = std::min(bs, c - i0);
      for (int64_t j0 = 0; j0 < c; j0 += bs) {
        if (pair.diagonal && j0 > i0) break;
        f((pair.q * c + i0) * g, len * g, pair.k * c + j0, std::min(bs, c - j0),
          pair.diagonal && j0 == i0);
      }
    }
  }
};

int64_t CommHandle(Communicator& cp) { return reinterpret_cast<int64_t>(&cp); }
Communicator& CommFrom(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

// q (BK, L*G, D), k and v (BK, L, D) contiguous, grouped; returns the grouped output.
struct RingCausal : public torch::autograd::Function<RingCausal> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, int64_t g, int64_t comm) {
    Communicator& cp = *reinterpret_cast<Communicator*>(comm);
    const int n = cp.size(), r = cp.rank();
    const Geometry geo(q, k, g);
    const at::ScalarType stats = geo.blocks.stats(), dtype = geo.blocks.dtype();
    // Running softmax of every query row: max m, sum l, weighted values acc (fp32).
    at::Tensor m = at::full({q.size(0), q.size(1), 1}, -kInf, q.options().dtype(stats));
    at::Tensor l = at::zeros_like(m);
    at::Tensor acc = at::zeros(q.sizes(), q.options().dtype(stats));
    at::Tensor kv = at::stack({k, v});  // (2, BK, L, D): one message per hop
    for (int s = 0; s < n; ++s) {
      PendingCollective next;
      if (s + 1 < n) {  // issued first, so the hop overlaps this block's compute
        next = cp.ExchangeAsync(kv, (r + 1) % n, at::empty_like(kv), (r - 1 + n) % n, kKvTag);
      }
      const at::Tensor ks = kv[0], vs = kv[1];
      for (const ChunkPair& pair : PairsOf(r, (r - s + n) % n, n)) {
        geo.ForEachBlock(
            pair, [&](int64_t row0, int64_t rows, int64_t key0, int64_t cols, bool masked) {
              geo.blocks.Accumulate(q.narrow(1, row0, rows), ks.narrow(1, key0, cols),
                                    vs.narrow(1, key0, cols), masked, m.narrow(1, row0, rows),
                                    l.narrow(1, row0, rows), acc.narrow(1, row0, rows));
            });
      }
      if (next.pending()) kv = next.Wait();
    }
    const at::Tensor out = acc.div_(l).to(dtype);
    const at::Tensor lse = l.log_().add_(m);  // (BK, L*G, 1)
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["g"] = g;
    ctx->saved_data["comm"] = comm;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    Communicator& cp = CommFrom(ctx);
    const int n = cp.size(), r = cp.rank();
    const Geometry geo(q, k, ctx->saved_data["g"].toInt());
    const at::ScalarType stats = geo.blocks.stats(), dtype = geo.blocks.dtype();
    const at::Tensor dout = grads[0].contiguous();  // (BK, L*G, D)
    // delta_r = sum_d dO_rd O_rd: the softmax backward's row term (FlashAttention-2).
    const at::Tensor delta = (dout.to(stats) * out.to(stats)).sum(2, true);
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(stats));
    at::Tensor kv = at::stack({k, v});
    // The gradient of the keys held at step s travels with them: received from the rank that
    // held them before (its sum so far), this rank's share added, sent on to the next.
    PendingCollective incoming;
    for (int s = 0; s < n; ++s) {
      PendingCollective next;
      if (s + 1 < n) {
        next = cp.ExchangeAsync(kv, (r + 1) % n, at::empty_like(kv), (r - 1 + n) % n, kKvTag);
      }
      const at::Tensor ks = kv[0], vs = kv[1];
      at::Tensor part = at::zeros(kv.sizes(), kv.options().dtype(stats));  // (dk, dv)
      at::Tensor dks = part[0], dvs = part[1];
      for (const ChunkPair& pair : PairsOf(r, (r - s + n) % n, n)) {
        geo.ForEachBlock(
            pair, [&](int64_t row0, int64_t rows, int64_t key0, int64_t cols, bool masked) {
              geo.blocks.AccumulateGrads(q.narrow(1, row0, rows), ks.narrow(1, key0, cols),
                                         vs.narrow(1, key0, cols), dout.narrow(1, row0, rows),
                                         lse.narrow(1, row0, rows), delta.narrow(1, row0, rows),
                                         masked, dq.narrow(1, row0, rows),
                                         dks.narrow(1, key0, cols), dvs.narrow(1, key0, cols));
            });
      }
      if (incoming.pending()) part.add_(incoming.Wait());
      // After the last hop the sum arrives at the keys' owner: this rank's own gradient.
      incoming =
          cp.ExchangeAsync(part, (r + 1) % n, at::empty_like(part), (r - 1 + n) % n, kGradTag);
      if (next.pending()) kv = next.Wait();
    }
    const at::Tensor dkv = incoming.Wait();
    return {dq.to(dtype), dkv[0].to(dtype), dkv[1].to(dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ContextPositions(int64_t seq_len, int rank, int size, const at::Device& device) {
  const ContextChunks c = ContextChunksOf(seq_len, rank, size);
  const auto opt = at::TensorOptions().dtype(at::kLong).device(device);
  return at::cat({at::arange(c.head * c.chunk, (c.head + 1) * c.chunk, opt),
                  at::arange(c.tail * c.chunk, (c.tail + 1) * c.chunk, opt)});
}

at::Tensor ContextShard(const at::Tensor& x, int rank, int size) {
  if (size == 1) return x;
  const int64_t t = x.size(1);
  TENAX_CHECK_MSG(t % (2 * size) == 0, "context parallel: sequence not divisible by 2 x degree");
  const ContextChunks c = ContextChunksOf(t, rank, size);
  return at::cat({x.narrow(1, c.head * c.chunk, c.chunk), x.narrow(1, c.tail * c.chunk, c.chunk)},
                 1);
}

at::Tensor ContextUnshard(const std::vector<at::Tensor>& shards) {
  const int n = static_cast<int>(shards.size());
  TENAX_CHECK(n >= 1);
  if (n == 1) return shards[0];
  const int64_t c = shards[0].size(1) / 2;
  std::vector<at::Tensor> chunks(static_cast<size_t>(2 * n));
  for (int r = 0; r < n; ++r) {
    const ContextChunks cc = ContextChunksOf(2 * n * c, r, n);
    chunks[static_cast<size_t>(cc.head)] = shards[static_cast<size_t>(r)].narrow(1, 0, c);
    chunks[static_cast<size_t>(cc.tail)] = shards[static_cast<size_t>(r)].narrow(1, c, c);
  }
  return at::cat(chunks, 1);
}

at::Tensor RingAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         Communicator& cp) {
  if (cp.size() == 1) return model::CausalGqaAttention(q, k, v);
  model::CheckAttentionShapes(q, k, v);
  TENAX_CHECK_MSG(q.size(1) % 2 == 0, "ring attention: the local sequence holds two chunks");
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), n_kv = k.size(2);
  const at::Tensor o =
      RingCausal::apply(model::GroupQueries(q, n_kv).contiguous(), model::GroupKeys(k).contiguous(),
                        model::GroupKeys(v).contiguous(), h / n_kv, CommHandle(cp));
  return model::UngroupOutput(o, b, t, h, n_kv);
}

}  // namespace tenax::parallel
