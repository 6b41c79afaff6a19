#include "tenax/model/fused_cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "tenax/core/check.h"
#include "tenax/model/cpu_gemm.h"
#include "tenax/model/cpu_kernels.h"
#include "tenax/model/cpu_parallel.h"
#include "tenax/model/fused_layers.h"

namespace tenax::model {
namespace {

std::atomic<bool> g_gpu_wide{true};

// cuBLAS's bf16 x bf16 -> fp32 products (mm/addmm with out_dtype): CUDA only in libtorch.
bool GpuWide(const at::Tensor& x) {
  return x.is_cuda() && x.scalar_type() == at::kBFloat16 && g_gpu_wide.load();
}

// The loops index the logits by target without a bounds check of their own; the composition's
// gather throws for such a target, and so does this.
void CheckTargets(const at::Tensor& targets, int64_t vocab) {
  if (targets.numel() == 0) return;
  const int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
  TORCH_CHECK(lo >= 0 && hi < vocab, "LinearCrossEntropy: target ", lo < 0 ? lo : hi,
              " lies outside the vocabulary [0, ", vocab, ")");
}

// The gradient is computed in forward, chunk by chunk, while each chunk's logits are at hand (as
// Liger-Kernel's fused linear cross-entropy does): the loss is the last node of the graph, so
// d loss / d logits does not depend on anything backward brings except the scalar upstream
// gradient, which backward multiplies in. Recomputing the logits in backward instead would cost
// a third more head FLOPs. The weight gradient is alive from the forward on; in the plain path it
// appears at the head's backward, the first step of backward, so the peak is unchanged.
struct ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& targets, int64_t rows,
                            bool need_grad) {
    const int64_t n = x.size(0), v = weight.size(0);
    const auto stats = StatsDtype(x.scalar_type());
    const bool same = x.scalar_type() == stats;
    const bool wide = GpuWide(x);
    // bf16 on the CPU: each row's softmax statistics, loss and gradient in one pass over its bf16
    // logits (cpu_kernels.h), instead of widening them into `buf` and eight passes over it.
    const bool loops = x.device().is_cpu() && x.scalar_type() == at::kBFloat16;
    if (loops) CheckTargets(targets, v);
    const at::Tensor w = weight.to(x.scalar_type());  // (V, C) compute copy
    const double inv_n = 1.0 / static_cast<double>(n);
    at::Tensor total = at::zeros({}, x.options().dtype(stats));
    const int64_t max_rows = std::min(rows, n);
    // Reused by every chunk: the fp32 logits, or (loops) each row's loss.
    at::Tensor buf =
        at::empty(loops ? std::vector<int64_t>{max_rows} : std::vector<int64_t>{max_rows, v},
                  x.options().dtype(stats));
    at::Tensor grad_x = need_grad ? at::empty_like(x) : at::Tensor();  // (N, C)
    at::Tensor grad_w;                                                 // (V, C) in the stats dtype
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t len = std::min(rows, n - r0);
      const at::Tensor xc = x.narrow(0, r0, len);
      at::Tensor g;  // d loss / d logits = (softmax - onehot(target)) / N, in x's dtype
      if (loops) {
        g = at::mm(xc, w.t());  // (len, V) bf16 logits, turned into their gradient in place
        const at::Tensor tc = targets.narrow(0, r0, len).contiguous();
        uint16_t* pg = reinterpret_cast<uint16_t*>(g.data_ptr<at::BFloat16>());
        const int64_t* pt = tc.data_ptr<int64_t>();
        float* pl = buf.data_ptr<float>();
        ParallelFor(0, len, std::max<int64_t>(1, kLoopGrain / v), [&](int64_t b, int64_t e) {
          cpu::CrossEntropyRows(pg, pt, pl, b, e, v, need_grad, static_cast<float>(inv_n));
        });
        total.add_(buf.narrow(0, 0, len).sum());
        if (!need_grad) continue;
      } else {
        const at::Tensor tc = targets.narrow(0, r0, len).unsqueeze(1);  // (len, 1)
        at::Tensor p = buf.narrow(0, 0, len);                           // (len, V)
        if (same) {
          MmOut(p, xc, w.t(), /*accumulate=*/false);  // fp32: oneDNN sgemm (cpu_gemm.h)
        } else if (wide) {
          at::mm_out(p, xc, w.t(), at::kFloat);  // fp32 logits straight from cuBLAS
        } else {
          p.copy_(at::mm(xc, w.t()));  // bf16 logits, widened
        }
        const at::Tensor picked = p.gather(1, tc);          // (len, 1)
        const at::Tensor mx = std::get<0>(p.max(1, true));  // (len, 1)
        p.sub_(mx).exp_();
        const at::Tensor sum = p.sum(1, true);        // (len, 1)
        total.add_((sum.log() + mx - picked).sum());  // sum of logsumexp - target logit
        if (!need_grad) continue;
        p.div_(sum).scatter_add_(1, tc, at::full({len, 1}, -1.0, p.options())).mul_(inv_n);
        g = same ? p : p.to(x.scalar_type());
      }
      at::Tensor gx = grad_x.narrow(0, r0, len);
      MmOut(gx, g, w, /*accumulate=*/false);
      const bool first = !grad_w.defined();
      if (first) grad_w = at::empty({v, x.size(1)}, x.options().dtype(stats));
      if (same) {
        MmOut(grad_w, g.t(), xc, /*accumulate=*/!first);
      } else if (wide && first) {
        at::mm_out(grad_w, g.t(), xc, at::kFloat);
      } else if (wide) {
        at::addmm_out(grad_w, grad_w, g.t(), xc, at::kFloat);  // cuBLAS's beta = 1, in fp32
      } else {
        MmOutWide(grad_w, g.t(), xc, /*accumulate=*/!first);  // bf16 products summed in fp32
      }
    }
    if (need_grad) {
      ctx->saved_data["grad_x"] = grad_x;
      ctx->saved_data["grad_w"] = grad_w.to(weight.scalar_type());
    }
    return total.mul_(inv_n);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TENAX_CHECK_MSG(ctx->saved_data.count("grad_x") == 1,
                    "LinearCrossEntropy: backward through a loss computed without gradients");
    // A 0-dim scale keeps the upstream gradient on the device (no host synchronisation).
    const at::Tensor scale = grads[0];
    const at::Tensor grad_x = ctx->saved_data["grad_x"].toTensor();
    const at::Tensor grad_w = ctx->saved_data["grad_w"].toTensor();
    return {grad_x * scale.to(grad_x.scalar_type()), grad_w * scale.to(grad_w.scalar_type()),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t CrossEntropyChunkRows(int64_t vocab, bool gpu) {
  const int64_t bytes = gpu ? int64_t{1} << 30 : int64_t{128} << 20;  // of fp32 logits
  return std::max<int64_t>(1, bytes / 4 / std::max<int64_t>(vocab, 1));
}

void EnableGpuWideGemms(bool on) { g_gpu_wide.store(on); }

at::Tensor LinearCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& targets, int64_t chunk_rows) {
  TENAX_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1));
  TENAX_CHECK(targets.dim() == 1 && targets.size(0) == x.size(0));
  const int64_t rows =
      chunk_rows > 0 ? chunk_rows : CrossEntropyChunkRows(weight.size(0), GpuWide(x));
  const bool need_grad =
      at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  return ChunkedLinearCrossEntropy::apply(x, weight, targets.to(at::kLong), rows, need_grad);
}

}  // namespace tenax::model
