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

// Mixtral 8x7B (Mistral AI's config.json): Mistral 7B's attention, every layer's SwiGLU replaced
// by 8 experts of the same width, 2 per token. 46.7B parameters, 12.9B active.
ModelSpec Mixtral8x7b() {
  ModelSpec s;
  s.name = "mixtral-8x7b";
  s.dim = 4096;
  s.n_layers = 32;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.ffn_hidden_dim = 14336;
  s.vocab_size = 32000;
  s.norm_eps = 1e-5;
  s.rope_theta = 1e6;
  s.max_seq_len = 32768;
  s.moe.n_experts = 8;
  s.moe.top_k = 2;
  s.moe.ffn_hidden_dim = 14336;
  s.moe.router = "softmax";
  s.moe.aux_loss_coef = 0.02;  // router_aux_loss_coef of the release
  return s;
}

// debug-tiny's attention with 8 small experts (2 per token) in both layers: trains on a CPU in
// seconds, and 8 experts split over 1, 2, 4 or 8 expert-parallel ranks.
ModelSpec DebugMoe() {
  ModelSpec s = Debug("debug-moe", 64, 2, 4, 2, 192);
  s.moe.n_experts = 8;
  s.moe.top_k = 2;
  s.moe.ffn_hidden_dim = 64;
  s.moe.router = "softmax";
  s.moe.aux_loss_coef = 0.01;
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
             Mixtral8x7b(),
             DebugMoe(),
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

// The MoE keys of [model] over the preset's; every inconsistency named with its key.
Status ApplyMoeOptions(const ModelOptions& o, ModelSpec* spec) {
  MoeSpec& m = spec->moe;
  if (o.n_experts) m.n_experts = *o.n_experts;
  if (o.n_experts_per_token) m.top_k = *o.n_experts_per_token;
  if (o.n_shared_experts) m.n_shared = *o.n_shared_experts;
  if (o.moe_ffn_hidden_dim) m.ffn_hidden_dim = *o.moe_ffn_hidden_dim;
  if (o.moe_router) m.router = *o.moe_router;
  if (o.moe_aux_loss_coef) m.aux_loss_coef = *o.moe_aux_loss_coef;
  if (o.moe_bias_update_rate) m.bias_update_rate = *o.moe_bias_update_rate;
  if (o.moe_layer_start) m.layer_start = *o.moe_layer_start;
  if (o.moe_layer_interval) m.layer_interval = *o.moe_layer_interval;
  std::vector<std::string> problems;
  if (!m.enabled()) {
    // A dense model: MoE keys without experts are a mistake, not something to ignore.
    for (const auto& [key, set] :
         {std::pair{"n_experts_per_token", o.n_experts_per_token.has_value()},
          {"n_shared_experts", o.n_shared_experts.has_value()},
          {"moe_ffn_hidden_dim", o.moe_ffn_hidden_dim.has_value()},
          {"moe_router", o.moe_router.has_value()},
          {"moe_aux_loss_coef", o.moe_aux_loss_coef.has_value()},
          {"moe_bias_update_rate", o.moe_bias_update_rate.has_value()},
          {"moe_layer_start", o.moe_layer_start.has_value()},
          {"moe_layer_interval", o.moe_layer_interval.has_value()}}) {
      if (set) {
        problems.push_back(fmt::format(
            "model.{} is set but model.n_experts is 0 (a dense model); set model.n_experts to "
            "use mixture-of-experts layers",
            key));
      }
    }
  } else {
    if (m.ffn_hidden_dim == 0) m.ffn_hidden_dim = spec->ffn_hidden_dim;  // a dense preset's width
    if (m.top_k < 1 || m.top_k > m.n_experts) {
      problems.push_back(
          fmt::format("model.n_experts_per_token ({}) must be between 1 and model.n_experts ({})",
                      m.top_k, m.n_experts));
    }
    if (m.router != "softmax" && m.router != "sigmoid") {
      problems.push_back(
          fmt::format("model.moe_router = \"{}\" is unknown; use \"softmax\" "
                      "(Mixtral) or \"sigmoid\" (DeepSeek-V3)",
                      m.router));
    }
    if (m.bias_update_rate > 0 && m.router != "sigmoid") {
      problems.push_back(fmt::format(
          "model.moe_bias_update_rate ({}) needs model.moe_router = \"sigmoid\" (the selection "
          "bias of DeepSeek-V3's auxiliary-loss-free balancing); it is \"{}\"",
          m.bias_update_rate, m.router));
    }
    if (m.layer_start < 0 || m.layer_start >= spec->n_layers) {
      problems.push_back(
          fmt::format("model.moe_layer_start ({}) must name a layer: 0 .. model.n_layers - 1 = {}",
                      m.layer_start, spec->n_layers - 1));
    }
    if (m.layer_interval < 1) {
      problems.push_back(
          fmt::format("model.moe_layer_interval ({}) must be at least 1", m.layer_interval));
    }
  }
  if (problems.empty()) return Status::Ok();
  std::string msg = "the mixture-of-experts settings do not fit:";
  for (const auto& p : problems) msg += "\n  - " + p;
  return InvalidArgument(msg);
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [k, v] : Presets()) names.push_back(k);
  return names;
}

