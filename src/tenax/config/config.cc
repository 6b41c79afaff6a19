#include "tenax/config/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "tenax/core/fs.h"

namespace tenax {
namespace {

std::string Join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string Describe(const toml::node& n) {
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  if (auto str = n.value_exact<std::string>()) return "\"" + *str + "\"";
  std::ostringstream os;
  n.visit([&os](const auto& v) { os << v; });
  return os.str();
}

// Reads the keys of one [section], remembering which were used so the rest can be reported as
// unknown. Errors accumulate so one run reports every mistake in the file.
class Section {
 public:
  Section(const toml::table* table, std::string name, std::vector<std::string>* errors)
      : table_(table), name_(std::move(name)), errors_(errors) {}

  const std::string& name() const { return name_; }

  void Get(const char* key, std::string* out, std::vector<std::string> allowed = {}) {
    const toml::node* n = Find(key);
    if (!n) return;
    if (auto v = n->value<std::string>()) {
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *v) == allowed.end()) {
        Error(key, *n, "one of: " + Join(allowed));
        return;
      }
      *out = *v;
    } else {
      Error(key, *n, allowed.empty() ? "a string" : "one of: " + Join(allowed));
    }
  }
  void Get(const char* key, int64_t* out) {
    const toml::node* n = Find(key);
    if (!n) return;
    if (auto v = n->value_exact<int64_t>())
      *out = *v;
    else
      Error(key, *n, "an integer");
  }
  void Get(const char* key, uint64_t* out) {
    const toml::node* n = Find(key);
    if (!n) return;
    auto v = n->value_exact<int64_t>();
    if (v && *v >= 0)
      *out = static_cast<uint64_t>(*v);
    else
      Error(key, *n, "a non-negative integer");
  }
  void Get(const char* key, double* out) {
    const toml::node* n = Find(key);
    if (!n) return;
    // Integers are accepted as numbers; inf and nan (valid TOML) are never a sensible setting.
    if (auto v = n->value<double>(); v && std::isfinite(*v))
      *out = *v;
    else
      Error(key, *n, "a finite number");
  }
  // An integer, or the string "auto" (sets *is_auto and leaves *out alone).
  void GetIntOrAuto(const char* key, int64_t* out, bool* is_auto) {
    const toml::node* n = Find(key);
    if (!n) return;
    if (auto v = n->value_exact<int64_t>()) {
      *out = *v;
      *is_auto = false;
    } else if (auto str = n->value_exact<std::string>(); str && *str == "auto") {
      *is_auto = true;
    } else {
      Error(key, *n, "an integer or \"auto\"");
    }
  }
  void Get(const char* key, bool* out) {
    const toml::node* n = Find(key);
    if (!n) return;
    if (auto v = n->value_exact<bool>())
      *out = *v;
    else
      Error(key, *n, "true or false");
  }
  template <typename T>
  void Get(const char* key, std::optional<T>* out) {
    if (!table_ || !table_->contains(key)) {
      known_.insert(key);
      return;
    }
    T v{};
    size_t before = errors_->size();
    Get(key, &v);
    if (errors_->size() == before) *out = v;
  }
  // A nested table such as [data.synthetic].
  Section Sub(const char* key) {
    known_.insert(key);
    const toml::table* sub = nullptr;
    if (table_) {
      if (const toml::node* n = table_->get(key)) {
        sub = n->as_table();
        if (!sub)
          errors_->push_back(
              fmt::format("[{}] {} must be a table ([{}.{}])", name_, key, name_, key));
      }
    }
    return Section(sub, name_ + "." + key, errors_);
  }

  // Range checks, phrased the same everywhere.
  void Check(bool ok, const char* key, const std::string& value, const std::string& allowed) {
    if (!ok)
      errors_->push_back(
          fmt::format("{}.{} = {} is invalid: must be {}", name_, key, value, allowed));
  }
  template <typename T>
  void Positive(const char* key, T v) {
    Check(v > 0, key, fmt::format("{}", v), "> 0");
  }
  template <typename T>
  void NonNegative(const char* key, T v) {
    Check(v >= 0, key, fmt::format("{}", v), ">= 0");
  }

