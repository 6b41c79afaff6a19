// Test-only: a bf16 result of a CPU loop (cpu_kernels.h) against the fp32 arithmetic it replaces,
// rounded to bf16. The two differ only in the last bits before rounding (exp, sum order, FMA), so
// an element may round to a neighbouring bf16 value, never further, and few elements differ.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace tenax::model::testing {

// What "one bf16 step" is measured at: each element's own magnitude, or the largest element's
// (for a difference of nearly equal terms, which is small where the terms cancel).
enum class StepAt { kEachElement, kLargestElement };

// Every element of `got` (bf16) within one bf16 step (2^(exponent - 7)) of `want` (any dtype,
// rounded to bf16 here), and at most `max_differing` of them not identical.
inline ::testing::AssertionResult WithinOneBf16Step(const at::Tensor& got, const at::Tensor& want,
                                                    double max_differing,
                                                    StepAt at = StepAt::kEachElement) {
  const at::Tensor g = got.to(at::kFloat), w = want.to(at::kBFloat16).to(at::kFloat);
  const at::Tensor diff = (g - w).abs();
  const at::Tensor magnitude = at == StepAt::kEachElement ? w.abs() : w.abs().max();
  const at::Tensor step = at::exp2(at::floor(at::log2(magnitude.clamp_min(1e-30))) - 7);
  const double differing = (g != w).to(at::kDouble).mean().item<double>();
  if (!(diff <= step).all().item<bool>()) {
    return ::testing::AssertionFailure()
           << (diff / step).max().item<double>() << " bf16 steps apart at most";
  }
  if (differing >= max_differing) {
    return ::testing::AssertionFailure()
           << differing << " of the elements differ (at most " << max_differing << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tenax::model::testing
