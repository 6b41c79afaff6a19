#include "tenax/model/layers.h"

#include <cmath>
#include <vector>

#include "tenax/model/attention.h"
#include "tenax/model/cpu_gemm.h"
#include "tenax/model/fp8.h"
#include "tenax/model/fused_layers.h"

namespace tenax::model {
at::Tensor RopeInverseFrequencies(const ModelSpec& spec) {
  const int64_t half = spec.head_dim() / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  const RopeScaling& rs = spec.rope_scaling;
  const double low_wavelen = rs.original_max_position / rs.low_freq_factor;
  const double high_wavelen = rs.original_max_position / rs.high_freq_factor;
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(spec.rope_theta, static_cast<double>(2 * i) / spec.head_dim());
    if (rs.enabled) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (rs.original_max_position / wavelen - rs.low_freq_factor) /
                              (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
    }
    inv[static_cast<size_t>(i)] = f;
  }
  return at::tensor(inv, at::kDouble);
}

RopeTable MakeRopeTable(const ModelSpec& spec, int64_t seq_len, const at::Device& device) {
  // Angles in fp64 so long positions (128K) keep their precision before the fp32 cast.
  at::Tensor pos = at::arange(seq_len, at::kDouble);
  at::Tensor angles = at::outer(pos, RopeInverseFrequencies(spec));  // (T, D/2)
  return RopeTable{angles.cos().to(device, at::kFloat), angles.sin().to(device, at::kFloat)};
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return FusedRmsNorm(x, weight, eps);
}

at::Tensor ApplyRope(const at::Tensor& x, const RopeTable& rope) {
  return FusedRope(x, rope.cos, rope.sin);
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  if (UseCpuLinear(x, weight)) {
    return CpuLinearFp32(x, weight);  // fp32 on the CPU: oneDNN's sgemm (model/cpu_gemm.h)
  }
  if (UseCpuLinearBf16(x, weight)) {
    return CpuLinearBf16(x, weight);  // bf16 on the CPU: fp32 weight gradient from oneDNN
  }
  return at::matmul(x, weight.to(x.scalar_type()).t());
}

at::Tensor BlockLinear(const at::Tensor& x, const at::Tensor& weight, BlockMatmul mm) {
  return mm == BlockMatmul::kFp8 ? Fp8Linear(x, weight) : Linear(x, weight);
}

at::Tensor Attention(const at::Tensor& x, const at::Tensor& wq, const at::Tensor& wk,
                     const at::Tensor& wv, const at::Tensor& wo, int64_t n_heads,
                     int64_t n_kv_heads, const RopeTable& rope, const AttentionFn& attend,
                     BlockMatmul mm) {
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t d = wq.size(0) / n_heads;
  at::Tensor q = ApplyRope(BlockLinear(x, wq, mm).view({b, t, n_heads, d}), rope);  // (B, T, H, D)
  at::Tensor k = ApplyRope(BlockLinear(x, wk, mm).view({b, t, n_kv_heads, d}), rope);
  at::Tensor v = BlockLinear(x, wv, mm).view({b, t, n_kv_heads, d});  // k, v: (B, T, K, D)
  // K and V stay at K heads: the path (fused, grouped, blockwise) is chosen in one place.
  at::Tensor y = attend ? attend(q, k, v) : CausalGqaAttention(q, k, v);  // (B, T, H, D)
  return BlockLinear(y.reshape({b, t, n_heads * d}), wo, mm);
}

at::Tensor FeedForward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2,
                       const at::Tensor& w3, BlockMatmul mm) {
  return BlockLinear(SiluMul(BlockLinear(x, w1, mm), BlockLinear(x, w3, mm)), w2, mm);
}

}  // namespace tenax::model
