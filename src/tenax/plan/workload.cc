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

Result<Workload> MakeWorkload(const ModelSpec& model, int64_t seq_len, int64_t batch_tokens,
                              Kernels kernels) {
  if (seq_len <= 0) return InvalidArgument(fmt::format("--seq-len = {} must be > 0", seq_len));
  if (batch_tokens <= 0 || batch_tokens % seq_len != 0) {
    const int64_t lo = std::max<int64_t>(1, batch_tokens / seq_len);
    return InvalidArgument(fmt::format(
        "--global-batch-tokens = {} is not a whole number of {}-token sequences; use {} ({} "
        "sequences) or {} ({} sequences)",
        batch_tokens, seq_len, lo * seq_len, lo, (lo + 1) * seq_len, lo + 1));
  }
  Workload w;
  w.model = model;
  w.kernels = kernels;
  w.seq_len = seq_len;
  w.global_batch_tokens = batch_tokens;
  w.flops_per_token = TrainingFlopsPerToken(model, seq_len).total();
  return w;
}

Result<ModelSpec> LoadPlanModel(const std::string& what, int64_t* config_seq_len) {
  *config_seq_len = 0;
  const bool is_file = what.find('/') != std::string::npos ||
                       (what.size() > 5 && what.compare(what.size() - 5, 5, ".toml") == 0) ||
                       LocalFs().Exists(what);
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

LayerWidths WidthsFor(const ModelSpec& m, int64_t tp) {
  LayerWidths w;
  w.h = m.dim;
  w.head_dim = m.head_dim();
  w.heads = m.n_heads / tp;
  w.q = w.heads * w.head_dim;
  w.kv = std::max<int64_t>(1, m.n_kv_heads / tp) * w.head_dim;
  w.f = m.ffn_hidden_dim / tp;
  const double h = static_cast<double>(w.h);
  w.params = h * (2.0 * w.q + 2.0 * w.kv + 3.0 * w.f) + 2.0 * h;
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
