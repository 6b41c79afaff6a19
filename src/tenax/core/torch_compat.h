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
// The caching allocator's statistics: DeviceStats fields are arrays indexed by StatType in 1.x
// and 2.x, but StatType left c10::cuda::CUDACachingAllocator (2.11 has it in c10::CachingAllocator,
// with the device-generic DeviceStats); its AGGREGATE entry is index 0 in every release.
struct CudaMemoryStats {
  int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
};
inline CudaMemoryStats CudaMemory(int device) {
  constexpr size_t kAggregate = 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return {stats.allocated_bytes[kAggregate].current, stats.reserved_bytes[kAggregate].current,
          stats.allocated_bytes[kAggregate].peak, stats.reserved_bytes[kAggregate].peak};
}
#endif

}  // namespace tenax::compat
