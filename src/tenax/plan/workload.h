// What is being trained, as the planner sees it: the model's shape, the sequence length and the
// global batch, and the per-GPU widths of a layer once tensor parallelism has cut it.
// Non-goals: the data pipeline, optimizer hyper-parameters (only AdamW's state size matters here).
#pragma once

#include <cstdint>
#include <string>

#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"

namespace tenax::plan {

// How the training stack runs the elementwise work between matmuls. It changes the bytes those
// kernels move (cost_model.cc counts both): a property of the software, not of the GPU.
enum class Kernels {
  kEager,  // one kernel per op: tenax's trainer, torchtitan without torch.compile
  kFused,  // fused add+RMSNorm, rotary and SwiGLU: torch.compile, Megatron/Transformer Engine
};
const char* KernelsName(Kernels k);
Result<Kernels> ParseKernels(const std::string& text);

struct Workload {
  ModelSpec model;
  Kernels kernels = Kernels::kEager;
  int64_t seq_len = 0;
  int64_t global_batch_tokens = 0;  // a whole number of sequences
  // TrainingFlopsPerToken(model, seq_len).total(): torchtitan's 6N + 12LHQT convention, which
  // every TFLOP/s and MFU figure the planner prints uses (the work actually done differs: causal
  // attention skips half, recomputation adds some; the time model counts those).
  double flops_per_token = 0;

  int64_t sequences() const { return global_batch_tokens / seq_len; }
};

// Checks that the batch is a whole number of sequences and the sizes are positive.
Result<Workload> MakeWorkload(const ModelSpec& model, int64_t seq_len, int64_t global_batch_tokens,
                              Kernels kernels = Kernels::kEager);

// `preset_or_config` is a preset name (llama3-405b) or a tenax TOML config whose [model] section
// is used. Debug presets take their vocabulary from the data; the byte tokenizer's 256 stands in.
// When it is a config, *config_seq_len receives its training.seq_len (else 0).
Result<ModelSpec> LoadPlanModel(const std::string& preset_or_config, int64_t* config_seq_len);

// One transformer layer on one tensor-parallel rank. Key/value heads are replicated when tp
// exceeds n_kv_heads (each rank then holds one kv head).
struct LayerWidths {
  int64_t h = 0;      // model dim (the full width: sequence-parallel regions shard tokens)
  int64_t q = 0;      // query / attention-output columns on this rank: dim / tp
  int64_t kv = 0;     // key (= value) columns on this rank
  int64_t f = 0;      // feed-forward columns on this rank: ffn_hidden_dim / tp
  int64_t heads = 0;  // query heads on this rank
  int64_t head_dim = 0;
  double params = 0;  // parameters of one layer on this rank (norms replicated)
};
LayerWidths WidthsFor(const ModelSpec& m, int64_t tp);

// Whether `tp` can cut this model: heads split evenly, kv heads split or replicated evenly,
// the feed-forward width splits evenly. Returns the reason when not.
std::string TensorParallelProblem(const ModelSpec& m, int64_t tp);

}  // namespace tenax::plan