  void ReportUnknown() const {
    if (!table_) return;
    for (const auto& [k, v] : *table_) {
      std::string key(k.str());
      if (known_.count(key)) continue;
      std::vector<std::string> allowed(known_.begin(), known_.end());
      errors_->push_back(fmt::format("unknown key '{}.{}'; allowed keys in [{}]: {}", name_, key,
                                     name_, Join(allowed)));
    }
  }

 private:
  const toml::node* Find(const char* key) {
    known_.insert(key);
    return table_ ? table_->get(key) : nullptr;
  }
  void Error(const char* key, const toml::node& n, const std::string& expected) {
    errors_->push_back(
        fmt::format("{}.{} = {} is invalid: expected {}", name_, key, Describe(n), expected));
  }

  const toml::table* table_;
  std::string name_;
  std::vector<std::string>* errors_;
  std::set<std::string> known_;
};

// Applies "a.b.c=value": the value is read as a TOML value when it parses as one (numbers, bools,
// quoted strings, arrays) and as a bare string otherwise, so `--set data.source=synthetic` works.
Status ApplyOverride(toml::table* root, const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--set " + spec + ": expected section.key=value");
  }
  std::string path = spec.substr(0, eq);
  std::string value = spec.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.size() < 2) {
    return InvalidArgument("--set " + spec +
                           ": the key must name its section, e.g. training.steps");
  }
  toml::table* t = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* n = t->get(parts[i]);
    if (!n) {
      t->insert(parts[i], toml::table{});
      n = t->get(parts[i]);
    }
    t = n->as_table();
    if (!t) return InvalidArgument("--set " + spec + ": '" + parts[i] + "' is not a table");
  }
  try {
    toml::table parsed = toml::parse("v = " + value);
    t->insert_or_assign(parts.back(), *parsed.get("v"));
  } catch (const toml::parse_error&) {
    t->insert_or_assign(parts.back(), value);
  }
  return Status::Ok();
}

