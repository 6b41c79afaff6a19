#include "tenax/model/hf.h"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/moe.h"
#include "tenax/model/tensor_io.h"

namespace tenax::model {
namespace {

using nlohmann::json;

// (tenax name suffix, HF name suffix) inside layer i.
const std::vector<std::pair<std::string, std::string>>& LayerNames() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
  };
  return names;
}

std::map<std::string, std::string> TenaxToHfNames(const ModelSpec& s) {
  std::map<std::string, std::string> m = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                          {"norm.weight", "model.norm.weight"}};
  if (!s.tie_embeddings) m["output.weight"] = "lm_head.weight";
  for (int64_t i = 0; i < s.n_layers; ++i) {
    for (const auto& [t, h] : LayerNames()) {
      if (s.moe.IsMoeLayer(i) && t.rfind("feed_forward.", 0) == 0) continue;
      m[fmt::format("layers.{}.{}", i, t)] = fmt::format("model.layers.{}.{}", i, h);
    }
    if (!s.moe.IsMoeLayer(i)) continue;
    // MixtralForCausalLM: the router is block_sparse_moe.gate, expert e's SwiGLU is
    // block_sparse_moe.experts.{e}.w1 (gate), w2 (down), w3 (up): tenax's w1, w2, w3.
    const std::string hf = fmt::format("model.layers.{}.block_sparse_moe.", i);
    m[fmt::format("layers.{}.moe.router.weight", i)] = hf + "gate.weight";
    for (int64_t e = 0; e < s.moe.n_experts; ++e) {
      for (const char* w : {"w1", "w2", "w3"}) {
        m[ExpertParamPrefix(i, e) + w + ".weight"] =
            fmt::format("{}experts.{}.{}.weight", hf, e, w);
      }
    }
  }
  return m;
}

// Mixtral is what Hugging Face can load: every layer MoE, a softmax router, no shared experts,
// no rope scaling. Other MoE shapes have no transformers class tenax writes.
Status CheckMixtralExportable(const ModelSpec& s) {
  if (!s.moe.enabled()) return Status::Ok();
  std::vector<std::string> problems;
  if (s.n_moe_layers() != s.n_layers) {
    problems.push_back(
        fmt::format("only {} of {} layers are MoE (model.moe_layer_start {}, "
                    "model.moe_layer_interval {})",
                    s.n_moe_layers(), s.n_layers, s.moe.layer_start, s.moe.layer_interval));
  }
  if (s.moe.router != "softmax") problems.push_back("the router is " + s.moe.router);
  if (s.moe.n_shared > 0) problems.push_back(fmt::format("{} shared experts", s.moe.n_shared));
  if (s.rope_scaling.enabled) problems.push_back("rope scaling is on");
  if (problems.empty()) return Status::Ok();
  std::string msg =
      "export-hf writes MoE models as MixtralForCausalLM (every layer MoE, softmax router, no "
      "shared experts, no rope scaling); this model does not fit:";
  for (const auto& p : problems) msg += "\n  - " + p;
  return InvalidArgument(msg);
}

