#include "tenax/model/host_copies.h"

#include <ATen/ATen.h>

#if defined(TENAX_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "tenax/core/check.h"

namespace tenax::model {

HostCopies::HostCopies(const std::vector<at::Tensor>& tensors) {
  host_.reserve(tensors.size());
#if defined(TENAX_WITH_CUDA)
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    TENAX_CHECK_MSG(device_ < 0 || device_ == t.get_device(), "HostCopies: one device per set");
    device_ = t.get_device();
  }
  if (device_ >= 0) {
    const auto index = static_cast<c10::DeviceIndex>(device_);
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(index);
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    at::cuda::CUDAEvent queued;
    queued.record(compute);
    queued.block(side);  // the copies read what the compute stream has written so far
    {
      c10::cuda::CUDAStreamGuard guard(side);
      for (const at::Tensor& t : tensors) {
        if (!t.defined() || !t.is_cuda()) {
          host_.push_back(t);
          continue;
        }
        at::Tensor src = t.detach();
        at::Tensor dst = at::empty(src.sizes(), src.options().device(at::kCPU).pinned_memory(true));
        dst.copy_(src, /*non_blocking=*/true);
        // The source may be a temporary of the compute stream (a reshaped view's copy): its
        // memory must not be handed out again before the side stream has read it.
        c10::cuda::CUDACachingAllocator::recordStream(src.storage().data_ptr(), side);
        host_.push_back(dst);
      }
    }
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(side);
    done_ = done;
    return;
  }
#endif
  for (const at::Tensor& t : tensors) {
    TENAX_CHECK_MSG(!t.defined() || t.is_cpu(), "HostCopies: a device tensor in a CPU build");
    host_.push_back(t);
  }
}

HostCopies::~HostCopies() {
  // Pinned buffers go back to the host allocator only after the copies into them have landed.
  if (done_) Wait();
}

void HostCopies::Wait() const {
#if defined(TENAX_WITH_CUDA)
  if (done_) static_cast<at::cuda::CUDAEvent*>(done_.get())->synchronize();
#endif
}

void HostCopies::OrderBeforeCurrentStream() const {
#if defined(TENAX_WITH_CUDA)
  if (!done_) return;
  const auto index = static_cast<c10::DeviceIndex>(device_);
  static_cast<at::cuda::CUDAEvent*>(done_.get())->block(c10::cuda::getCurrentCUDAStream(index));
#endif
}

}  // namespace tenax::model