void ReadConfig(const toml::table& root, Config* c, std::vector<std::string>* errors) {
  std::vector<Section> sections;
  auto section = [&](const char* name) -> Section& {
    const toml::node* n = root.get(name);
    const toml::table* t = n ? n->as_table() : nullptr;
    if (n && !t) errors->push_back(fmt::format("[{}] must be a table", name));
    sections.emplace_back(t, name, errors);
    return sections.back();
  };
  sections.reserve(16);

  Section& job = section("job");
  job.Get("name", &c->job.name);
  job.Get("dump_folder", &c->job.dump_folder);
  job.Get("seed", &c->job.seed);
  job.Get("description", &c->job.description);
  job.Check(!c->job.name.empty() && c->job.name.find('/') == std::string::npos, "name",
            "'" + c->job.name + "'", "a non-empty name without '/'");

  Section& m = section("model");
  m.Get("preset", &c->model.preset);
  m.Get("dim", &c->model.dim);
  m.Get("n_layers", &c->model.n_layers);
  m.Get("n_heads", &c->model.n_heads);
  m.Get("n_kv_heads", &c->model.n_kv_heads);
  m.Get("ffn_hidden_dim", &c->model.ffn_hidden_dim);
  m.Get("vocab_size", &c->model.vocab_size);
  m.Get("norm_eps", &c->model.norm_eps);
  m.Get("rope_theta", &c->model.rope_theta);
  m.Get("rope_scaling", &c->model.rope_scaling);
  m.Get("tie_embeddings", &c->model.tie_embeddings);
  m.Get("max_seq_len", &c->model.max_seq_len);
  m.Get("init_std", &c->model.init_std);
  m.Get("n_experts", &c->model.n_experts);
  m.Get("n_experts_per_token", &c->model.n_experts_per_token);
  m.Get("n_shared_experts", &c->model.n_shared_experts);
  m.Get("moe_ffn_hidden_dim", &c->model.moe_ffn_hidden_dim);
  m.Get("moe_router", &c->model.moe_router);
  m.Get("moe_aux_loss_coef", &c->model.moe_aux_loss_coef);
  m.Get("moe_bias_update_rate", &c->model.moe_bias_update_rate);
  m.Get("moe_layer_start", &c->model.moe_layer_start);
  m.Get("moe_layer_interval", &c->model.moe_layer_interval);
  for (auto [key, v] : {std::pair{"dim", c->model.dim},
                        {"n_layers", c->model.n_layers},
                        {"n_heads", c->model.n_heads},
                        {"n_kv_heads", c->model.n_kv_heads},
                        {"ffn_hidden_dim", c->model.ffn_hidden_dim},
                        {"max_seq_len", c->model.max_seq_len}}) {
    if (v) m.Positive(key, *v);
  }
  if (c->model.vocab_size) m.NonNegative("vocab_size", *c->model.vocab_size);
  // Mixture of experts: ranges here; how the keys fit together in ResolveModelSpec.
  if (c->model.n_experts) m.NonNegative("n_experts", *c->model.n_experts);
  if (c->model.n_experts_per_token)
    m.Positive("n_experts_per_token", *c->model.n_experts_per_token);
  if (c->model.n_shared_experts) m.NonNegative("n_shared_experts", *c->model.n_shared_experts);
  if (c->model.moe_ffn_hidden_dim) m.Positive("moe_ffn_hidden_dim", *c->model.moe_ffn_hidden_dim);
  if (c->model.moe_router) {
    m.Check(*c->model.moe_router == "softmax" || *c->model.moe_router == "sigmoid", "moe_router",
            "\"" + *c->model.moe_router + "\"",
            "\"softmax\" (Mixtral) or \"sigmoid\" (DeepSeek-V3)");
  }
  if (c->model.moe_aux_loss_coef) {
    m.Check(*c->model.moe_aux_loss_coef >= 0 && *c->model.moe_aux_loss_coef <= 1,
            "moe_aux_loss_coef", fmt::format("{}", *c->model.moe_aux_loss_coef),
            "in [0, 1] (Mixtral uses 0.02, 0 turns the load-balancing loss off)");
  }
  if (c->model.moe_bias_update_rate) {
    m.Check(*c->model.moe_bias_update_rate >= 0 && *c->model.moe_bias_update_rate <= 1,
            "moe_bias_update_rate", fmt::format("{}", *c->model.moe_bias_update_rate),
            "in [0, 1] (DeepSeek-V3 uses 0.001)");
  }
  if (c->model.moe_layer_start) m.NonNegative("moe_layer_start", *c->model.moe_layer_start);
  if (c->model.moe_layer_interval) m.Positive("moe_layer_interval", *c->model.moe_layer_interval);
  m.Check(c->model.init_std > 0 && c->model.init_std <= 1, "init_std",
          fmt::format("{}", c->model.init_std), "in (0, 1]");
  if (c->model.norm_eps) {
    m.Check(*c->model.norm_eps > 0 && *c->model.norm_eps <= 0.1, "norm_eps",
            fmt::format("{}", *c->model.norm_eps), "in (0, 0.1] (Llama 3 uses 1e-5)");
  }
  if (c->model.rope_theta) m.Positive("rope_theta", *c->model.rope_theta);

  Section& d = section("data");
  d.Get("source", &c->data.source, {"brown", "synthetic", "shards", "tokens"});
  d.Get("path", &c->data.path);
  d.Get("val_path", &c->data.val_path);
  d.Get("token_format", &c->data.token_format, {"auto", "tenax", "llmc", "nanogpt"});
  d.Get("vocab_size", &c->data.vocab_size);
  d.Get("tokenizer", &c->data.tokenizer);
  d.Get("brown_dir", &c->data.brown_dir);
  d.Get("cache_dir", &c->data.cache_dir);
  d.Check(c->data.source != "shards" || !c->data.path.empty(), "path", "\"\"",
          "a folder written by `tenax prepare` when data.source = \"shards\"");
  d.Check(c->data.source != "tokens" || !c->data.path.empty(), "path", "\"\"",
          "the training token file(s), a path or a glob, when data.source = \"tokens\"");
  d.Check(c->data.source != "tokens" || !c->data.val_path.empty(), "val_path", "\"\"",
          "the validation token file(s), a path or a glob, when data.source = \"tokens\"");
  d.Check(c->data.vocab_size >= 0 && c->data.vocab_size <= (int64_t{1} << 31), "vocab_size",
          std::to_string(c->data.vocab_size), "between 0 (from the files) and 2^31");
  {
    Section s = d.Sub("synthetic");
    SyntheticOptions& so = c->data.synthetic;
    s.Get("vocab_size", &so.vocab_size);
    s.Get("order", &so.order);
    s.Get("train_tokens", &so.train_tokens);
    s.Get("val_tokens", &so.val_tokens);
    s.Get("seed", &so.seed);
    s.Get("concentration", &so.concentration);
    s.Check(so.vocab_size >= 2 && so.vocab_size <= 65536, "vocab_size",
            std::to_string(so.vocab_size), "between 2 and 65536");
    s.Check(so.order >= 1 && so.order <= 4, "order", std::to_string(so.order), "1, 2, 3 or 4");
    s.Positive("train_tokens", so.train_tokens);
    s.Positive("val_tokens", so.val_tokens);
    s.Positive("concentration", so.concentration);
    s.ReportUnknown();
  }

  Section& o = section("optimizer");
  o.Get("name", &c->optimizer.name, {"adamw"});
  o.Get("lr", &c->optimizer.lr);
  o.Get("beta1", &c->optimizer.beta1);
  o.Get("beta2", &c->optimizer.beta2);
  o.Get("eps", &c->optimizer.eps);
  o.Get("weight_decay", &c->optimizer.weight_decay);
  o.Check(c->optimizer.lr > 0 && c->optimizer.lr <= 1, "lr", fmt::format("{}", c->optimizer.lr),
          "in (0, 1] (AdamW learning rates are around 1e-4 to 1e-2)");
  o.Check(c->optimizer.beta1 >= 0 && c->optimizer.beta1 < 1, "beta1",
          fmt::format("{}", c->optimizer.beta1), "in [0, 1)");
  o.Check(c->optimizer.beta2 >= 0 && c->optimizer.beta2 < 1, "beta2",
          fmt::format("{}", c->optimizer.beta2), "in [0, 1)");
  o.Check(c->optimizer.eps > 0 && c->optimizer.eps < 1, "eps", fmt::format("{}", c->optimizer.eps),
          "in (0, 1)");
  o.Check(c->optimizer.weight_decay >= 0 && c->optimizer.weight_decay <= 10, "weight_decay",
          fmt::format("{}", c->optimizer.weight_decay), "in [0, 10]");

  Section& l = section("lr_scheduler");
  l.Get("name", &c->lr_scheduler.name, {"cosine", "wsd", "constant"});
  l.Get("warmup_steps", &c->lr_scheduler.warmup_steps);
  l.Get("min_lr_ratio", &c->lr_scheduler.min_lr_ratio);
  l.Get("decay_ratio", &c->lr_scheduler.decay_ratio);
  l.Get("decay_type", &c->lr_scheduler.decay_type, {"linear", "sqrt", "cosine"});
  l.NonNegative("warmup_steps", c->lr_scheduler.warmup_steps);
  l.Check(c->lr_scheduler.min_lr_ratio >= 0 && c->lr_scheduler.min_lr_ratio <= 1, "min_lr_ratio",
          fmt::format("{}", c->lr_scheduler.min_lr_ratio), "in [0, 1]");
  l.Check(c->lr_scheduler.decay_ratio >= 0 && c->lr_scheduler.decay_ratio <= 1, "decay_ratio",
          fmt::format("{}", c->lr_scheduler.decay_ratio), "in [0, 1]");

  Section& t = section("training");
  t.Get("steps", &c->training.steps);
  t.Get("local_batch_size", &c->training.local_batch_size);
  t.Get("seq_len", &c->training.seq_len);
  t.Get("grad_accum_steps", &c->training.grad_accum_steps);
  t.Get("global_batch_size", &c->training.global_batch_size);
  t.Get("max_norm", &c->training.max_norm);
  t.Get("mixed_precision", &c->training.mixed_precision, {"auto", "bf16", "fp32"});
  t.Get("device", &c->training.device, {"auto", "cpu", "cuda"});
  t.Get("threads", &c->training.threads);
  t.Get("stop_at", &c->training.stop_at);
  t.Get("on_nonfinite", &c->training.on_nonfinite, {"stop", "restart"});
  t.Get("loss_spike_factor", &c->training.loss_spike_factor);
  t.Get("loss_spike_window", &c->training.loss_spike_window);
  t.Get("on_loss_spike", &c->training.on_loss_spike, {"warn", "skip", "restart", "stop"});
  t.Check(c->training.loss_spike_factor == 0 || c->training.loss_spike_factor > 1,
          "loss_spike_factor", fmt::format("{}", c->training.loss_spike_factor),
          "0 (off) or greater than 1 (e.g. 3: a loss three times the recent median is a spike)");
  t.Positive("loss_spike_window", c->training.loss_spike_window);
  t.Positive("steps", c->training.steps);
  t.Positive("local_batch_size", c->training.local_batch_size);
  t.Positive("seq_len", c->training.seq_len);
  t.Positive("grad_accum_steps", c->training.grad_accum_steps);
  t.NonNegative("global_batch_size", c->training.global_batch_size);
  t.Check(c->training.global_batch_size == 0 || c->training.grad_accum_steps == 1,
          "grad_accum_steps", std::to_string(c->training.grad_accum_steps),
          fmt::format("1 (unset) when training.global_batch_size ({}) is set: accumulation is then "
                      "derived from the global batch",
                      c->training.global_batch_size));
  t.NonNegative("max_norm", c->training.max_norm);
  t.NonNegative("threads", c->training.threads);
  t.NonNegative("stop_at", c->training.stop_at);

  Section& pa = section("parallelism");
  ParallelismOptions& po = c->parallelism;
  pa.Get("data_parallel_replicate", &po.data_parallel_replicate);
  pa.Get("data_parallel_shard", &po.data_parallel_shard);
  pa.Get("tensor_parallel", &po.tensor_parallel);
  pa.Get("pipeline_parallel", &po.pipeline_parallel);
  pa.Get("expert_parallel", &po.expert_parallel);
  pa.Get("pipeline_schedule", &po.pipeline_schedule, {"gpipe", "1f1b", "interleaved_1f1b"});
  pa.Get("virtual_stages", &po.virtual_stages);
  pa.Get("microbatches", &po.microbatches);
  pa.Get("activation_checkpoint", &po.activation_checkpoint, {"none", "selective", "full"});
  pa.Get("collective_timeout_s", &po.collective_timeout_s);
  pa.Check(po.collective_timeout_s >= 0, "collective_timeout_s",
           std::to_string(po.collective_timeout_s), ">= 0 seconds (0 disables the watchdog)");
  pa.Positive("data_parallel_replicate", po.data_parallel_replicate);
  pa.Check(po.data_parallel_shard == -1 || po.data_parallel_shard > 0, "data_parallel_shard",
           std::to_string(po.data_parallel_shard), "-1 (the rest of the world) or > 0");
  pa.Positive("tensor_parallel", po.tensor_parallel);
  pa.Positive("pipeline_parallel", po.pipeline_parallel);
  pa.Positive("expert_parallel", po.expert_parallel);
  pa.Positive("virtual_stages", po.virtual_stages);
  pa.Positive("microbatches", po.microbatches);

  Section& k = section("checkpoint");
  k.Get("enable", &c->checkpoint.enable);
  k.Get("folder", &c->checkpoint.folder);
  k.GetIntOrAuto("interval", &c->checkpoint.interval, &c->checkpoint.interval_auto);
  k.Get("failure_rate_per_hour", &c->checkpoint.failure_rate_per_hour);
  k.Get("async", &c->checkpoint.async);
  k.Get("memory_replicas", &c->checkpoint.memory_replicas);
  k.Get("keep_latest", &c->checkpoint.keep_latest);
  k.Get("resume", &c->checkpoint.resume);
  k.Positive("interval", c->checkpoint.interval);
  k.NonNegative("keep_latest", c->checkpoint.keep_latest);
  k.Positive("failure_rate_per_hour", c->checkpoint.failure_rate_per_hour);
  k.Check(!c->checkpoint.resume.empty(), "resume", "\"\"", "latest, none, or a checkpoint path");

  Section& x = section("metrics");
  x.Get("log_interval", &c->metrics.log_interval);
  x.Get("eval_interval", &c->metrics.eval_interval);
  x.Get("eval_tokens", &c->metrics.eval_tokens);
  x.Get("tensorboard", &c->metrics.tensorboard);
  x.Get("progress", &c->metrics.progress, {"auto", "always", "never"});
  x.Positive("log_interval", c->metrics.log_interval);
  x.NonNegative("eval_interval", c->metrics.eval_interval);
  x.Positive("eval_tokens", c->metrics.eval_tokens);

  for (const Section& s : sections) s.ReportUnknown();
  std::set<std::string> known;
  for (const Section& s : sections) known.insert(s.name());
  for (const auto& [k2, v] : root) {
    if (!known.count(std::string(k2.str()))) {
      errors->push_back(fmt::format("unknown section [{}]; allowed sections: {}", k2.str(),
                                    Join(std::vector<std::string>(known.begin(), known.end()))));
    }
  }
}

}  // namespace