// Within each head's D rows: interleaved order (0,1,2,3,...) holds pairs (2i, 2i+1); HF's order
// puts pair i's halves at rows i and i + D/2.
at::Tensor InterleavedToHalves(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.size(1), d = rows / heads;
  return w.reshape({heads, d / 2, 2, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}
at::Tensor HalvesToInterleaved(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.size(1), d = rows / heads;
  return w.reshape({heads, 2, d / 2, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

json IdOrNull(const std::optional<int64_t>& id) { return id ? json(*id) : json(nullptr); }

json HfConfig(const ModelSpec& s, const HfExportOptions& o) {
  const bool moe = s.moe.enabled();
  json c = {{"architectures", {moe ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
            {"model_type", moe ? "mixtral" : "llama"},
            {"hidden_size", s.dim},
            {"intermediate_size", moe ? s.moe.ffn_hidden_dim : s.ffn_hidden_dim},
            {"num_attention_heads", s.n_heads},
            {"num_hidden_layers", s.n_layers},
            {"num_key_value_heads", s.n_kv_heads},
            {"head_dim", s.head_dim()},
            {"vocab_size", s.vocab_size},
            {"rms_norm_eps", s.norm_eps},
            {"rope_theta", s.rope_theta},
            {"max_position_embeddings", s.max_seq_len},
            {"tie_word_embeddings", s.tie_embeddings},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", 0.0},
            {"initializer_range", s.init_std},
            {"torch_dtype", o.dtype},
            {"use_cache", true},
            {"bos_token_id", IdOrNull(o.bos_id)},
            {"eos_token_id", IdOrNull(o.eos_id)},
            {"tenax_name", s.name}};
  if (moe) {
    c.erase("mlp_bias");
    c["num_local_experts"] = s.moe.n_experts;
    c["num_experts_per_tok"] = s.moe.top_k;
    // tenax's aux loss is Switch Transformer's per-layer E sum f P (1 when balanced), which is
    // transformers' load_balancing_loss_func divided by top_k (and taken per layer): the
    // coefficient is written as tenax uses it.
    c["router_aux_loss_coef"] = s.moe.aux_loss_coef;
    c["output_router_logits"] = false;
    c["sliding_window"] = nullptr;
    c["router_jitter_noise"] = 0.0;
  }
  if (s.rope_scaling.enabled) {
    c["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", s.rope_scaling.factor},
        {"low_freq_factor", s.rope_scaling.low_freq_factor},
        {"high_freq_factor", s.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", s.rope_scaling.original_max_position}};
  } else {
    c["rope_scaling"] = nullptr;
  }
  return c;
}

Result<ModelSpec> SpecFromHfConfig(const json& c, const std::string& where) {
  try {
    const std::string type = c.value("model_type", std::string("llama"));
    if (type != "llama" && type != "mixtral") {
      return InvalidArgument(where + ": model_type is \"" + type +
                             "\"; tenax imports Llama and Mixtral models only");
    }
    ModelSpec s;
    s.name = c.value("tenax_name", std::string("hf-llama"));
    s.dim = c.at("hidden_size").get<int64_t>();
    s.ffn_hidden_dim = c.at("intermediate_size").get<int64_t>();
    s.n_heads = c.at("num_attention_heads").get<int64_t>();
    s.n_layers = c.at("num_hidden_layers").get<int64_t>();
    s.n_kv_heads = c.value("num_key_value_heads", s.n_heads);
    s.vocab_size = c.at("vocab_size").get<int64_t>();
    s.norm_eps = c.value("rms_norm_eps", 1e-5);
    s.rope_theta = c.value("rope_theta", 10000.0);
    s.max_seq_len = c.value("max_position_embeddings", int64_t{8192});
    s.tie_embeddings = c.value("tie_word_embeddings", false);
    s.init_std = c.value("initializer_range", 0.02);
    if (c.contains("head_dim") && !c["head_dim"].is_null() &&
        c["head_dim"].get<int64_t>() * s.n_heads != s.dim) {
      return InvalidArgument(where +
                             ": head_dim * num_attention_heads != hidden_size; tenax "
                             "supports only head_dim = hidden_size / num_attention_heads");
    }
    if (type == "mixtral") {
      s.moe.n_experts = c.at("num_local_experts").get<int64_t>();
      s.moe.top_k = c.at("num_experts_per_tok").get<int64_t>();
      s.moe.ffn_hidden_dim = s.ffn_hidden_dim;
      s.moe.aux_loss_coef = c.value("router_aux_loss_coef", 0.0);
      s.moe.router = "softmax";
      if (c.contains("sliding_window") && !c["sliding_window"].is_null()) {
        return InvalidArgument(where +
                               ": sliding_window attention is not supported (tenax "
                               "attends to the whole causal context)");
      }
      if (s.moe.n_experts < 1 || s.moe.top_k < 1 || s.moe.top_k > s.moe.n_experts) {
        return InvalidArgument(where +
                               ": num_experts_per_tok must be between 1 and "
                               "num_local_experts");
      }
    }
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
      const json& r = c["rope_scaling"];
      const std::string type = r.value("rope_type", r.value("type", std::string()));
      if (type != "llama3") {
        return InvalidArgument(where + ": rope_scaling type \"" + type +
                               "\" is not supported (only \"llama3\")");
      }
      s.rope_scaling.enabled = true;
      s.rope_scaling.factor = r.at("factor").get<double>();
      s.rope_scaling.low_freq_factor = r.at("low_freq_factor").get<double>();
      s.rope_scaling.high_freq_factor = r.at("high_freq_factor").get<double>();
      s.rope_scaling.original_max_position =
          r.at("original_max_position_embeddings").get<int64_t>();
    }
    return s;
  } catch (const json::exception& e) {
    return InvalidArgument(where + ": missing or malformed field: " + e.what());
  }
}

// The safetensors files of an HF folder: model.safetensors, or the shards an index names.
Result<std::vector<std::string>> HfWeightFiles(const std::string& dir) {
  const std::string single = JoinPath(dir, "model.safetensors");
  if (LocalFs().Exists(single)) return std::vector<std::string>{single};
  const std::string index = JoinPath(dir, "model.safetensors.index.json");
  if (!LocalFs().Exists(index)) {
    return NotFound(dir +
                    " has neither model.safetensors nor model.safetensors.index.json; "
                    "tenax imports Hugging Face safetensors checkpoints");
  }
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(index));
  std::vector<std::string> files;
  try {
    const json index_json = json::parse(text);  // named: items() of a temporary would dangle
    for (const auto& [name, file] : index_json.at("weight_map").items()) {
      const std::string path = JoinPath(dir, file.get<std::string>());
      if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(path);
    }
  } catch (const json::exception& e) {
    return DataError(index + " is malformed: " + e.what());
  }
  return files;
}

// generation_config.json: the ids generation stops and starts with, and the sampling defaults of
// `tenax generate` (Meta's for Llama 3: temperature 0.6, top-p 0.9).
json GenerationConfig(const ModelSpec& s, const HfExportOptions& o) {
  return {{"bos_token_id", IdOrNull(o.bos_id)},
          {"eos_token_id", IdOrNull(o.eos_id)},
          {"do_sample", true},
          {"temperature", 0.6},
          {"top_p", 0.9},
          {"max_length", s.max_seq_len}};
}

// Consecutive tensors up to `max_bytes` per shard; a tensor larger than that goes alone.
std::vector<std::vector<NamedTensor>> Shard(std::vector<NamedTensor> tensors, int64_t max_bytes) {
  std::vector<std::vector<NamedTensor>> shards(1);
  int64_t in_shard = 0;
  for (auto& t : tensors) {
    const int64_t bytes = t.tensor.numel() * static_cast<int64_t>(t.tensor.element_size());
    if (!shards.back().empty() && in_shard + bytes > max_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(std::move(t));
    in_shard += bytes;
  }
  return shards;
}

// Writes `files` (name -> contents) as folder `dir`, all or nothing (see HfExportOptions).
Status WriteFolderAtomic(FileSystem& fs, const std::string& dir,
                         const std::vector<std::pair<std::string, std::string>>& files) {
  if (fs.Exists(dir)) {
    TENAX_ASSIGN_OR_RETURN(std::vector<std::string> entries, fs.ListDir(dir));
    if (!entries.empty()) {
      return InvalidArgument(fmt::format(
          "{} already exists and is not empty; export-hf writes a new folder: remove it or "
          "choose another --out",
          dir));
    }
  }
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  const std::string partial = fmt::format("{}.partial-{}", clean, ::getpid());
  TENAX_RETURN_IF_ERROR(fs.RemoveAll(partial));
  TENAX_RETURN_IF_ERROR(fs.CreateDirs(partial));
  Status st = Status::Ok();
  for (const auto& [name, contents] : files) {
    st = fs.WriteFileAtomic(JoinPath(partial, name), contents);  // fsynced
    if (!st.ok()) break;
  }
  if (st.ok()) st = fs.SyncDir(partial);
  if (st.ok() && fs.Exists(clean)) st = fs.RemoveAll(clean);  // empty (checked above)
  if (st.ok()) st = fs.Rename(partial, clean);
  if (!st.ok()) {
    (void)fs.RemoveAll(partial);
    return st.WithContext("writing " + clean);
  }
  const std::string parent = ParentDir(clean);
  return fs.SyncDir(parent.empty() ? "." : parent);
}

}  // namespace

Result<int64_t> ParseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"B", 1},
                                                      {"KB", 1e3},
                                                      {"MB", 1e6},
                                                      {"GB", 1e9},
                                                      {"TB", 1e12},
                                                      {"KiB", 1024.0},
                                                      {"MiB", 1048576.0},
                                                      {"GiB", 1073741824.0},
                                                      {"TiB", 1099511627776.0}};
  auto it = units.find(unit);
  double value = 0;
  bool ok = i > 0 && it != units.end();
  if (ok) {
    try {
      value = std::stod(text.substr(0, i)) * it->second;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok || value < 1 || value > 9e18) {
    return InvalidArgument("size '" + text +
                           "': expected a number of bytes with an optional unit (KB, MB, GB, TB "
                           "are powers of 1000; KiB, MiB, GiB, TiB powers of 1024), e.g. 5GB");
  }
  return static_cast<int64_t>(value);
}

Status ExportHf(const ModelCheckpoint& ckpt, const std::string& hf_dir, const HfExportOptions& o,
                FileSystem& fs) {
  if (o.dtype != "float32" && o.dtype != "bfloat16") {
    return InvalidArgument("--dtype " + o.dtype + ": expected float32 or bfloat16");
  }
  if (o.max_shard_bytes < 1) return InvalidArgument("--max-shard-size must be at least 1 byte");
  const ModelSpec& s = ckpt.spec;
  const auto names = TenaxToHfNames(s);
  const at::ScalarType st = o.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  std::vector<NamedTensor> out;
  int64_t total_bytes = 0;
  TENAX_RETURN_IF_ERROR(CheckMixtralExportable(s).WithContext(ckpt.dir));
  for (const auto& p : ckpt.params) {
    auto it = names.find(p.name);
    if (it == names.end()) return DataError(ckpt.dir + ": unexpected tensor " + p.name);
    at::Tensor t = p.tensor;
    if (EndsWith(p.name, "attention.wq.weight")) t = InterleavedToHalves(t, s.n_heads);
    if (EndsWith(p.name, "attention.wk.weight")) t = InterleavedToHalves(t, s.n_kv_heads);
    out.push_back({it->second, t.to(st).contiguous()});
    total_bytes +=
        out.back().tensor.numel() * static_cast<int64_t>(out.back().tensor.element_size());
  }
  const size_t n_tensors = out.size();
  std::vector<std::vector<NamedTensor>> shards = Shard(std::move(out), o.max_shard_bytes);
  std::vector<std::pair<std::string, std::string>> files;
  if (shards.size() == 1) {
    files.emplace_back("model.safetensors", SerializeTensors(shards[0], {{"format", "pt"}}));
  } else {
    json weight_map = json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
      for (const auto& t : shards[k]) weight_map[t.name] = name;
      files.emplace_back(name, SerializeTensors(shards[k], {{"format", "pt"}}));
      shards[k].clear();  // the serialized bytes are what is kept
    }
    const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    files.emplace_back("model.safetensors.index.json", index.dump(2) + "\n");
  }
  files.emplace_back("config.json", HfConfig(s, o).dump(2) + "\n");
  files.emplace_back("generation_config.json", GenerationConfig(s, o).dump(2) + "\n");
  for (const auto& [name, contents] : o.extra_files) {
    for (const auto& f : files) {
      if (f.first == name) return Internal("export-hf: two files named " + name);
    }
    files.emplace_back(name, contents);
  }
  TENAX_RETURN_IF_ERROR(WriteFolderAtomic(fs, hf_dir, files));
  log::Info(
      "exported {} (step {}) to {}: {} tensors, {}, {} weight file{}{}", ckpt.dir, ckpt.step,
      hf_dir, n_tensors, o.dtype, shards.size(), shards.size() == 1 ? "" : "s",
      o.extra_files.empty() ? "" : fmt::format(", {} tokenizer file(s)", o.extra_files.size()));
  return Status::Ok();
}

Status ExportHf(const std::string& checkpoint, const std::string& hf_dir,
                const HfExportOptions& options) {
  TENAX_ASSIGN_OR_RETURN(ModelCheckpoint ckpt, LoadModelCheckpoint(checkpoint));
  return ExportHf(ckpt, hf_dir, options);
}

namespace {

// The special token ids of an HF folder: generation_config.json overrides config.json.
void ReadSpecialIds(const json& config, const std::string& hf_dir, HfModel* m) {
  json merged = config;
  Result<std::string> gen = LocalFs().ReadFile(JoinPath(hf_dir, "generation_config.json"));
  if (gen.ok()) {
    try {
      const json g = json::parse(*gen);  // named: items() of a temporary would dangle
      for (const auto& [k, v] : g.items()) merged[k] = v;
    } catch (const json::exception& e) {
      log::Warn("{}/generation_config.json is not valid JSON ({}); using config.json's ids", hf_dir,
                e.what());
    }
  }
  if (merged.contains("bos_token_id") && merged["bos_token_id"].is_number_integer()) {
    m->bos_id = merged["bos_token_id"].get<int64_t>();
  }
  const json eos = merged.value("eos_token_id", json());
  if (eos.is_number_integer()) m->eos_ids.push_back(eos.get<int64_t>());
  if (eos.is_array()) {
    for (const auto& e : eos) {
      if (e.is_number_integer()) m->eos_ids.push_back(e.get<int64_t>());
    }
  }
}

}  // namespace

namespace {

// An error naming the first of `t`'s non-finite values, or OK when every value is finite.
Status CheckFinite(const at::Tensor& t, const std::string& hf_name, const std::string& file) {
  const at::Tensor bad = at::logical_not(at::isfinite(t)).flatten();
  const int64_t n_bad = bad.sum().item<int64_t>();
  if (n_bad == 0) return Status::Ok();
  const int64_t first = bad.nonzero()[0][0].item<int64_t>();
  const float value = t.flatten()[first].item<float>();
  return DataError(fmt::format(
      "{}: tensor '{}' has {} non-finite value{} of {} (the first, at flat index {}, is {}); "
      "the weights are damaged: export them again, or pass --allow-nonfinite to import them "
      "anyway",
      file, hf_name, n_bad, n_bad == 1 ? "" : "s", t.numel(), first, value));
}

}  // namespace

Result<HfModel> ReadHf(const std::string& hf_dir, const HfReadOptions& options) {
  const std::string config_path = JoinPath(hf_dir, "config.json");
  TENAX_ASSIGN_OR_RETURN(std::string config_text, LocalFs().ReadFile(config_path));
  json config;
  try {
    config = json::parse(config_text);
  } catch (const json::exception& e) {
    return DataError(config_path + " is not valid JSON: " + e.what());
  }
  HfModel m;
  TENAX_ASSIGN_OR_RETURN(m.spec, SpecFromHfConfig(config, config_path));
  const ModelSpec& s = m.spec;
  std::map<std::string, std::string> hf_to_tenax;
  for (const auto& [t, h] : TenaxToHfNames(s)) hf_to_tenax[h] = t;

  TENAX_ASSIGN_OR_RETURN(std::vector<std::string> files, HfWeightFiles(hf_dir));
  std::map<std::string, at::Tensor> by_name;
  std::map<std::string, std::string> file_of;  // tenax name -> the file that holds it
  for (const std::string& f : files) {
    TENAX_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::Open(f));
    TENAX_ASSIGN_OR_RETURN(std::vector<NamedTensor> tensors, ReadTensors(file));
    for (auto& t : tensors) {
      if (EndsWith(t.name, "rotary_emb.inv_freq")) continue;  // old exports carry this buffer
      auto it = hf_to_tenax.find(t.name);
      if (it == hf_to_tenax.end()) {
        return DataError(
            fmt::format("{}: tensor '{}' is not part of a {} model with this "
                        "config (tie_word_embeddings = {})",
                        f, t.name, s.moe.enabled() ? "Mixtral" : "Llama", s.tie_embeddings));
      }
      by_name[it->second] = t.tensor;
      file_of[it->second] = f;
    }
  }
  for (const auto& [name, shape] : Llama::ParamShapes(s)) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return DataError(fmt::format("{} lacks the tensor for {} (HF name {})", hf_dir, name,
                                   TenaxToHfNames(s).at(name)));
    }
    at::Tensor t = it->second;
    if (t.sizes().vec() != shape) {
      return DataError(fmt::format("{}: {} (tenax {}) has shape {}, config.json implies {}", hf_dir,
                                   TenaxToHfNames(s).at(name), name, fmt::join(t.sizes(), "x"),
                                   fmt::join(shape, "x")));
    }
    if (!options.allow_nonfinite) {
      TENAX_RETURN_IF_ERROR(CheckFinite(t, TenaxToHfNames(s).at(name), file_of.at(name)));
    }
    if (EndsWith(name, "attention.wq.weight")) t = HalvesToInterleaved(t, s.n_heads);
    if (EndsWith(name, "attention.wk.weight")) t = HalvesToInterleaved(t, s.n_kv_heads);
    // Keep the file's precision: an fp32 export re-imports bit-exactly; bf16 widens exactly.
    m.params.push_back({name, t.to(at::kFloat)});
  }
  ReadSpecialIds(config, hf_dir, &m);
  return m;
}

