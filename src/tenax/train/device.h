// Where training runs and how fast that hardware is: device and compute-dtype resolution, the
// bf16 dense peak of known GPUs (for MFU), and peak memory. CUDA-only queries compile only when
// libtorch has CUDA (TENAX_WITH_CUDA); on CPU, MFU is undefined and tenax logs FLOP/s instead.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax::train {

struct DeviceInfo {
  at::Device device = at::kCPU;
  at::ScalarType compute_dtype = at::kFloat;
  std::string name;                     // "cpu" or the GPU's name
  std::optional<double> peak_flops;     // bf16 dense FLOP/s, when the GPU is known
};

Result<DeviceInfo> ResolveDevice(const TrainingOptions& options);
// Dense bf16 peak FLOP/s by GPU name ("NVIDIA H100 80GB HBM3" -> 989e12); nullopt if unknown.
std::optional<double> PeakBf16Flops(const std::string& gpu_name);
// Peak bytes in use: the CUDA caching allocator's peak on GPU, the process's max RSS on CPU.
int64_t PeakMemoryBytes(const DeviceInfo& device);

}  // namespace tenax::train
