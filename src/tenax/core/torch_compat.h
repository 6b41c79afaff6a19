// The one place where libtorch version differences live (Debian's 1.13 CPU build on dev/CI
// machines, PyTorch 2.x with CUDA on the GPU machine). Everything else calls these helpers.
// Header-only, included only by targets that link libtorch.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/api/include/torch/version.h>

#if defined(TENAX_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cmath>

#define TENAX_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace tenax::compat {

// Causal softmax attention on (B, H, T, D) tensors with equal head counts. 2.x uses the fused
// scaled_dot_product_attention (flash / memory-efficient kernels on GPU); 1.13 has none, so it
// spells out softmax(QK^T / sqrt(D) + causal mask) V.
inline at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TENAX_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true);
#else
  const int64_t t = q.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(scale);
  at::Tensor mask = at::ones({t, t}, q.options().dtype(at::kBool)).triu_(1);
  scores.masked_fill_(mask, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

inline bool CudaAvailable() { return at::hasCUDA(); }

#if defined(TENAX_WITH_CUDA)
// The caching allocator's statistics API moved between releases (DeviceStats fields became
// arrays indexed by StatType in 1.x and stayed so in 2.x; the accessor namespace is stable).
inline int64_t CudaPeakAllocatedBytes(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return stats.allocated_bytes[static_cast<size_t>(
                                   c10::cuda::CUDACachingAllocator::StatType::AGGREGATE)]
      .peak;
}
#endif

}  // namespace tenax::compat
