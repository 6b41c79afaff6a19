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

// Mixture of experts in place of the dense SwiGLU on some layers (model/moe.h). Dropless: every
// token reaches its top-k experts whatever the load (no capacity factor, no token dropped).
struct MoeSpec {
  int64_t n_experts = 0;           // routed experts per MoE layer; 0: a dense model
  int64_t top_k = 0;               // experts per token
  int64_t n_shared = 0;            // shared experts: one SwiGLU of width n_shared x ffn_hidden_dim
  int64_t ffn_hidden_dim = 0;      // each expert's SwiGLU width
  std::string router = "softmax";  // softmax (Mixtral) | sigmoid (DeepSeek-V3)
  double aux_loss_coef = 0;        // weight of the load-balancing loss (mean over MoE layers)
  double bias_update_rate = 0;     // sigmoid: selection-bias step per optimizer step; 0 = none
  int64_t layer_start = 0;         // MoE layers: layer_start, layer_start + layer_interval, ...
  int64_t layer_interval = 1;

  bool enabled() const { return n_experts > 0; }
  bool IsMoeLayer(int64_t layer) const {
    return enabled() && layer >= layer_start && (layer - layer_start) % layer_interval == 0;
  }
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
  MoeSpec moe;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t n_moe_layers() const;
};

struct ParamCounts {
  int64_t embedding = 0;     // token embedding table
  int64_t attention = 0;     // wq, wk, wv, wo over all layers
  int64_t feed_forward = 0;  // dense layers' SwiGLU
  int64_t norms = 0;
  int64_t output = 0;   // 0 when tied to the embedding
  int64_t router = 0;   // MoE layers' router matrices
  int64_t experts = 0;  // MoE layers' routed experts, all of them
  int64_t shared_experts = 0;
  int64_t total = 0;
  // What one token uses: total minus the routed experts it is not sent to (top_k of n_experts).
  int64_t active = 0;
};

ParamCounts CountParams(const ModelSpec& spec);

// Training FLOPs per token at sequence length `seq_len` (forward + backward), torchtitan's
// convention: 6 x (parameters used in matmuls: all but the embedding lookup; the output
// projection counts even when tied) + 12 x layers x heads x head_dim x seq_len for attention.
// MoE models count the active parameters only (a token runs top_k of the routed experts).
struct FlopsPerToken {
  double dense = 0;      // 6N part
  double attention = 0;  // 12 L H Q T part
  double total() const { return dense + attention; }
};
FlopsPerToken TrainingFlopsPerToken(const ModelSpec& spec, int64_t seq_len);

std::vector<std::string> PresetNames();
// How a shape check names the fields it complains about: config keys for `tenax train`, flags for
// `tenax plan`.
struct ShapeFieldNames {
  const char* dim;
  const char* n_heads;
  const char* n_kv_heads;
};
inline constexpr ShapeFieldNames kShapeConfigKeys{"model.dim", "model.n_heads", "model.n_kv_heads"};
// The attention heads divide the model dimension, and the key/value heads the heads (grouped-query
// attention); the error names the fields as `names` spells them.
Status CheckHeadShape(const ModelSpec& spec, const ShapeFieldNames& names);

// Resolves `options.preset` plus its overrides. `data_vocab_size` (> 0) fills vocab_size when the
// preset leaves it to the data (debug presets); a model vocabulary smaller than the data's is an
// error. Every shape constraint is checked here, with a message naming the factors.
Result<ModelSpec> ResolveModelSpec(const ModelOptions& options, int64_t data_vocab_size);

}  // namespace tenax
