#include "tenax/train/adamw_kernel.h"

#include <cmath>

#include "tenax/core/cpu_clones.h"

namespace tenax::train {

// The ATen sequence, per element (adamw.cc StepOne), as PyTorch 2.11's CPU kernels compute it
// (measured with the wheel's torch on 100,003 elements: 0 differ in each step below, except
// ATen's sqrt, which is not correctly rounded: adamw_kernel.h). addcmul is
// fma(value * t1, t2, self) and add(alpha) is fma(other, alpha, self), as in 1.13.
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
