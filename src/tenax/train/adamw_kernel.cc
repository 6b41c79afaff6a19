#include "tenax/train/adamw_kernel.h"

#include <cmath>

#include "tenax/core/cpu_clones.h"

namespace tenax::train {

// The ATen sequence, per element (adamw.cc StepOne), as Debian's libtorch 1.13 computes it: its
// kernels are built with GCC's default contraction, so self + (value * t1) * t2 (addcmul) is one
// fused multiply-add after the first product (measured against torch 1.13: 0 of 100,000 elements
// differ this way, 13,890 the other); add(alpha) is vec::fmadd.
//   decay:   p.mul_(1 - lr wd)                 p * f            | masks: p.addcmul_(p, mask, c)
//                                                                 fma(c * p, mask, p)
//   m.mul_(b1).add_(g, 1 - b1)                 fma(g, 1 - b1, m * b1)
//   v.mul_(b2).addcmul_(g, g, 1 - b2)          fma((1 - b2) * g, g, v * b2)
//   sqrt_out(d, v).div_(bias2_sqrt).add_(eps)  sqrt(v) / bias2_sqrt + eps
//   p.addcdiv_(m, d, step_size)                p + (step_size * m) / d
TENAX_CPU_CLONES void AdamWUpdate(float* p, const float* g, float* m, float* v, const float* mask,
                                  int64_t begin, int64_t end, const AdamWScalars& s) {
  const float f = s.decay_factor, c = s.decay_coef, b1 = s.beta1, a1 = s.one_minus_beta1,
              b2 = s.beta2, a2 = s.one_minus_beta2, bias2 = s.bias2_sqrt, eps = s.eps,
              step = s.step_size;
  const bool scale = s.decay == AdamWScalars::Decay::kScale;
  const bool masked = s.decay == AdamWScalars::Decay::kMask;
  for (int64_t i = begin; i < end; ++i) {
    float pi = p[i];
    if (scale) pi = pi * f;
    if (masked) pi = __builtin_fmaf(c * pi, mask[i], pi);
    const float gi = g[i];
    const float mi = __builtin_fmaf(gi, a1, m[i] * b1);
    const float vi = __builtin_fmaf(a2 * gi, gi, v[i] * b2);
    const float d = __builtin_sqrtf(vi) / bias2 + eps;
    p[i] = pi + (step * mi) / d;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace tenax::train
