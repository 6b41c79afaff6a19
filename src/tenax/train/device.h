// Where training runs and how fast that hardware is: device and compute-dtype resolution, the
// bf16 dense peak of known GPUs (for MFU), and peak memory. CUDA-only queries compile only when
// libtorch has CUDA (TENAX_WITH_CUDA); on CPU, MFU is undefined and tenax logs FLOP/s instead.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "tenax/config/model_spec.h"
#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax::train {

struct DeviceInfo {
  at::Device device = at::kCPU;
  at::ScalarType compute_dtype = at::kFloat;
  bool fp8_matmuls = false;  // the blocks' matmuls in float8 (training.mixed_precision = "fp8")
  std::string name;          // "cpu" or the GPU's name
  std::optional<double> peak_flops;  // bf16 dense FLOP/s, when the GPU is known
};

// training.device for the rank with this LOCAL_RANK: on GPUs, cuda:<local_rank>, made the
// current device before anything else touches CUDA (one GPU per rank, as torchrun and
// `tenax launch --nproc-per-node` assume). An error when the node has fewer GPUs than ranks.
Result<DeviceInfo> ResolveDevice(const TrainingOptions& options, int local_rank = 0);

// Float8 matmuls on GPUs (cuBLASLt) need every GEMM dimension to be a multiple of 16: the model
// dim, the per-rank widths of the attention projections and the feed-forward (1 / tp of them),
// and the tokens of a micro-batch (whole local sequences, seq_len / cp tokens each). An error
// naming the first that is not, before training; always Ok without fp8 or on the CPU.
Status CheckFp8Shapes(const DeviceInfo& device, const ModelSpec& spec, int64_t seq_len,
                      int64_t tensor_parallel, int64_t context_parallel);

// What the CPU offers for training, read once from the machine (the usable cores of this
// process's affinity mask, bf16 instructions, the BLAS behind libblas.so.3).
struct CpuFacts {
  int usable_cores = 1;
  bool avx512_bf16 = false;  // bf16 dot products (oneDNN's bf16 matmuls run at full rate)
  bool amx_bf16 = false;     // bf16 matrix tiles
  int openblas_threads = 0;  // OpenBLAS's own thread count; 0 when the BLAS is not OpenBLAS
  bool openblas_threads_from_env = false;  // OPENBLAS_NUM_THREADS is set: the user's choice
};
CpuFacts ReadCpuFacts();

// libtorch's intra-op (OpenMP) threads for training, OpenBLAS's own, and why.
struct ThreadChoice {
  int intra_op_threads = 1;
  int blas_threads = 0;  // OpenBLAS's thread count to set; 0 leaves it as it is
  std::string reason;
};
// `requested` (training.threads) wins when > 0. On CPU the matmuls decide: bf16 ones run in
// oneDNN, and so do fp32 ones (model/cpu_gemm.h), on libtorch's OpenMP threads, so those get
// every core this rank may use (cores / ranks on this host). OpenBLAS is left with attention's
// small batched products; its own threads would spin against libtorch's on the same cores (fp32
// 29M shape: 995 against 1342 tokens/s, docs/performance.md), so it keeps to the calling thread,
// unless OPENBLAS_NUM_THREADS says otherwise. (A build without oneDNN keeps fp32 on one libtorch
// thread over OpenBLAS's own, as before.) On GPU the CPU threads only feed the device:
// libtorch's default.
ThreadChoice ChooseThreads(const DeviceInfo& device, int64_t requested, const CpuFacts& cpu,
                           int local_world);
// Sets libtorch's intra-op threads and, where the choice has one, OpenBLAS's thread count.
void ApplyThreads(const ThreadChoice& threads);
// The line logged at start: device, precision, threads and the reason, BLAS threads, and on a
// bf16-capable CPU training in fp32, the setting that would use it.
std::string DescribeCompute(const DeviceInfo& device, const ThreadChoice& threads,
                            const CpuFacts& cpu);
// glibc's malloc gives a freed block of 128 KiB or more back to the kernel (munmap, or a trim of
// the heap's top), so on CPU every step's activations and gradients fault in fresh zeroed pages:
// 4-13% of a step on the bench shapes (docs/performance.md). Keeping them, blocks up to 32 MiB
// (the largest mmap threshold glibc accepts) come from the heap and freed memory is never trimmed,
// so the heap stays at the step's peak, which the peak RSS already was. The user's own settings
// win: MALLOC_*_ variables, GLIBC_TUNABLES with glibc.malloc.*, or another malloc in LD_PRELOAD.
struct AllocatorChoice {
  bool keep = false;   // set the two thresholds
  std::string reason;  // for the line logged at start
};
// `getenv` reads the environment (injectable for tests).
AllocatorChoice ChooseCpuAllocator(const std::function<const char*(const char*)>& getenv);
// Applies the choice to this process (mallopt); false if glibc refused a setting.
bool KeepFreedCpuMemory();
// Both, from this process's environment, as `tenax train` does on CPU: `keep` says whether the
// thresholds are now set, `reason` what to log.
AllocatorChoice SetUpCpuAllocator();
inline constexpr size_t kMallocKeepBelowBytes = size_t{32} << 20;

// Dense (no 2:4 sparsity) tensor-core peak FLOP/s by GPU name, from the vendors' data sheets,
// for MFU: bf16, or fp8 (E4M3/E5M2 inputs) on GPUs that have it ("NVIDIA H100 80GB HBM3" ->
// 989.4e12 bf16, 1978.9e12 fp8). nullopt when the GPU is unknown or lacks the precision (A100:
// no fp8).
enum class PeakPrecision { kBf16, kFp8 };
std::optional<double> PeakFlops(const std::string& gpu_name, PeakPrecision precision);
inline std::optional<double> PeakBf16Flops(const std::string& gpu_name) {
  return PeakFlops(gpu_name, PeakPrecision::kBf16);
}
// Peak bytes in use: the CUDA caching allocator's peak on GPU, the process's max RSS on CPU.
int64_t PeakMemoryBytes(const DeviceInfo& device);
// The CUDA caching allocator's counters on a GPU (metrics.jsonl's mem_allocated_bytes,
// mem_reserved_bytes, mem_peak_reserved_bytes); nullopt on CPU. Reserved is what the allocator
// holds from the driver (allocated plus its cache), the figure that meets the GPU's capacity.
struct GpuMemory {
  int64_t allocated = 0;       // bytes in live tensors now
  int64_t reserved = 0;        // bytes held by the allocator now
  int64_t peak_allocated = 0;  // since the start (mem_peak_bytes)
  int64_t peak_reserved = 0;
};
std::optional<GpuMemory> ReadGpuMemory(const DeviceInfo& device);

}  // namespace tenax::train
