// Hardware profiles: what the planner knows about a GPU and its cluster. Profiles are TOML data
// files (configs/hardware/*.toml) that users copy and edit; a profile may `inherits = "other"` and
// override only what differs, which is also how `tenax plan --calibrate` writes its fits.
//
// A profile holds specifications (peaks, capacities, link rates from data sheets) and component
// measurements (the fraction of a peak that a matmul, a memory-bound kernel or an NCCL collective
// reaches; attention kernel throughput by sequence length), each with its source in the file.
// Software choices (overlapping communication, attention kernel, recomputation) are not here:
// they are options of the run (workload.h).
// Non-goals: detecting the hardware at hand (the profile is the user's statement of it); more than
// two link levels (NVLink inside a node, one network between nodes).
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::plan {

// An alpha-beta link: each step of a collective costs `latency`, and the bytes move at the line
// rate `bandwidth` (per GPU, one direction) times the measured bus-bandwidth fraction.
struct Link {
  double bandwidth = 0;  // bytes/s per GPU, one direction (the line rate)
  double latency = 0;    // seconds per step of a collective (NCCL's per-hop cost)
};

// Measured fractions of a peak (the calibration inputs; docs/planner.md, "Calibration").
struct Efficiency {
  double matmul = 0;              // bf16 GEMM compute ceiling, fraction of peak_bf16
  double fp8_matmul = 0;          // fp8 GEMM compute ceiling, fraction of peak_fp8
  double memory_bound = 0;        // streaming kernels, fraction of HBM bandwidth
  double collective_nvlink = 0;   // NCCL ring bus bandwidth / NVLink line rate
  double allreduce_nvlink = 0;    // all-reduce bus bandwidth / NVLink line rate (NVLink SHARP)
  double collective_network = 0;  // NCCL bus bandwidth per NIC / NIC line rate
  double attention = 1;           // multiplier on the attention kernel tables (calibration hook)
  // Hidden communication is not free: NCCL kernels occupy SMs and HBM bandwidth while compute
  // runs. Each second of hidden traffic still costs this many seconds of compute.
  double comm_interference = 0;
};

// Throughput of a fused attention kernel (forward + backward, causal, head dim 128, bf16) by
// sequence length, in the FlashAttention papers' FLOP convention (forward 4 s^2 d H / 2 for causal,
// backward 2.5 x forward). Interpolated in log(sequence length).
struct AttentionTable {
  std::vector<double> seq_len;
  std::vector<double> flops;  // FLOP/s
};

// A whole transformer layer timed on one GPU: forward + backward of one micro-batch, bf16,
// tensor parallelism 1, after the same work has held the GPU at its power limit (the sustained
// clock). Llama layers are torchtitan's formulation (fp32 RMSNorm, complex rotary, repeat_kv, SDPA
// with the profile's flash3 kernel, as PyTorch 2.11 runs it on Hopper); GPT layers are Megatron-LM
// 2021's (LayerNorm, biases, GELU, scores materialized, dropout 0.1 on the probabilities and both
// residual branches).
struct LayerMeasurement {
  bool gpt = false;                // a GPT layer (else Llama)
  std::string kernels = "eager";   // eager (one kernel per op) | compiled (torch.compile) | fused
                                   // (Megatron-LM's fused kernels)
  std::string recompute = "none";  // none | full (the forward again in backward) | selective
                                   // (Megatron's: the attention core): RecomputeName's words
  int64_t tp = 1;                  // tensor-parallel degree: GPUs of one node running the layer
  int64_t dim = 0, heads = 0, kv_heads = 0, ffn = 0, seq_len = 0, batch = 0;
  double seconds = 0;
};

// Component measurements kept in the profile to report how well it reproduces them (`tenax plan
// --validate`, calibration rows). They do not change any prediction.
struct CalibrationPoints {
  std::vector<std::array<double, 5>> gemm_bf16;          // batch, M, N, K, FLOP/s (burst clock)
  std::vector<std::array<double, 5>> gemm_fp8;           // batch, M, N, K, FLOP/s (burst clock)
  std::vector<std::array<double, 2>> allreduce_nvlink;   // bytes, bus bandwidth (bytes/s), 8 GPUs
  std::vector<std::array<double, 2>> allgather_nvlink;   // bytes, bus bandwidth (bytes/s), 8 GPUs
  std::vector<std::array<double, 2>> allreduce_network;  // bytes, bus bandwidth per NIC (bytes/s)
  // One linear layer forward + backward (three GEMMs) in fp8 against bf16: M, K, N of the
  // forward, and the measured speedup (bf16 time / fp8 time, casts included; burst clock).
  std::vector<std::array<double, 4>> fp8_linear;
  // Whole layers timed on the GPU (LayerMeasurement). They check that the components add up.
  std::vector<LayerMeasurement> layers;
};

struct HardwareProfile {
  std::string name;
  std::string description;
  std::string source;  // the file it was read from (and its parents), for messages
  int gpus_per_node = 0;
  int sm_count = 0;  // streaming multiprocessors: GEMM waves (wave quantization)
  // Fraction of the boost clock the GPU holds under sustained full load (at its power limit).
  // Kernel benchmarks (MAMF, the attention tables) run in bursts at boost clocks; a training run
  // is one long saturated run, so compute-bound kernels are derated by this.
  double sustained_clock = 1;
  double gemm_overhead = 0;  // seconds per GEMM beyond its roofline (launch, prologue, tail)
  double peak_bf16 = 0;      // FLOP/s, dense
  double peak_fp8 = 0;       // FLOP/s, dense; 0 when the GPU has no fp8 tensor cores
  double hbm_bytes = 0;
  double hbm_bandwidth = 0;   // bytes/s
  double reserved_bytes = 0;  // CUDA context, NCCL and allocator slack: not available to tensors
  Link nvlink;
  Link network;
  Efficiency eff;
  std::map<std::string, AttentionTable> attention;  // "flash2", "flash3"
  CalibrationPoints calibration;

  double usable_bytes() const { return hbm_bytes - reserved_bytes; }
};

// Folders searched for a profile given by name, in order: ./configs/hardware, then
// configs/hardware beside and above the running executable (via /proc/self/exe), then
// $TENAX_SOURCE_DIR/configs/hardware.
std::vector<std::string> HardwareSearchDirs();

// `name_or_path` is a profile name ("h100-sxm": NAME.toml in the search folders) or a path to a
// TOML file. Every field must be present (directly or inherited) and in range; errors name the
// file and the field.
Result<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path);
Result<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path,
                                            const std::vector<std::string>& search_dirs);
// Parses profile text; `inherits` is resolved through `search_dirs` (and the folder of `source`).
Result<HardwareProfile> ParseHardwareProfile(std::string_view toml_text, const std::string& source,
                                             const std::vector<std::string>& search_dirs);

// Names of the profiles found in the search folders (for error messages and --help).
std::vector<std::string> AvailableHardwareProfiles(const std::vector<std::string>& search_dirs);

}  // namespace tenax::plan
