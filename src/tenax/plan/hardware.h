// Hardware profiles: what the planner knows about a GPU and its cluster (peak FLOP/s, HBM size and
// bandwidth, NVLink and network bandwidth and latency, GPUs per node) plus the efficiencies that
// turn peaks into achieved speeds. Profiles are TOML data files (configs/hardware/*.toml) that
// users copy and edit; a profile may `inherits = "other"` and override only what differs, which is
// also how `tenax plan --calibrate` writes its fitted efficiencies.
// Non-goals: detecting the hardware at hand (the profile is the user's statement of it); modelling
// more than two link levels (NVLink inside a node, one network between nodes).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::plan {

// An alpha-beta link: a message of B bytes costs latency + B / bandwidth.
struct Link {
  double bandwidth = 0;  // bytes/s per GPU, one direction
  double latency = 0;    // seconds per step of a collective (NCCL's per-hop cost)
};

// Fractions of a peak that software reaches on this machine (see docs/planner.md for each).
struct Efficiency {
  double matmul = 0;                 // large bf16 GEMMs, fraction of peak_bf16
  double matmul_half_intensity = 0;  // FLOP/byte at which a GEMM reaches half of `matmul`
  double fp8_matmul = 0;             // large fp8 GEMMs, fraction of peak_fp8
  double attention = 0;              // causal flash attention forward+backward, of peak_bf16
  double memory_bound = 0;           // elementwise kernels, fraction of HBM bandwidth
  double collective_nvlink = 0;      // NCCL ring bus bandwidth / NVLink bandwidth
  double collective_network = 0;     // NCCL ring bus bandwidth / network bandwidth
  double tp_overlap = 0;             // fraction of tensor-parallel traffic hidden by compute
  double dp_overlap = 0;  // fraction of FSDP/DP traffic hidden when compute is long enough
  double pp_overlap = 0;  // fraction of steady-state pipeline sends hidden
  // Hidden communication is not free: NCCL kernels occupy SMs and HBM bandwidth while compute
  // runs. Each second of hidden traffic still costs this many seconds of compute.
  double comm_interference = 0;
};

struct HardwareProfile {
  std::string name;
  std::string description;
  std::string source;  // the file it was read from (and its parents), for messages
  int gpus_per_node = 0;
  double peak_bf16 = 0;  // FLOP/s, dense
  double peak_fp8 = 0;   // FLOP/s, dense; 0 when the GPU has no fp8 tensor cores
  double hbm_bytes = 0;
  double hbm_bandwidth = 0;   // bytes/s
  double reserved_bytes = 0;  // CUDA context, NCCL and allocator slack: not available to tensors
  Link nvlink;
  Link network;
  Efficiency eff;

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
