#include "tenax/train/device.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "tenax/core/torch_compat.h"
#include "tenax/model/cpu_gemm.h"

#if defined(TENAX_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tenax::train {

std::optional<double> PeakFlops(const std::string& name, PeakPrecision precision) {
  struct Peak {
    const char* key;
    double bf16;
    double fp8;  // 0: no fp8 tensor cores
  };
  // Order matters: more specific names first ("H100 PCIe" before "H100", "GH200" before
  // "H200"). H100 SXM and H200 share the GH100 die and clock: the same peaks; B200 as its HGX
  // data sheet gives it (1000 W).
  static const std::vector<Peak> table = {
      {"GH200", 989.4e12, 1978.9e12},
      {"H200", 989.4e12, 1978.9e12},
      {"H100 PCIe", 756.0e12, 1513.0e12},
      {"H100 NVL", 835.0e12, 1670.5e12},
      {"H100", 989.4e12, 1978.9e12},
      {"H800", 989.4e12, 1978.9e12},
      {"B200", 2250e12, 4500e12},
      {"A100", 312e12, 0},
      {"A800", 312e12, 0},
      {"L40S", 362.05e12, 733e12},
      {"L4", 121e12, 242.5e12},
      {"A10G", 70e12, 0},
      {"A10", 125e12, 0},
      {"RTX 4090", 165.2e12, 330.3e12},
      {"V100", 125e12, 0},
  };
  for (const Peak& p : table) {
    if (name.find(p.key) == std::string::npos) continue;
    const double v = precision == PeakPrecision::kFp8 ? p.fp8 : p.bf16;
    if (v <= 0) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

Result<DeviceInfo> ResolveDevice(const TrainingOptions& o, int local_rank) {
  DeviceInfo info;
  const bool cuda = compat::CudaAvailable();
  if (o.device == "cuda" && !cuda) {
    return InvalidArgument(
        "training.device = \"cuda\" but this libtorch has no usable CUDA device; use \"auto\" or "
        "\"cpu\", or build against a CUDA libtorch (see README: GPU build)");
  }
  if (o.device == "cuda" || (o.device == "auto" && cuda)) {
#if defined(TENAX_WITH_CUDA)
    const int count = static_cast<int>(c10::cuda::device_count());
    if (local_rank >= count) {
      return InvalidArgument(fmt::format(
          "LOCAL_RANK {} needs GPU {}, but this node shows {} GPU(s){}: start at most {} rank(s) "
          "per node (tenax launch --nproc-per-node, torchrun --nproc-per-node, srun "
          "--ntasks-per-node), or make the GPUs visible",
          local_rank, local_rank, count,
          std::getenv("CUDA_VISIBLE_DEVICES") != nullptr
              ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", std::getenv("CUDA_VISIBLE_DEVICES"))
              : "",
          count));
    }
    info.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
    info.name = at::cuda::getDeviceProperties(local_rank)->name;
#else
    info.device = at::Device(at::kCUDA, 0);
    info.name = "cuda";
#endif
    info.peak_flops = PeakBf16Flops(info.name);
  } else {
    info.device = at::kCPU;
    info.name = "cpu";
  }
  const std::string mp = o.mixed_precision;
  info.fp8_matmuls = mp == "fp8";
  if (mp == "bf16" || mp == "fp8" || (mp == "auto" && info.device.is_cuda())) {
    info.compute_dtype = at::kBFloat16;
  } else {
    info.compute_dtype = at::kFloat;
  }
  return info;
}

Status CheckFp8Shapes(const DeviceInfo& device, const ModelSpec& spec, int64_t seq_len,
                      int64_t tensor_parallel, int64_t context_parallel) {
  if (!device.fp8_matmuls || !device.device.is_cuda()) return Status::Ok();
  const int64_t tp = tensor_parallel;
  const std::pair<const char*, int64_t> dims[] = {
      {"model.dim", spec.dim},
      {"the query width n_heads x head_dim / tensor_parallel", spec.n_heads * spec.head_dim() / tp},
      {"the key/value width n_kv_heads x head_dim / tensor_parallel",
       spec.n_kv_heads * spec.head_dim() / tp},
      {"the feed-forward width / tensor_parallel", spec.ffn_hidden_dim / tp},
      {"training.seq_len / context_parallel", seq_len / context_parallel},
  };
  for (const auto& [what, value] : dims) {
    if (value % 16 != 0) {
      return InvalidArgument(
          fmt::format("training.mixed_precision = \"fp8\": {} is {}, and float8 GEMMs on GPUs need "
                      "multiples of 16; change the model or layout, or train in \"bf16\"",
                      what, value));
    }
  }
  return Status::Ok();
}

CpuFacts ReadCpuFacts() {
  CpuFacts f;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) f.usable_cores = std::max(1, CPU_COUNT(&set));
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      f.avx512_bf16 = f.avx512_bf16 || w == "avx512_bf16";
      f.amx_bf16 = f.amx_bf16 || w == "amx_bf16";
    }
    break;  // every core reports the same flags
  }
  // OpenBLAS is reached through libblas.so.3 (Debian's alternatives), so ask the loaded library
  // rather than guess from package names.
  using GetThreads = int (*)();
  if (auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) {
    f.openblas_threads = get();
  }
  f.openblas_threads_from_env = std::getenv("OPENBLAS_NUM_THREADS") != nullptr;
  return f;
}

