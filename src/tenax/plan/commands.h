// The flags of `tenax plan` and `tenax simulate` and the functions that run them (internal to
// plan/; cli.h is the public entry). Kept apart from cli.cc so each command's logic reads alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::plan {

struct PlanFlags {
  std::string model;
  int64_t gpus = 0;
  std::string gpu = "h100-sxm";
  int64_t seq_len = 0;
  std::string global_batch_tokens;
  std::string tokens;
  double price_per_gpu_hour = 0;
  int top = 5;
  bool json = false;
  bool explain = false;
  bool all = false;  // rank layouts tenax train cannot run yet too
  std::string fix;
  // Shape flags (0 = not given): any of them overrides --model's, or describes the model alone.
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  std::string arch;               // llama | gpt (shorthand for the four below)
  std::string mlp;                // swiglu | gelu
  std::string norm;               // rmsnorm | layernorm
  std::string biases;             // yes | no
  std::string learned_positions;  // yes | no
  std::string tie_embeddings;     // yes | no
  // Software features of the run.
  std::string kernels = "eager";
  std::string attention = "flash2";
  double dropout = 0;
  std::string sequence_parallel = "yes";
  std::string tp_overlap = "none";
  std::string cp_attention = "all-gather";
  std::string complex_rotary = "no";
  std::string dp_overlap = "yes";
  std::string pp_overlap = "no";
  std::string failure_rate;
  std::string checkpoint_cost = "30s";
  std::string checkpoint_bandwidth;  // when set: the checkpoint cost from the model's size
  std::string restart_cost = "10m";
  bool validate = false;
  std::vector<std::string> calibrate;
  std::string fit = "matmul";
  std::string out;
  std::string command_line;        // for the calibrated profile's header
  std::string from_run;            // a run folder: --from-run (from_run.h)
  int64_t sdc_check_interval = 0;  // silent-data-corruption checks: their cost in the times
};

struct SimulateFlags {
  int64_t gpus = 0;
  int64_t gpus_per_node = 8;
  std::string failure_rate;
  std::string checkpoint_cost;
  // Or the checkpoint cost from the model's size and the storage bandwidth (MoE: every expert).
  std::string model;
  std::string checkpoint_bandwidth;
  std::string restart_cost;
  std::string detect_time = "0s";
  int64_t spares = 0;
  std::string swap_time = "2m";
  std::string repair_time = "8h";
  std::string interval = "auto";
  std::string duration;
  int64_t replica_groups = 0;  // live recovery (simulate.h); 0: restart recovery
  std::string sdc_overhead;    // silent-data-corruption checks' cost, e.g. 7.5% (0: none)
  std::string heal_time = "2m";
  double short_handed_share = 0;  // live recovery (simulate.h); 0: the groups' share
  int64_t runs = 1000;
  uint64_t seed = 1;
  double price_per_gpu_hour = 0;
  bool json = false;
};

Status RunPlan(const PlanFlags& flags);
Status RunSimulate(const SimulateFlags& flags);

}  // namespace tenax::plan
