// The resolved shape of a Llama 3 model (a preset plus overrides) and what follows from it without
// allocating anything: parameter counts and training FLOPs per token. Torch-free on purpose: the
// planner (plan/) sizes 405B models with it and must not need libtorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax {

// Llama 3.1's RoPE frequency scaling ("rope_type": "llama3" in Hugging Face configs).
struct RopeScaling {
  bool enabled = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct ModelSpec {
  std::string name;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden_dim = 0;
  int64_t vocab_size = 0;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  int64_t max_seq_len = 8192;
  double init_std = 0.02;

  int64_t head_dim() const { return dim / n_heads; }
};

struct ParamCounts {
  int64_t embedding = 0;   // token embedding table
  int64_t attention = 0;   // wq, wk, wv, wo over all layers
  int64_t feed_forward = 0;
  int64_t norms = 0;
  int64_t output = 0;      // 0 when tied to the embedding
  int64_t total = 0;
};

ParamCounts CountParams(const ModelSpec& spec);

// Training FLOPs per token at sequence length `seq_len` (forward + backward), torchtitan's
// convention: 6 x (parameters used in matmuls: all but the embedding lookup; the output
// projection counts even when tied) + 12 x layers x heads x head_dim x seq_len for attention.
struct FlopsPerToken {
  double dense = 0;      // 6N part
  double attention = 0;  // 12 L H Q T part
  double total() const { return dense + attention; }
};
FlopsPerToken TrainingFlopsPerToken(const ModelSpec& spec, int64_t seq_len);

std::vector<std::string> PresetNames();
// Resolves `options.preset` plus its overrides. `data_vocab_size` (> 0) fills vocab_size when the
// preset leaves it to the data (debug presets); a model vocabulary smaller than the data's is an
// error. Every shape constraint is checked here, with a message naming the factors.
Result<ModelSpec> ResolveModelSpec(const ModelOptions& options, int64_t data_vocab_size);

}  // namespace tenax
