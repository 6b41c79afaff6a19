#include "tenax/plan/moe_model.h"

#include <fmt/format.h>

#include "tenax/plan/kernels.h"

namespace tenax::plan {
namespace {

// Elementwise bytes per element, eager kernels (as cost_model.cc counts them): SwiGLU's silu and
// product (10 B per F element); the row gather that builds the routed rows and the one that
// regroups them by expert under expert parallelism (read 2 + write 2 B each per h element); the
// combine (gather back, scale by the gate, sum over k: 6 B per row element); the fp32 router
// softmax and top-k (12 B per expert score).
constexpr double kSwigluBytes = 10.0;
constexpr double kGatherBytes = 4.0;
constexpr double kCombineBytes = 6.0;
constexpr double kRouterBytes = 12.0;

}  // namespace

bool IsMoe(const Workload& w) { return w.model.moe.enabled(); }

double MoeFraction(const Workload& w) {
  return static_cast<double>(w.model.n_moe_layers()) / static_cast<double>(w.model.n_layers);
}

double LayerParamsOnGpu(const Workload& w, int64_t tp, int64_t ep, double* experts) {
  const LayerWidths lw = WidthsFor(w.model, tp, w.arch);
  if (experts != nullptr) *experts = 0;
  if (!IsMoe(w)) return lw.params;
  const MoeSpec& e = w.model.moe;
  const double h = static_cast<double>(lw.h), f = static_cast<double>(e.ffn_hidden_dim);
  const double dense_mlp = (w.arch.gated_mlp ? 3.0 : 2.0) * h * static_cast<double>(lw.f);
  const double routed = static_cast<double>(e.n_experts) * 3.0 * h * f / static_cast<double>(ep);
  const double moe_layer = lw.params - dense_mlp + static_cast<double>(e.n_experts) * h +
                           3.0 * h * f * static_cast<double>(e.n_shared) + routed;
  const double frac = MoeFraction(w);
  if (experts != nullptr) *experts = frac * routed;
  return (1.0 - frac) * lw.params + frac * moe_layer;
}

double MoeFeedForwardBytesPerToken(const Workload& w, int64_t tp) {
  const MoeSpec& e = w.model.moe;
  const double h = static_cast<double>(w.model.dim), f = static_cast<double>(e.ffn_hidden_dim);
  const double k = static_cast<double>(e.top_k);
  // Per token of the GPU's micro-batch before the tensor-parallel split: its k rows (input 2h,
  // SwiGLU's w1 and w3 outputs, silu and product 4 x 2F, output 2h), the router's fp32
  // probabilities and logits (8E), the shared experts' SwiGLU (8 S F), the combined output (2h).
  const double per_token = k * (4.0 * h + 8.0 * f) + 8.0 * static_cast<double>(e.n_experts) +
                           8.0 * static_cast<double>(e.n_shared) * f + 2.0 * h;
  return per_token / static_cast<double>(tp);
}

MoeFeedForwardTime EstimateMoeFeedForward(const Workload& w, const HardwareProfile& hw, int64_t tp,
                                          int64_t cp, int64_t micro_batch, int64_t ep, bool fp8) {
  MoeFeedForwardTime t;
  const MoeSpec& e = w.model.moe;
  const Precision prec = fp8 && hw.peak_fp8 > 0 ? Precision::kFp8 : Precision::kBf16;
  const double h = static_cast<double>(w.model.dim), f = static_cast<double>(e.ffn_hidden_dim);
  const double experts = static_cast<double>(e.n_experts), k = static_cast<double>(e.top_k);
  // Tokens this GPU routes: its sequence shard of the micro-batch.
  const double n = static_cast<double>(micro_batch * w.seq_len / cp) / static_cast<double>(tp);
  const double rows = n * k;
  const double local_experts = experts / static_cast<double>(ep);
  const double rows_per_expert = rows * static_cast<double>(ep) / experts;  // balanced routing
  auto three = [&](double m, double out, double in, double batch, Precision p) {
    const double fwd = GemmTime(hw, m, out, in, p, batch);
    t.forward += fwd;
    return fwd + GemmTime(hw, m, in, out, p, batch) + GemmTime(hw, in, out, m, p, batch);
  };
  t.matmul += three(n, experts, h, 1, Precision::kBf16);  // the router (fp32 in tenax: small)
  // Experts: w1 and w3 (F x h) and w2 (h x F), one GEMM per held expert, sharing the waves.
  t.matmul += 2.0 * three(rows_per_expert, f, h, local_experts, prec) +
              three(rows_per_expert, h, f, local_experts, prec);
  if (e.n_shared > 0) {
    const double sf = static_cast<double>(e.n_shared) * f;
    t.matmul += 2.0 * three(n, sf, h, 1, prec) + three(n, h, sf, 1, prec);
  }
  const double ew_fwd = StreamTime(
      hw, rows * (kSwigluBytes * f + (ep > 1 ? 2.0 : 1.0) * kGatherBytes * h + kCombineBytes * h) +
              n * (kRouterBytes * experts + kSwigluBytes * static_cast<double>(e.n_shared) * f));
  t.elementwise = ew_fwd * (1.0 + kBackwardElementwiseFactor);
  t.forward += ew_fwd;
  // Dispatch and combine, forward and backward: each GPU's rows (bf16) to their experts' ranks.
  // The expert-parallel group is ep consecutive dp_shard ranks: stride tp x cp.
  const double bytes = rows * h * 2.0;
  const double one = AllToAllTime(hw, tp * cp, ep, bytes);
  t.all_to_all = 4.0 * one;
  t.forward += 2.0 * one;
  t.bytes_sent = bytes * (static_cast<double>(ep) - 1.0) / static_cast<double>(ep);
  return t;
}

std::string ExpertParallelProblem(const Workload& w, const Layout& l) {
  if (l.ep < 1) return "ep must be >= 1";
  if (l.ep == 1) return "";
  if (!IsMoe(w)) return fmt::format("ep ({}) needs a mixture-of-experts model", l.ep);
  if (w.model.moe.n_experts % l.ep != 0) {
    return fmt::format("n_experts ({}) % ep ({}) != 0", w.model.moe.n_experts, l.ep);
  }
  if (l.dp_shard % l.ep != 0) {
    return fmt::format("dp_shard ({}) % ep ({}) != 0 (expert parallelism borrows dp_shard ranks)",
                       l.dp_shard, l.ep);
  }
  return "";
}

}  // namespace tenax::plan
