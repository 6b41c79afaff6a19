// One AdamW update of a run of fp32 elements in one pass (adamw.h's UpdateMode::kLoop, the CPU's
// default): parameter, gradient and both moments are read once and written once, where the ATen
// sequence of adamw.cc makes seven passes per parameter.
//
// Bit-identical to that sequence as the libtorch we build against computes it (optim_test.cc
// compares both with the per-parameter reference loop, tolerance 0): every element sees the same
// IEEE operations in the same order, the scalars rounded to fp32 as ATen rounds a Scalar for an
// fp32 tensor, and a fused multiply-add exactly where Debian's libtorch 1.13 has one (its
// add(alpha), and its addcmul, which GCC contracted when building it). The file is compiled with
// -ffp-contract=off (CMakeLists.txt) so that the compiler fuses nothing else. A libtorch built
// otherwise would fail that test, not train differently from run to run.
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