int64_t ModelSpec::n_moe_layers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < n_layers; ++i) n += moe.IsMoeLayer(i) ? 1 : 0;
  return n;
}

ParamCounts CountParams(const ModelSpec& s) {
  ParamCounts c;
  const int64_t hd = s.head_dim();
  const int64_t moe_layers = s.n_moe_layers();
  c.embedding = s.vocab_size * s.dim;
  c.attention = s.n_layers * (2 * s.dim * s.n_heads * hd + 2 * s.dim * s.n_kv_heads * hd);
  c.feed_forward = (s.n_layers - moe_layers) * 3 * s.dim * s.ffn_hidden_dim;
  c.norms = (2 * s.n_layers + 1) * s.dim;
  c.output = s.tie_embeddings ? 0 : s.vocab_size * s.dim;
  c.router = moe_layers * s.moe.n_experts * s.dim;
  c.experts = moe_layers * s.moe.n_experts * 3 * s.dim * s.moe.ffn_hidden_dim;
  c.shared_experts = moe_layers * 3 * s.dim * s.moe.n_shared * s.moe.ffn_hidden_dim;
  c.total = c.embedding + c.attention + c.feed_forward + c.norms + c.output + c.router + c.experts +
            c.shared_experts;
  const int64_t active_experts =
      s.moe.enabled() ? c.experts / s.moe.n_experts * s.moe.top_k : 0;  // exact: E divides it
  c.active = c.total - c.experts + active_experts;
  return c;
}

FlopsPerToken TrainingFlopsPerToken(const ModelSpec& s, int64_t seq_len) {
  ParamCounts c = CountParams(s);
  // The embedding lookup is no matmul; the output projection is one even when tied.
  const double matmul_params = static_cast<double>(c.active - c.embedding) +
                               static_cast<double>(s.tie_embeddings ? s.vocab_size * s.dim : 0);
  FlopsPerToken f;
  f.dense = 6.0 * matmul_params;
  f.attention = 12.0 * static_cast<double>(s.n_layers) * static_cast<double>(s.n_heads) *
                static_cast<double>(s.head_dim()) * static_cast<double>(seq_len);
  return f;
}

Status CheckHeadShape(const ModelSpec& s, const ShapeFieldNames& names) {
  if (s.dim % s.n_heads != 0) {
    return InvalidArgument(fmt::format("{} ({}) is not divisible by {} ({})", names.dim, s.dim,
                                       names.n_heads, s.n_heads));
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    return InvalidArgument(fmt::format(
        "{} ({}) is not divisible by {} ({}): grouped-query attention shares each kv head among "
        "{} / {} query heads",
        names.n_heads, s.n_heads, names.n_kv_heads, s.n_kv_heads, names.n_heads, names.n_kv_heads));
  }
  return Status::Ok();
}

Result<ModelSpec> ResolveModelSpec(const ModelOptions& o, int64_t data_vocab_size) {
  auto it = Presets().find(o.preset);
  if (it == Presets().end()) {
    std::string names;
    for (const auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument(
        fmt::format("model.preset = \"{}\" is unknown; presets: {}", o.preset, names));
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
  TENAX_RETURN_IF_ERROR(ApplyMoeOptions(o, &s));

  if (s.vocab_size == 0) {
    if (data_vocab_size <= 0) {
      return InvalidArgument(fmt::format(
          "model.preset = \"{}\" takes its vocabulary from the data; set model.vocab_size",
          s.name));
    }
    s.vocab_size = data_vocab_size;
  }
  if (data_vocab_size > s.vocab_size) {
    return InvalidArgument(fmt::format(
        "model.vocab_size ({}) is smaller than the data's vocabulary ({}); raise model.vocab_size "
        "or use a tokenizer that matches the model",
        s.vocab_size, data_vocab_size));
  }
  TENAX_RETURN_IF_ERROR(CheckHeadShape(s, kShapeConfigKeys));
  if (s.head_dim() % 2 != 0) {
    return InvalidArgument(fmt::format(
        "head dim = model.dim / model.n_heads = {} / {} = {} must be even for rotary embeddings",
        s.dim, s.n_heads, s.head_dim()));
  }
  return s;
}

}  // namespace tenax