Result<Config> ParseConfig(std::string_view text, const std::vector<std::string>& overrides,
                           const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return InvalidArgument(fmt::format("{}:{}:{}: TOML syntax error: {}", source_name, where.line,
                                       where.column, e.description()));
  }
  for (const std::string& o : overrides) TENAX_RETURN_IF_ERROR(ApplyOverride(&root, o));
  Config config;
  std::vector<std::string> errors;
  ReadConfig(root, &config, &errors);
  if (!errors.empty()) {
    std::string msg = fmt::format("{} has {} problem{}:", source_name, errors.size(),
                                  errors.size() == 1 ? "" : "s");
    for (const auto& e : errors) msg += "\n  - " + e;
    return InvalidArgument(msg);
  }
  return config;
}

Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  if (!path.empty()) {
    auto r = LocalFs().ReadFile(path);
    if (!r.ok()) return r.status().WithContext("reading config");
    text = std::move(r).value();
  }
  return ParseConfig(text, overrides, path.empty() ? "<defaults>" : path);
}

std::string ConfigToToml(const Config& c) {
  auto opt = [](toml::table& t, const char* k, const auto& v) {
    if (v) t.insert(k, *v);
  };
  toml::table model{{"preset", c.model.preset}, {"init_std", c.model.init_std}};
  opt(model, "dim", c.model.dim);
  opt(model, "n_layers", c.model.n_layers);
  opt(model, "n_heads", c.model.n_heads);
  opt(model, "n_kv_heads", c.model.n_kv_heads);
  opt(model, "ffn_hidden_dim", c.model.ffn_hidden_dim);
  opt(model, "vocab_size", c.model.vocab_size);
  opt(model, "norm_eps", c.model.norm_eps);
  opt(model, "rope_theta", c.model.rope_theta);
  opt(model, "rope_scaling", c.model.rope_scaling);
  opt(model, "tie_embeddings", c.model.tie_embeddings);
  opt(model, "max_seq_len", c.model.max_seq_len);
  opt(model, "n_experts", c.model.n_experts);
  opt(model, "n_experts_per_token", c.model.n_experts_per_token);
  opt(model, "n_shared_experts", c.model.n_shared_experts);
  opt(model, "moe_ffn_hidden_dim", c.model.moe_ffn_hidden_dim);
  opt(model, "moe_router", c.model.moe_router);
  opt(model, "moe_aux_loss_coef", c.model.moe_aux_loss_coef);
  opt(model, "moe_bias_update_rate", c.model.moe_bias_update_rate);
  opt(model, "moe_layer_start", c.model.moe_layer_start);
  opt(model, "moe_layer_interval", c.model.moe_layer_interval);
  const SyntheticOptions& s = c.data.synthetic;
  toml::table root{
      {"job", toml::table{{"name", c.job.name},
                          {"dump_folder", c.job.dump_folder},
                          {"seed", static_cast<int64_t>(c.job.seed)},
                          {"description", c.job.description}}},
      {"model", model},
      {"data", toml::table{{"source", c.data.source}, {"path", c.data.path},
                           {"val_path", c.data.val_path}, {"token_format", c.data.token_format},
                           {"vocab_size", c.data.vocab_size},
                           {"tokenizer", c.data.tokenizer}, {"brown_dir", c.data.brown_dir},
                           {"cache_dir", c.data.cache_dir},
                           {"synthetic", toml::table{{"vocab_size", s.vocab_size},
                                                     {"order", s.order},
                                                     {"train_tokens", s.train_tokens},
                                                     {"val_tokens", s.val_tokens},
                                                     {"seed", static_cast<int64_t>(s.seed)},
                                                     {"concentration", s.concentration}}}}},
      {"optimizer", toml::table{{"name", c.optimizer.name},
                                {"lr", c.optimizer.lr},
                                {"beta1", c.optimizer.beta1},
                                {"beta2", c.optimizer.beta2},
                                {"eps", c.optimizer.eps},
                                {"weight_decay", c.optimizer.weight_decay}}},
      {"lr_scheduler", toml::table{{"name", c.lr_scheduler.name},
                                   {"warmup_steps", c.lr_scheduler.warmup_steps},
                                   {"min_lr_ratio", c.lr_scheduler.min_lr_ratio},
                                   {"decay_ratio", c.lr_scheduler.decay_ratio},
                                   {"decay_type", c.lr_scheduler.decay_type}}},
      {"training", toml::table{{"steps", c.training.steps},
                               {"local_batch_size", c.training.local_batch_size},
                               {"seq_len", c.training.seq_len},
                               {"grad_accum_steps", c.training.grad_accum_steps},
                               {"global_batch_size", c.training.global_batch_size},
                               {"max_norm", c.training.max_norm},
                               {"mixed_precision", c.training.mixed_precision},
                               {"device", c.training.device},
                               {"threads", c.training.threads},
                               {"stop_at", c.training.stop_at},
                               {"on_nonfinite", c.training.on_nonfinite},
                               {"loss_spike_factor", c.training.loss_spike_factor},
                               {"loss_spike_window", c.training.loss_spike_window},
                               {"on_loss_spike", c.training.on_loss_spike}}},
      {"parallelism",
       toml::table{{"data_parallel_replicate", c.parallelism.data_parallel_replicate},
                   {"data_parallel_shard", c.parallelism.data_parallel_shard},
                   {"tensor_parallel", c.parallelism.tensor_parallel},
                   {"pipeline_parallel", c.parallelism.pipeline_parallel},
                   {"pipeline_schedule", c.parallelism.pipeline_schedule},
                   {"virtual_stages", c.parallelism.virtual_stages},
                   {"microbatches", c.parallelism.microbatches},
                   {"expert_parallel", c.parallelism.expert_parallel},
                   {"activation_checkpoint", c.parallelism.activation_checkpoint},
                   {"collective_timeout_s", c.parallelism.collective_timeout_s}}},
      {"checkpoint", toml::table{{"enable", c.checkpoint.enable},
                                 {"folder", c.checkpoint.folder},
                                 {"interval", c.checkpoint.interval},
                                 {"keep_latest", c.checkpoint.keep_latest},
                                 {"resume", c.checkpoint.resume},
                                 {"failure_rate_per_hour", c.checkpoint.failure_rate_per_hour},
                                 {"async", c.checkpoint.async},
                                 {"memory_replicas", c.checkpoint.memory_replicas}}},
      {"metrics", toml::table{{"log_interval", c.metrics.log_interval},
                              {"eval_interval", c.metrics.eval_interval},
                              {"eval_tokens", c.metrics.eval_tokens},
                              {"tensorboard", c.metrics.tensorboard},
                              {"progress", c.metrics.progress}}},
  };
  if (c.checkpoint.interval_auto) {
    root.get("checkpoint")->as_table()->insert_or_assign("interval", "auto");
  }
  std::ostringstream os;
  os << root << "\n";
  return os.str();
}

}  // namespace tenax
