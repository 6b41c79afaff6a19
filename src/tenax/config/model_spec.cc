#include "tenax/config/model_spec.h"

#include <fmt/format.h>

#include <map>

namespace tenax {
namespace {

// Published shapes (Meta's params.json / Hugging Face config.json). The llama3-* presets are the
// 3.1 releases (same shapes as 3.0, plus rope scaling and 128K context); 405B exists only as 3.1.
ModelSpec Llama31(std::string name, int64_t dim, int64_t layers, int64_t heads, int64_t ffn) {
  ModelSpec s;
  s.name = std::move(name);
  s.dim = dim;
  s.n_layers = layers;
  s.n_heads = heads;
  s.n_kv_heads = 8;
  s.ffn_hidden_dim = ffn;
  s.vocab_size = 128256;
  s.norm_eps = 1e-5;
  s.rope_theta = 500000.0;
  s.rope_scaling.enabled = true;
  s.rope_scaling.factor = 8.0;
  s.max_seq_len = 131072;
  return s;
}

ModelSpec Llama32(std::string name, int64_t dim, int64_t layers, int64_t heads) {
  ModelSpec s = Llama31(std::move(name), dim, layers, heads, 8192);
  s.rope_scaling.factor = 32.0;  // 3.2's small models use factor 32
  s.tie_embeddings = true;
  return s;
}

// Debug presets: real Llama 3 structure (GQA, SwiGLU, RoPE) at sizes a 2-core CPU trains in
// minutes. vocab_size 0 means "take it from the data".
ModelSpec Debug(std::string name, int64_t dim, int64_t layers, int64_t heads, int64_t kv,
                int64_t ffn) {
  ModelSpec s;
  s.name = std::move(name);
  s.dim = dim;
  s.n_layers = layers;
  s.n_heads = heads;
  s.n_kv_heads = kv;
  s.ffn_hidden_dim = ffn;
  s.vocab_size = 0;
  s.rope_theta = 10000.0;
  s.max_seq_len = 2048;
  return s;
}

const std::map<std::string, ModelSpec>& Presets() {
  static const std::map<std::string, ModelSpec> presets = [] {
    std::map<std::string, ModelSpec> m;
    for (ModelSpec s : {
             Llama31("llama3-8b", 4096, 32, 32, 14336),
             Llama31("llama3-70b", 8192, 80, 64, 28672),
             Llama31("llama3-405b", 16384, 126, 128, 53248),
             Llama32("llama3.2-1b", 2048, 16, 32),
             Llama32("llama3.2-3b", 3072, 28, 24),
             Debug("debug-tiny", 64, 2, 4, 2, 192),
             Debug("debug-small", 128, 4, 4, 2, 384),
             Debug("debug-medium", 256, 6, 8, 4, 768),
         }) {
      m.emplace(s.name, s);
    }
    // Issue 6's comparison shapes: 8B layers cut to 8, and 1B with an untied output.
    ModelSpec l8 = m.at("llama3-8b");
    l8.name = "llama3-8b-l8";
    l8.n_layers = 8;
    m.emplace(l8.name, l8);
    ModelSpec untied = m.at("llama3.2-1b");
    untied.name = "llama3.2-1b-untied";
    untied.tie_embeddings = false;
    m.emplace(untied.name, untied);
    return m;
  }();
  return presets;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [k, v] : Presets()) names.push_back(k);
  return names;
}

ParamCounts CountParams(const ModelSpec& s) {
  ParamCounts c;
  const int64_t hd = s.head_dim();
  c.embedding = s.vocab_size * s.dim;
  c.attention = s.n_layers * (2 * s.dim * s.n_heads * hd + 2 * s.dim * s.n_kv_heads * hd);
  c.feed_forward = s.n_layers * 3 * s.dim * s.ffn_hidden_dim;
  c.norms = (2 * s.n_layers + 1) * s.dim;
  c.output = s.tie_embeddings ? 0 : s.vocab_size * s.dim;
  c.total = c.embedding + c.attention + c.feed_forward + c.norms + c.output;
  return c;
}

FlopsPerToken TrainingFlopsPerToken(const ModelSpec& s, int64_t seq_len) {
  ParamCounts c = CountParams(s);
  const double matmul_params = static_cast<double>(c.attention + c.feed_forward + c.norms) +
                               static_cast<double>(s.vocab_size * s.dim);  // output projection
  FlopsPerToken f;
  f.dense = 6.0 * matmul_params;
  f.attention = 12.0 * static_cast<double>(s.n_layers) * static_cast<double>(s.n_heads) *
                static_cast<double>(s.head_dim()) * static_cast<double>(seq_len);
  return f;
}

Result<ModelSpec> ResolveModelSpec(const ModelOptions& o, int64_t data_vocab_size) {
  auto it = Presets().find(o.preset);
  if (it == Presets().end()) {
    std::string names;
    for (const auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument(fmt::format("model.preset = \"{}\" is unknown; presets: {}", o.preset,
                                       names));
  }
  ModelSpec s = it->second;
  if (o.dim) s.dim = *o.dim;
  if (o.n_layers) s.n_layers = *o.n_layers;
  if (o.n_heads) s.n_heads = *o.n_heads;
  if (o.n_kv_heads) s.n_kv_heads = *o.n_kv_heads;
  if (o.ffn_hidden_dim) s.ffn_hidden_dim = *o.ffn_hidden_dim;
  if (o.vocab_size) s.vocab_size = *o.vocab_size;
  if (o.norm_eps) s.norm_eps = *o.norm_eps;
  if (o.rope_theta) s.rope_theta = *o.rope_theta;
  if (o.rope_scaling) s.rope_scaling.enabled = *o.rope_scaling;
  if (o.tie_embeddings) s.tie_embeddings = *o.tie_embeddings;
  if (o.max_seq_len) s.max_seq_len = *o.max_seq_len;
  s.init_std = o.init_std;

  if (s.vocab_size == 0) {
    if (data_vocab_size <= 0) {
      return InvalidArgument(fmt::format(
          "model.preset = \"{}\" takes its vocabulary from the data; set model.vocab_size", s.name));
    }
    s.vocab_size = data_vocab_size;
  }
  if (data_vocab_size > s.vocab_size) {
    return InvalidArgument(fmt::format(
        "model.vocab_size ({}) is smaller than the data's vocabulary ({}); raise model.vocab_size "
        "or use a tokenizer that matches the model",
        s.vocab_size, data_vocab_size));
  }
  if (s.dim % s.n_heads != 0) {
    return InvalidArgument(fmt::format("model.dim ({}) is not divisible by model.n_heads ({})",
                                       s.dim, s.n_heads));
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    return InvalidArgument(fmt::format(
        "model.n_heads ({}) is not divisible by model.n_kv_heads ({}): grouped-query attention "
        "shares each kv head among n_heads / n_kv_heads query heads",
        s.n_heads, s.n_kv_heads));
  }
  if (s.head_dim() % 2 != 0) {
    return InvalidArgument(fmt::format(
        "head dim = model.dim / model.n_heads = {} / {} = {} must be even for rotary embeddings",
        s.dim, s.n_heads, s.head_dim()));
  }
  return s;
}

}  // namespace tenax