Status ImportHf(const std::string& hf_dir, const std::string& out, const HfReadOptions& options) {
  TENAX_ASSIGN_OR_RETURN(HfModel m, ReadHf(hf_dir, options));
  const ModelSpec& s = m.spec;
  TrainState extra;
  extra.imported_from = hf_dir;
  // The folder's tokenizer, where generate and export-hf look for a checkpoint's tokenizer
  // (train/train_checkpoint.h), by absolute path so it is found from any directory.
  if (LocalFs().Exists(JoinPath(hf_dir, "tokenizer.json"))) {
    char* abs = ::realpath(hf_dir.c_str(), nullptr);
    const std::string dir = abs != nullptr ? std::string(abs) : hf_dir;
    std::free(abs);
    extra.tokenizer = TokenizerRecord{"hf:" + dir, std::nullopt, std::nullopt};
    if (m.bos_id) extra.tokenizer->bos_id = *m.bos_id;
    if (!m.eos_ids.empty()) extra.tokenizer->eos_id = m.eos_ids[0];
  }
  TENAX_RETURN_IF_ERROR(WriteModelCheckpoint(out, 0, s, m.params, std::move(extra)));
  log::Info("imported {} into {} ({}: dim {}, {} layers, vocab {})", hf_dir, out, s.name, s.dim,
            s.n_layers, s.vocab_size);
  return Status::Ok();
}

}  // namespace tenax::model
