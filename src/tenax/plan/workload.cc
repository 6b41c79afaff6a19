#include "tenax/plan/workload.h"

#include <fmt/format.h>

#include <algorithm>

#include "tenax/config/config.h"
#include "tenax/core/fs.h"

namespace tenax::plan {

const char* KernelsName(Kernels k) { return k == Kernels::kEager ? "eager" : "fused"; }

Result<Kernels> ParseKernels(const std::string& text) {
  if (text == "eager") return Kernels::kEager;
  if (text == "fused" || text == "compiled") return Kernels::kFused;
  return InvalidArgument("--kernels = '" + text + "': expected eager or fused");
}

const char* AttentionName(AttentionKind a) {
  switch (a) {
    case AttentionKind::kFlash2:
      return "flash2";
    case AttentionKind::kFlash3:
      return "flash3";
    case AttentionKind::kMaterialized:
      return "materialized";
  }
  return "?";
}

Result<AttentionKind> ParseAttention(const std::string& text) {
  if (text == "flash" || text == "flash2") return AttentionKind::kFlash2;
  if (text == "flash3" || text == "cudnn") return AttentionKind::kFlash3;
  if (text == "materialized" || text == "unfused") return AttentionKind::kMaterialized;
  return InvalidArgument("--attention = '" + text +
                         "': expected flash2 (= flash), flash3 (= cudnn) or materialized");
}

const char* TpOverlapName(TpOverlap t) {
  switch (t) {
    case TpOverlap::kNone:
      return "none";
    case TpOverlap::kBackward:
      return "backward";
    case TpOverlap::kFull:
      return "full";
    case TpOverlap::kAsyncTp:
      return "async-tp";
  }
  return "?";
}

Result<TpOverlap> ParseTpOverlap(const std::string& text) {
  if (text == "none" || text == "no") return TpOverlap::kNone;
  if (text == "backward" || text == "bwd") return TpOverlap::kBackward;
  if (text == "full" || text == "yes") return TpOverlap::kFull;
  if (text == "async-tp" || text == "async") return TpOverlap::kAsyncTp;
  return InvalidArgument("--tp-overlap = '" + text +
                         "': expected none, backward, full or async-tp");
}

const char* CpAttentionName(CpAttention c) {
  return c == CpAttention::kAllGather ? "all-gather" : "ring";
}

Result<CpAttention> ParseCpAttention(const std::string& text) {
  if (text == "all-gather" || text == "allgather") return CpAttention::kAllGather;
  if (text == "ring") return CpAttention::kRing;
  return InvalidArgument("--cp-attention = '" + text + "': expected all-gather or ring");
}

ModelParams CountModelParams(const ModelSpec& m, const Architecture& a, int64_t seq_len) {
  const LayerWidths w = WidthsFor(m, 1, a);
  ModelParams p;
  const double h = static_cast<double>(m.dim), v = static_cast<double>(m.vocab_size);
  // MoE layers: the dense MLP replaced by a router (E x h), E routed SwiGLU experts of width F
  // and S shared ones (one SwiGLU of width S x F).
  const double n_moe = static_cast<double>(m.n_moe_layers());
  const double n_dense = static_cast<double>(m.n_layers) - n_moe;
  const MoeSpec& e = m.moe;
  const double f = static_cast<double>(e.ffn_hidden_dim),
               experts = static_cast<double>(e.n_experts);
  const double dense_mlp = (a.gated_mlp ? 3.0 : 2.0) * h * static_cast<double>(m.ffn_hidden_dim);
  const double moe_layer = w.params - dense_mlp + experts * h +
                           3.0 * h * f * (experts + static_cast<double>(e.n_shared));
  p.layers = n_dense * w.params + n_moe * moe_layer;
  p.experts = n_moe * experts * 3.0 * h * f;
  const double unused =
      e.enabled() ? p.experts * (1.0 - static_cast<double>(e.top_k) / experts) : 0;
  p.per_layer = (p.layers - unused) / static_cast<double>(m.n_layers);
  p.embedding = v * h + (a.learned_positions ? static_cast<double>(seq_len) * h : 0.0);
  p.output = m.tie_embeddings ? 0.0 : v * h;
  const double final_norm = a.layer_norm ? 2.0 * h : h;
  p.total = p.embedding + p.layers + p.output + final_norm;
  p.active = p.total - unused;
  // torchtitan's convention (and, to within norms and biases, Megatron-LM's): every parameter
  // but the embedding tables, plus the output projection even when it is tied; MoE layers count
  // the experts a token runs through (top_k of them).
  p.matmul = p.active - p.embedding + (m.tie_embeddings ? v * h : 0.0);
  return p;
}

Result<Workload> MakeWorkload(const ModelSpec& model, int64_t seq_len, int64_t batch_tokens,
                              Kernels kernels) {
  Software sw;
  sw.kernels = kernels;
  return MakeWorkload(model, Architecture{}, sw, seq_len, batch_tokens);
}

Result<Workload> MakeWorkload(const ModelSpec& model, const Architecture& arch, const Software& sw,
                              int64_t seq_len, int64_t batch_tokens) {
  if (seq_len <= 0) return InvalidArgument(fmt::format("--seq-len = {} must be > 0", seq_len));
  if (batch_tokens <= 0 || batch_tokens % seq_len != 0) {
    const int64_t lo = std::max<int64_t>(1, batch_tokens / seq_len);
    return InvalidArgument(fmt::format(
        "--global-batch-tokens = {} is not a whole number of {}-token sequences; use {} ({} "
        "sequences) or {} ({} sequences)",
        batch_tokens, seq_len, lo * seq_len, lo, (lo + 1) * seq_len, lo + 1));
  }
  if (model.moe.enabled() && !arch.gated_mlp) {
    return InvalidArgument(
        "mixture-of-experts layers are SwiGLU experts: --mlp gelu (or --arch "
        "gpt) does not apply to " +
        model.name);
  }
  if (!(sw.dropout >= 0 && sw.dropout < 1)) {
    return InvalidArgument(fmt::format("--dropout = {} must be in [0, 1)", sw.dropout));
  }
  Workload w;
  w.model = model;
  w.arch = arch;
  w.sw = sw;
  w.shape_name = model.name;
  w.seq_len = seq_len;
  w.global_batch_tokens = batch_tokens;
  w.params = CountModelParams(model, arch, seq_len);
  w.flops_per_token = 6.0 * w.params.matmul + 12.0 * static_cast<double>(model.n_layers) *
                                                  static_cast<double>(model.n_heads) *
                                                  static_cast<double>(model.head_dim()) *
                                                  static_cast<double>(seq_len);
  return w;
}

bool IsPlanConfigFile(const std::string& what) {
  return what.find('/') != std::string::npos ||
         (what.size() > 5 && what.compare(what.size() - 5, 5, ".toml") == 0) ||
         LocalFs().Exists(what);
}

Result<ModelSpec> LoadPlanModel(const std::string& what, int64_t* config_seq_len) {
  *config_seq_len = 0;
  const bool is_file = IsPlanConfigFile(what);
  ModelOptions options;
  if (is_file) {
    auto config = LoadConfig(what, {});
    if (!config.ok()) return config.status().WithContext("--model " + what);
    options = config->model;
    *config_seq_len = config->training.seq_len;
  } else {
    options.preset = what;
  }
  auto spec = ResolveModelSpec(options, 256);
  if (!spec.ok()) return spec.status().WithContext("--model " + what);
  return spec;
}

Result<ModelSpec> ApplyShape(const ModelSpec* base, const ShapeOverrides& o) {
  ModelSpec m;
  if (base) {
    m = *base;
  } else {
    std::string missing;
    if (!o.layers) missing += " --layers";
    if (!o.hidden) missing += " --hidden";
    if (!o.heads) missing += " --heads";
    if (!o.ffn) missing += " --ffn";
    if (!o.vocab) missing += " --vocab";
    if (!missing.empty()) {
      return InvalidArgument(
          "a model shape without --model needs" + missing +
          " (and optionally --kv-heads, default = --heads); or start from --model PRESET");
    }
    m.name = "custom";
  }
  if (o.layers) m.n_layers = *o.layers;
  if (o.hidden) m.dim = *o.hidden;
  if (o.heads) {
    m.n_heads = *o.heads;
    if (!o.kv_heads && !base) m.n_kv_heads = *o.heads;
  }
  if (o.kv_heads) m.n_kv_heads = *o.kv_heads;
  if (o.ffn) m.ffn_hidden_dim = *o.ffn;
  if (o.vocab) m.vocab_size = *o.vocab;
  auto positive = [](const char* flag, int64_t v) -> Status {
    if (v <= 0) return InvalidArgument(fmt::format("{} = {} must be > 0", flag, v));
    return Status::Ok();
  };
  TENAX_RETURN_IF_ERROR(positive("--layers", m.n_layers));
  TENAX_RETURN_IF_ERROR(positive("--hidden", m.dim));
  TENAX_RETURN_IF_ERROR(positive("--heads", m.n_heads));
  TENAX_RETURN_IF_ERROR(positive("--kv-heads", m.n_kv_heads));
  TENAX_RETURN_IF_ERROR(positive("--ffn", m.ffn_hidden_dim));
  TENAX_RETURN_IF_ERROR(positive("--vocab", m.vocab_size));
  TENAX_RETURN_IF_ERROR(CheckHeadShape(m, {"--hidden", "--heads", "--kv-heads"}));
  if (o.any() && base) m.name = "custom";
  return m;
}

std::string ShapeName(const ModelSpec& m, const Architecture& a, bool from_preset) {
  const bool llama_arch = a.gated_mlp && !a.layer_norm && !a.biases && !a.learned_positions;
  if (from_preset && llama_arch && m.name != "custom") return m.name;
  std::string s = fmt::format("{} layers, hidden {}, {} heads", m.n_layers, m.dim, m.n_heads);
  if (m.n_kv_heads != m.n_heads) s += fmt::format(" ({} kv)", m.n_kv_heads);
  s += fmt::format(", ffn {}, vocab {}", m.ffn_hidden_dim, m.vocab_size);
  s += a.gated_mlp ? ", swiglu" : ", gelu";
  s += a.layer_norm ? ", layernorm" : ", rmsnorm";
  if (a.biases) s += ", biases";
  if (a.learned_positions) s += ", learned positions";
  if (m.tie_embeddings) s += ", tied embeddings";
  return s;
}

LayerWidths WidthsFor(const ModelSpec& m, int64_t tp, const Architecture& a) {
  LayerWidths w;
  w.h = m.dim;
  w.head_dim = m.head_dim();
  w.heads = m.n_heads / tp;
  w.q = w.heads * w.head_dim;
  w.kv = std::max<int64_t>(1, m.n_kv_heads / tp) * w.head_dim;
  w.f = m.ffn_hidden_dim / tp;
  const double h = static_cast<double>(w.h), q = static_cast<double>(w.q);
  const double kv = static_cast<double>(w.kv), f = static_cast<double>(w.f);
  const double mlp = (a.gated_mlp ? 3.0 : 2.0) * h * f;
  const double norms = (a.layer_norm ? 2.0 : 1.0) * 2.0 * h;  // replicated on every rank
  // Column-parallel biases are split (q, kv, f); row-parallel ones (wo, fc2) are replicated.
  const double biases = a.biases ? (q + 2.0 * kv + f + 2.0 * h) : 0.0;
  w.params = h * (2.0 * q + 2.0 * kv) + mlp + norms + biases;
  return w;
}

std::string TensorParallelProblem(const ModelSpec& m, int64_t tp) {
  if (m.n_heads % tp != 0) return fmt::format("n_heads ({}) % tp ({}) != 0", m.n_heads, tp);
  if (m.n_kv_heads % tp != 0 && tp % m.n_kv_heads != 0) {
    return fmt::format("n_kv_heads ({}) and tp ({}) do not divide one another", m.n_kv_heads, tp);
  }
  if (m.ffn_hidden_dim % tp != 0) {
    return fmt::format("ffn_hidden_dim ({}) % tp ({}) != 0", m.ffn_hidden_dim, tp);
  }
  return "";
}

}  // namespace tenax::plan
