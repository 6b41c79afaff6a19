// One AdamW update of a run of fp32 elements in one pass (adamw.h's UpdateMode::kLoop, the CPU's
// default): parameter, gradient and both moments are read once and written once, where the ATen
// sequence of adamw.cc makes seven passes per parameter.
//
// What it computes, against the ATen sequence of the libtorch we build against (PyTorch 2.11's
// wheel; optim_test.cc compares both with the per-parameter reference loop): the moments m and v
// bit for bit (the same IEEE operations in the same order, the scalars rounded to fp32 as ATen
// rounds a Scalar for an fp32 tensor, a fused multiply-add exactly where ATen has one: add(alpha)
// and addcmul, both vec::fmadd). The parameter may differ in its last bit per step: ATen's
// vectorized square root (AVX2) is not correctly rounded, this one's is (16% of elements differ
// by one ulp in sqrt(v)), so the update can round the other way. The file is compiled with
// -ffp-contract=off (CMakeLists.txt) so that the compiler fuses nothing else. Runs are still
// bit-identical to each other: the same kernel every time, at any thread count.
// Thread safety: the caller splits the range (model::ParallelFor); elements are independent.
#pragma once

#include <cstdint>

namespace tenax::train {

struct AdamWScalars {
  enum class Decay { kNone, kScale, kMask };
  Decay decay = Decay::kNone;
  float decay_factor = 1;  // kScale: p *= 1 - lr wd
  float decay_coef = 0;    // kMask: p += (-lr wd) p mask
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float bias2_sqrt = 1;  // sqrt(1 - beta2^t)
  float eps = 0;
  float step_size = 0;  // -lr / (1 - beta1^t)
};

// Elements [begin, end) of p, g, m, v (and mask for Decay::kMask).
void AdamWUpdate(float* p, const float* g, float* m, float* v, const float* mask, int64_t begin,
                 int64_t end, const AdamWScalars& s);

}  // namespace tenax::train