ThreadChoice ChooseThreads(const DeviceInfo& device, int64_t requested, const CpuFacts& cpu,
                           int local_world) {
  if (device.device.is_cuda()) {
    if (requested > 0) return {static_cast<int>(requested), 0, "training.threads"};
    return {at::get_num_threads(), 0, "libtorch's default (the GPU computes)"};
  }
  // OpenBLAS keeps to the calling thread (see device.h), unless the user set its threads.
  const int blas = cpu.openblas_threads > 0 && !cpu.openblas_threads_from_env ? 1 : 0;
  if (requested > 0) return {static_cast<int>(requested), blas, "training.threads"};
  if (device.compute_dtype != at::kBFloat16 && !model::CpuSgemmAvailable()) {
    return {1, 0, "fp32 matmuls run in OpenBLAS on its own threads (built without oneDNN)"};
  }
  const int n = std::max(1, cpu.usable_cores / std::max(1, local_world));
  const char* what = device.compute_dtype == at::kBFloat16 ? "bf16" : "fp32";
  return {n, blas,
          local_world > 1
              ? fmt::format("{} matmuls run in oneDNN on these threads: {} cores / {} ranks on "
                            "this host",
                            what, cpu.usable_cores, local_world)
              : fmt::format("{} matmuls run in oneDNN on these threads: every core", what)};
}

void ApplyThreads(const ThreadChoice& threads) {
  at::set_num_threads(threads.intra_op_threads);
  if (threads.blas_threads <= 0) return;
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads.blas_threads);
  }
}

std::string DescribeCompute(const DeviceInfo& device, const ThreadChoice& threads,
                            const CpuFacts& cpu) {
  std::string line = fmt::format("compute: {}, {}, {} intra-op thread(s) ({})", device.name,
                                 device.compute_dtype == at::kBFloat16 ? "bf16"
                                 : device.compute_dtype == at::kDouble ? "fp64"
                                                                       : "fp32",
                                 threads.intra_op_threads, threads.reason);
  if (device.device.is_cuda()) return line;
  if (cpu.openblas_threads <= 0) {
    line += ", BLAS is not OpenBLAS";
  } else if (threads.blas_threads > 0) {
    line +=
        fmt::format(", OpenBLAS {} thread(s) (attention's batched products)", threads.blas_threads);
  } else {
    line += fmt::format(", OpenBLAS {} thread(s){}", cpu.openblas_threads,
                        cpu.openblas_threads_from_env ? " (OPENBLAS_NUM_THREADS)" : "");
  }
  const bool bf16_cpu = cpu.avx512_bf16 || cpu.amx_bf16;
  if (!bf16_cpu && device.compute_dtype == at::kBFloat16) {
    // PyTorch 2.11's bf16 matmul on an AVX2 core: 4 GFLOP/s against fp32's 130 (2 threads,
    // docs/performance.md), so a bf16 run is some 30x slower than an fp32 one.
    line +=
        "; this CPU has no bf16 units (no AVX512-BF16 or AMX): bf16 products are emulated and "
        "far slower than fp32 (set training.mixed_precision = \"fp32\")";
  }
  if (bf16_cpu && device.compute_dtype == at::kFloat) {
    line += fmt::format(
        "; this CPU has bf16 {} (training.mixed_precision = \"bf16\" may be faster; "
        "measure with bench/side_by_side.py)",
        cpu.amx_bf16 ? "matrix units (AMX)" : "dot products (AVX512-BF16)");
  }
  return line;
}

AllocatorChoice ChooseCpuAllocator(const std::function<const char*(const char*)>& getenv) {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_"}) {
    if (getenv(name) != nullptr) return {false, fmt::format("{} is set: left as it is", name)};
  }
  const char* tunables = getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string(tunables).find("glibc.malloc.") != std::string::npos) {
    return {false, "GLIBC_TUNABLES sets glibc.malloc: left as it is"};
  }
  if (const char* preload = getenv("LD_PRELOAD")) {
    for (const char* other : {"jemalloc", "tcmalloc", "mimalloc"}) {
      if (std::string(preload).find(other) != std::string::npos) {
        return {false, fmt::format("LD_PRELOAD brings {}: glibc's malloc is not in use", other)};
      }
    }
  }
  return {true, fmt::format("malloc keeps freed blocks below {} MiB for the next step (no trim)",
                            kMallocKeepBelowBytes >> 20)};
}

bool KeepFreedCpuMemory() {
  // Setting either threshold also turns off glibc's own adjustment of them.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMallocKeepBelowBytes)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
  return mmap_ok && trim_ok;
}

AllocatorChoice SetUpCpuAllocator() {
  AllocatorChoice choice = ChooseCpuAllocator([](const char* name) { return std::getenv(name); });
  if (choice.keep && !KeepFreedCpuMemory()) {
    return {false, "glibc refused the malloc thresholds: left at its defaults"};
  }
  return choice;
}

std::optional<GpuMemory> ReadGpuMemory(const DeviceInfo& device) {
#if defined(TENAX_WITH_CUDA)
  if (device.device.is_cuda()) {
    const compat::CudaMemoryStats s = compat::CudaMemory(device.device.index());
    return GpuMemory{s.allocated, s.reserved, s.peak_allocated, s.peak_reserved};
  }
#endif
  (void)device;
  return std::nullopt;
}

int64_t PeakMemoryBytes(const DeviceInfo& device) {
#if defined(TENAX_WITH_CUDA)
  if (device.device.is_cuda()) return compat::CudaMemory(device.device.index()).peak_allocated;
#endif
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace tenax::train
