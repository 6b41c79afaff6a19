#include "tenax/train/device.h"

#include <sys/resource.h>

#include <utility>
#include <vector>

#include "tenax/core/torch_compat.h"

#if defined(TENAX_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace tenax::train {

std::optional<double> PeakBf16Flops(const std::string& name) {
  // Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets. Order matters:
  // more specific names first ("H100 PCIe" before "H100").
  static const std::vector<std::pair<const char*, double>> table = {
      {"GH200", 989.4e12}, {"H200", 989.4e12},  {"H100 PCIe", 756.0e12}, {"H100 NVL", 835.0e12},
      {"H100", 989.4e12},  {"H800", 989.4e12},  {"B200", 2250e12},       {"A100", 312e12},
      {"A800", 312e12},    {"L40S", 362.05e12}, {"L4", 121e12},          {"A10G", 70e12},
      {"A10", 125e12},     {"RTX 4090", 165.2e12}, {"V100", 125e12},
  };
  for (const auto& [key, flops] : table) {
    if (name.find(key) != std::string::npos) return flops;
  }
  return std::nullopt;
}

Result<DeviceInfo> ResolveDevice(const TrainingOptions& o) {
  DeviceInfo info;
  const bool cuda = compat::CudaAvailable();
  if (o.device == "cuda" && !cuda) {
    return InvalidArgument(
        "training.device = \"cuda\" but this libtorch has no usable CUDA device; use \"auto\" or "
        "\"cpu\", or build against a CUDA libtorch (see README: GPU build)");
  }
  if (o.device == "cuda" || (o.device == "auto" && cuda)) {
    info.device = at::Device(at::kCUDA, 0);
#if defined(TENAX_WITH_CUDA)
    info.name = at::cuda::getCurrentDeviceProperties()->name;
#else
    info.name = "cuda";
#endif
    info.peak_flops = PeakBf16Flops(info.name);
  } else {
    info.device = at::kCPU;
    info.name = "cpu";
  }
  const std::string mp = o.mixed_precision;
  if (mp == "bf16" || (mp == "auto" && info.device.is_cuda())) {
    info.compute_dtype = at::kBFloat16;
  } else {
    info.compute_dtype = at::kFloat;
  }
  return info;
}

int64_t PeakMemoryBytes(const DeviceInfo& device) {
#if defined(TENAX_WITH_CUDA)
  if (device.device.is_cuda()) return compat::CudaPeakAllocatedBytes(device.device.index());
#endif
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace tenax::train
