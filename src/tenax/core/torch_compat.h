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
inline int64_t CudaPeakAllocatedBytes(int device) {
  constexpr size_t kAggregate = 0;
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[kAggregate].peak;
}
#endif

}  // namespace tenax::compat

// c10d (collectives, stores) is opt-in: define TENAX_COMPAT_C10D before including this header.
// In 1.13 a Gloo or NCCL group is a c10d::ProcessGroup; from 2.0 on it is a c10d::Backend that a
// ProcessGroup wraps. Both expose the same collective methods, so tenax holds the backend type.
#if defined(TENAX_COMPAT_C10D) && !defined(TENAX_COMPAT_C10D_INCLUDED)
#define TENAX_COMPAT_C10D_INCLUDED
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#if TENAX_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
// PyTorch's pip wheels (the GPU machine's libtorch) ship no Gloo headers, though their libtorch
// has Gloo inside; Debian's libtorch-dev ships them.
#if __has_include(<gloo/algorithm.h>)
#define TENAX_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace tenax::compat {

#if TENAX_TORCH_AT_LEAST(2, 0)
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

inline c10::intrusive_ptr<C10dGroup> MakeGlooGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size,
                                                   std::chrono::milliseconds timeout) {
#if !defined(TENAX_HAVE_GLOO)
  (void)store, (void)rank, (void)size, (void)timeout;
  throw std::runtime_error(
      "this libtorch was installed without Gloo's headers (PyTorch's pip wheels ship none), so "
      "tenax was built without process groups: run one process, or build against a libtorch "
      "with them (Debian's libtorch-dev, or a source build of PyTorch)");
#else
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  // GLOO_SOCKET_IFNAME picks the network interface, as in PyTorch (whose Python layer, not the
  // C++ default device, reads it); without it Gloo uses the address the hostname resolves to.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  options->devices.push_back(ifname != nullptr && *ifname != '\0'
                                 ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                 : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#endif
}

// Whether the backend has native flat reduce-scatter / all-gather (NCCL does; 1.13's Gloo does
// not, and tenax builds them from alltoall_base and list all-gather instead).
inline bool HasNativeReduceScatter(const C10dGroup& group) {
  return group.getBackendName() == "nccl";
}

}  // namespace tenax::compat
#endif
