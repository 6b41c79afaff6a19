// The published end-to-end training results `tenax plan --validate` predicts (the validation
// rows), each with its source. None of them calibrates anything: the hardware profiles are built
// from component measurements only (configs/hardware/*.toml), and these rows measure how well the
// model generalises to runs it was never tuned on.
// What a publication pins (model, GPUs, batch, parallel degrees, recomputation, software stack) is
// given here; whatever it leaves out (micro-batch size, virtual stages, pipeline split, FSDP
// resharding) the planner chooses, the fastest that fits.
// Non-goals: results the planner cannot express (mixture-of-experts, other accelerators).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/plan/workload.h"

namespace tenax::plan {

enum class Metric {
  kModelTflops,     // TFLOP/s per GPU in the 6N + 12LHdS convention (Llama 3, torchtitan MFU)
  kHardwareTflops,  // TFLOP/s per GPU counting recomputation (Megatron-LM's 96Bslh^2(...) formula)
  kTokensPerGpu,    // tokens/s per GPU
};

struct PublishedRun {
  const char* group;    // e.g. "A100, Megatron-LM 2021"
  const char* claim;    // what ran (or owned_claim when built at run time)
  const char* source;   // where it is published
  const char* profile;  // hardware profile
  const char* preset;   // model preset, or "" for `shape`
  ModelSpec shape;      // when preset is ""
  Architecture arch;
  Software sw;
  int64_t gpus = 0;
  int64_t seq_len = 0;
  int64_t batch_seqs = 0;
  const char* fix = "";  // --fix constraints: what the publication pins (or owned_fix)
  std::string owned_claim, owned_fix;

  std::string Claim() const { return owned_claim.empty() ? claim : owned_claim; }
  std::string Fix() const { return owned_fix.empty() ? fix : owned_fix; }
  Metric metric = Metric::kModelTflops;
  double published = 0;
};

// Every validation row, in the order docs/planner.md shows them.
const std::vector<PublishedRun>& PublishedRuns();

}  // namespace tenax::plan
