#include "tenax/model/fused_cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "tenax/core/check.h"

namespace tenax::model {
namespace {

at::ScalarType StatsDtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

struct ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& targets, int64_t rows) {
    const int64_t n = x.size(0);
    const auto stats = StatsDtype(x.scalar_type());
    at::Tensor w = weight.to(x.scalar_type());  // (V, C) compute copy, kept for backward
    at::Tensor lse = at::empty({n}, x.options().dtype(stats));  // (N)
    at::Tensor total = at::zeros({}, x.options().dtype(stats));
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t len = std::min(rows, n - r0);
      at::Tensor logits = at::mm(x.narrow(0, r0, len), w.t()).to(stats);  // (len, V)
      at::Tensor l = at::logsumexp(logits, 1);                            // (len)
      lse.narrow(0, r0, len).copy_(l);
      at::Tensor picked = logits.gather(1, targets.narrow(0, r0, len).unsqueeze(1)).squeeze(1);
      total.add_((l - picked).sum());
    }
    ctx->save_for_backward({x, targets});
    ctx->saved_data["w"] = w;
    ctx->saved_data["lse"] = lse;
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return total.div_(static_cast<double>(n));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& targets = saved[1];
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    const at::Tensor lse = ctx->saved_data["lse"].toTensor();
    const int64_t rows = ctx->saved_data["rows"].toInt();
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const int64_t n = x.size(0);
    const auto stats = lse.scalar_type();
    // d loss / d logits = (softmax - onehot(target)) * grad / N; a 0-dim tensor keeps the scale
    // on the device (no host synchronisation).
    const at::Tensor scale = grads[0].to(stats) / static_cast<double>(n);
    at::Tensor grad_x = at::empty_like(x);  // (N, C)
    at::Tensor grad_w;                      // (V, C) in the stats dtype
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t len = std::min(rows, n - r0);
      const at::Tensor xc = x.narrow(0, r0, len);
      at::Tensor p = at::mm(xc, w.t()).to(stats);          // (len, V) logits, a fresh tensor
      p.sub_(lse.narrow(0, r0, len).unsqueeze(1)).exp_();  // softmax
      p.scatter_add_(1, targets.narrow(0, r0, len).unsqueeze(1),
                     at::full({len, 1}, -1.0, p.options()));
      p.mul_(scale);
      const at::Tensor g = p.to(x.scalar_type());  // dlogits in the compute dtype
      grad_x.narrow(0, r0, len).copy_(at::mm(g, w));
      at::Tensor gw = at::mm(g.t(), xc);  // (V, C)
      if (!grad_w.defined()) {
        grad_w = gw.to(stats);
      } else {
        grad_w.add_(gw);
      }
    }
    return {grad_x, grad_w.to(weight_dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t CrossEntropyChunkRows(int64_t vocab) {
  constexpr int64_t kChunkElements = (int64_t{128} << 20) / 4;  // 128 MiB of fp32
  return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(vocab, 1));
}

at::Tensor LinearCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& targets, int64_t chunk_rows) {
  TENAX_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1));
  TENAX_CHECK(targets.dim() == 1 && targets.size(0) == x.size(0));
  const int64_t rows = chunk_rows > 0 ? chunk_rows : CrossEntropyChunkRows(weight.size(0));
  return ChunkedLinearCrossEntropy::apply(x, weight, targets.to(at::kLong), rows);
}

}  // namespace tenax::model
