#include "tenax/config/keys.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tenax {
namespace {

std::string Num(double v) { return fmt::format("{}", v); }

std::string BoundsText(const std::optional<KeyBound>& lo, const std::optional<KeyBound>& hi) {
  if (lo && hi) {
    return fmt::format("in {}{}, {}{}", lo->inclusive ? "[" : "(", Num(lo->value), Num(hi->value),
                       hi->inclusive ? "]" : ")");
  }
  if (lo) return fmt::format("{} {}", lo->inclusive ? ">=" : ">", Num(lo->value));
  if (hi) return fmt::format("{} {}", hi->inclusive ? "<=" : "<", Num(hi->value));
  return "";
}

// The table. Order: sections as written in a config file; within a section, the order of
// options.h. Range texts that say more than the bounds keep their explanation.
std::vector<KeySpec> BuildKeys() {
  std::vector<KeySpec> k;
  auto add = [&k](KeySpec s) -> KeySpec& {
    k.push_back(std::move(s));
    return k.back();
  };

  // [job]
  add(TENAX_KEY(job.name, "the run's name; its folder is job.dump_folder/job.name"))
      .Check(
          [](const Config& c) {
            return !c.job.name.empty() && c.job.name.find('/') == std::string::npos;
          },
          "a non-empty name without '/'");
  add(TENAX_KEY(job.dump_folder, "where run folders are created"));
  add(TENAX_KEY(job.seed, "seed of the initial weights and the data order"));
  add(TENAX_KEY(job.description, "free text stored with the run"));

  // [model]
  add(TENAX_KEY(model.preset,
                "model preset: debug-tiny | debug-small | llama3-8b | llama3-70b | llama3-405b | "
                "... (`tenax model --preset NAME` prints one)"));
  add(TENAX_KEY(model.dim, "model (hidden) dimension")).Above(0);
  add(TENAX_KEY(model.n_layers, "transformer blocks")).Above(0);
  add(TENAX_KEY(model.n_heads, "attention heads")).Above(0);
  add(TENAX_KEY(model.n_kv_heads, "key/value heads (grouped-query attention)")).Above(0);
  add(TENAX_KEY(model.ffn_hidden_dim, "feed-forward (SwiGLU) width")).Above(0);
  add(TENAX_KEY(model.vocab_size, "vocabulary size; 0 on debug presets: from the data")).AtLeast(0);
  add(TENAX_KEY(model.norm_eps, "RMSNorm epsilon"))
      .Range(KeyBound{0, false}, KeyBound{0.1, true}, "in (0, 0.1] (Llama 3 uses 1e-5)");
  add(TENAX_KEY(model.rope_theta, "rotary embedding base")).Above(0);
  add(TENAX_KEY(model.rope_scaling, "Llama 3.1 rotary frequency scaling"));
  add(TENAX_KEY(model.tie_embeddings, "the output projection shares the embedding's weights"));
  add(TENAX_KEY(model.max_seq_len, "longest sequence the model is built for")).Above(0);
  add(TENAX_KEY(model.init_std, "standard deviation of the initial weights"))
      .Range(KeyBound{0, false}, KeyBound{1, true});
  // Mixture of experts (docs/moe.md): ranges here; how the keys fit together in ResolveModelSpec.
  add(TENAX_KEY(model.n_experts, "routed experts per MoE layer; 0 = a dense model")).AtLeast(0);
  add(TENAX_KEY(model.n_experts_per_token, "experts each token is routed to (top-k)")).Above(0);
  add(TENAX_KEY(model.n_shared_experts, "shared experts every token passes through")).AtLeast(0);
  add(TENAX_KEY(model.moe_ffn_hidden_dim, "each expert's SwiGLU width")).Above(0);
  add(TENAX_KEY(model.moe_router, "softmax (Mixtral) | sigmoid (DeepSeek-V3)"))
      .OneOf({"softmax", "sigmoid"});
  add(TENAX_KEY(model.moe_aux_loss_coef, "weight of the load-balancing loss; 0 = off"))
      .Range(KeyBound{0, true}, KeyBound{1, true},
             "in [0, 1] (Mixtral uses 0.02, 0 turns the load-balancing loss off)");
  add(TENAX_KEY(model.moe_bias_update_rate,
                "sigmoid router: selection-bias step per optimizer step; 0 = no bias balancing"))
      .Range(KeyBound{0, true}, KeyBound{1, true}, "in [0, 1] (DeepSeek-V3 uses 0.001)");
  add(TENAX_KEY(model.moe_layer_start, "the first MoE layer")).AtLeast(0);
  add(TENAX_KEY(model.moe_layer_interval, "an MoE layer every this many layers")).Above(0);

  // [data]
  add(TENAX_KEY(data.source,
                "brown (the Brown corpus) | synthetic (a Markov source with a known entropy "
                "rate) | shards (`tenax prepare` output) | tokens (token files)"))
      .OneOf({"brown", "synthetic", "shards", "tokens"});
  add(TENAX_KEY(data.path,
                "shards: the folder `tenax prepare` wrote; tokens: the training token file(s), a "
                "path or a glob"))
      .Check([](const Config& c) { return c.data.source != "shards" || !c.data.path.empty(); },
             "a folder written by `tenax prepare` when data.source = \"shards\"")
      .Check([](const Config& c) { return c.data.source != "tokens" || !c.data.path.empty(); },
             "the training token file(s), a path or a glob, when data.source = \"tokens\"");
  add(TENAX_KEY(data.val_path, "tokens: the validation token file(s), a path or a glob"))
      .Check([](const Config& c) { return c.data.source != "tokens" || !c.data.val_path.empty(); },
             "the validation token file(s), a path or a glob, when data.source = \"tokens\"");
  add(TENAX_KEY(data.token_format, "tokens: the token files' format"))
      .OneOf({"auto", "tenax", "llmc", "nanogpt"});
  add(TENAX_KEY(data.vocab_size,
                "tokens: the vocabulary size; 0 = from the files (nanogpt "
                "files need it)"))
      .Range(KeyBound{0, true}, KeyBound{2147483648.0, true},
             "between 0 (from the files) and 2^31");
  add(TENAX_KEY(data.tokenizer,
                "brown: byte | tiktoken:FILE | hf:TOKENIZER_JSON | sentencepiece:MODEL_FILE"));
  add(TENAX_KEY(data.brown_dir, "brown: the corpus folder; empty = the usual places"));
  add(TENAX_KEY(data.cache_dir, "tokenized data is cached here"));

  // [data.synthetic]
  add(TENAX_KEY(data.synthetic.vocab_size, "synthetic: vocabulary size"))
      .Range(KeyBound{2, true}, KeyBound{65536, true}, "between 2 and 65536");
  add(TENAX_KEY(data.synthetic.order, "synthetic: tokens of context the next token depends on"))
      .Range(KeyBound{1, true}, KeyBound{4, true}, "1, 2, 3 or 4");
  add(TENAX_KEY(data.synthetic.train_tokens, "synthetic: training tokens")).Above(0);
  add(TENAX_KEY(data.synthetic.val_tokens, "synthetic: validation tokens")).Above(0);
  add(TENAX_KEY(data.synthetic.seed, "synthetic: seed of the source"));
  add(TENAX_KEY(data.synthetic.concentration,
                "synthetic: how concentrated each context's next-token distribution is (lower = "
                "lower entropy)"))
      .Above(0);

  // [optimizer]
  add(TENAX_KEY(optimizer.name, "the optimizer")).OneOf({"adamw"});
  add(TENAX_KEY(optimizer.lr, "peak learning rate"))
      .Range(KeyBound{0, false}, KeyBound{1, true},
             "in (0, 1] (AdamW learning rates are around 1e-4 to 1e-2)");
  add(TENAX_KEY(optimizer.beta1, "AdamW beta1")).Range(KeyBound{0, true}, KeyBound{1, false});
  add(TENAX_KEY(optimizer.beta2, "AdamW beta2")).Range(KeyBound{0, true}, KeyBound{1, false});
  add(TENAX_KEY(optimizer.eps, "AdamW epsilon")).Range(KeyBound{0, false}, KeyBound{1, false});
  add(TENAX_KEY(optimizer.weight_decay, "decoupled weight decay, on matrices only"))
      .Range(KeyBound{0, true}, KeyBound{10, true});

  // [lr_scheduler]
  add(TENAX_KEY(lr_scheduler.name,
                "cosine (warmup, cosine decay) | wsd (warmup, stable, decay) | constant"))
      .OneOf({"cosine", "wsd", "constant"});
  add(TENAX_KEY(lr_scheduler.warmup_steps, "steps of linear warmup")).AtLeast(0);
  add(TENAX_KEY(lr_scheduler.min_lr_ratio, "final learning rate as a fraction of optimizer.lr"))
      .Range(KeyBound{0, true}, KeyBound{1, true});
  add(TENAX_KEY(lr_scheduler.decay_ratio, "wsd: fraction of the steps spent decaying"))
      .Range(KeyBound{0, true}, KeyBound{1, true});
  add(TENAX_KEY(lr_scheduler.decay_type, "wsd: shape of the decay"))
      .OneOf({"linear", "sqrt", "cosine"});

  // [training]
  add(TENAX_KEY(training.steps, "optimizer steps of the whole run")).Above(0);
  add(TENAX_KEY(training.local_batch_size, "sequences per micro-batch on each data-parallel rank"))
      .Above(0);
  add(TENAX_KEY(training.seq_len, "tokens per sequence")).Above(0);
  add(TENAX_KEY(training.grad_accum_steps, "micro-batches per optimizer step"))
      .Above(0)
      .Check(
          [](const Config& c) {
            return c.training.global_batch_size == 0 || c.training.grad_accum_steps == 1;
          },
          "1 (unset) when training.global_batch_size is set: accumulation is then derived from "
          "the global batch");
  add(TENAX_KEY(training.global_batch_size,
                "sequences per optimizer step over all data-parallel ranks; 0 = local_batch_size "
                "x grad_accum_steps x data-parallel ranks. Set, grad_accum_steps is derived from "
                "it, so a resume on another number of ranks keeps the batch (config/batch.h)"))
      .AtLeast(0);
  add(TENAX_KEY(training.max_norm, "global gradient-norm clip; 0 disables")).AtLeast(0);
  add(TENAX_KEY(training.mixed_precision,
                "auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32 | fp8 (bf16, with the blocks' "
                "matmuls as float8 GEMMs, tensorwise dynamic scaling: docs/performance.md)"))
      .OneOf({"auto", "bf16", "fp32", "fp8"});
  add(TENAX_KEY(training.device, "auto | cpu | cuda")).OneOf({"auto", "cpu", "cuda"});
  add(TENAX_KEY(training.fused_kernels,
                "GPU: tenax's fused paths (the loss head's fp32-output GEMMs, the fused AdamW "
                "kernel); false runs the plain libtorch composition (A/B, debugging)"));
  add(TENAX_KEY(training.threads,
                "CPU intra-op threads; 0 = chosen from the machine (logged at start)"))
      .AtLeast(0);
  add(TENAX_KEY(training.stop_at,
                "stop (after checkpointing) once this step is done; the schedule still spans "
                "training.steps; 0 = off"))
      .AtLeast(0);
  add(TENAX_KEY(training.on_nonfinite,
                "a NaN/Inf loss or gradient norm: stop (exit code 7) | restart (exit code 8: "
                "tenax launch resumes from the last good checkpoint)"))
      .OneOf({"stop", "restart"});
  add(TENAX_KEY(training.loss_spike_factor,
                "a loss above this many times the recent median is a spike; 0 = off"))
      .Above(1,
             "0 (off) or greater than 1 (e.g. 3: a loss three times the recent median is a spike)")
      .Or(0);
  add(TENAX_KEY(training.loss_spike_window, "steps whose median loss a spike is compared with"))
      .Above(0);
  add(TENAX_KEY(training.on_loss_spike,
                "warn | skip (drop the step's update) | restart (roll back to the newest "
                "checkpoint) | stop (exit code 7)"))
      .OneOf({"warn", "skip", "restart", "stop"});

  // [parallelism]
  add(TENAX_KEY(parallelism.data_parallel_replicate,
                "data-parallel replicas (DDP; HSDP with "
                "sharding)"))
      .Above(0);
  add(TENAX_KEY(parallelism.data_parallel_shard,
                "FSDP shards; -1 = whatever the other degrees leave of the world"))
      .Above(0, "-1 (the rest of the world) or > 0")
      .Or(-1);
  add(TENAX_KEY(parallelism.tensor_parallel, "tensor-parallel degree (with sequence parallelism)"))
      .Above(0);
  add(TENAX_KEY(parallelism.pipeline_parallel, "pipeline stages")).Above(0);
  add(TENAX_KEY(parallelism.context_parallel,
                "context-parallel degree: every sequence split over this many ranks (ring "
                "attention; docs/parallelism.md)"))
      .Above(0);
  add(TENAX_KEY(parallelism.pipeline_schedule,
                "the pipeline schedule (zbv, dualpipev: zero-bubble, split backward, V-shaped "
                "placement; docs/parallelism.md)"))
      .OneOf({"gpipe", "1f1b", "interleaved_1f1b", "zbv", "dualpipev"});
  add(TENAX_KEY(parallelism.virtual_stages,
                "model stages per pipeline rank: any with interleaved_1f1b, 2 with zbv and "
                "dualpipev"))
      .Above(0);
  add(TENAX_KEY(parallelism.microbatches, "pipeline micro-batches per local batch")).Above(0);
  add(TENAX_KEY(parallelism.expert_parallel,
                "expert-parallel degree: ranks borrowed from data_parallel_shard that split the "
                "experts (docs/moe.md)"))
      .Above(0);
  add(TENAX_KEY(parallelism.activation_checkpoint,
                "recompute activations in backward: none | selective (every second block) | "
                "full"))
      .OneOf({"none", "selective", "full"});
  add(TENAX_KEY(parallelism.backend,
                "collectives: auto (NCCL on GPU ranks, Gloo on CPU ranks) | nccl | gloo"))
      .OneOf({"auto", "nccl", "gloo"});
  add(TENAX_KEY(parallelism.fsdp_param_dtype,
                "FSDP gathers parameters in: auto (bf16 when training in bf16 on GPUs, else "
                "fp32) | fp32 | bf16; gradients are reduced in fp32 either way"))
      .OneOf({"auto", "fp32", "bf16"});
  add(TENAX_KEY(parallelism.collective_timeout_s,
                "a collective pending this long dumps the flight record and ends the rank (exit "
                "code 9); 0 = never"))
      .AtLeast(0, ">= 0 seconds (0 disables the watchdog)");

  // [checkpoint]
  add(TENAX_KEY(checkpoint.enable, "write checkpoints"));
  add(TENAX_KEY(checkpoint.folder,
                "checkpoint folder, relative to the run folder unless "
                "absolute"));
  add(TENAX_KEY(checkpoint.interval,
                "steps between checkpoints (the final step is always saved), or \"auto\": "
                "Young/Daly's optimum from the measured cost and the failure rate"))
      .Above(0)
      .Auto([](Config& c) -> bool& { return c.checkpoint.interval_auto; });
  add(TENAX_KEY(checkpoint.failure_rate_per_hour,
                "interval = \"auto\": prior failure rate of the whole job, per hour"))
      .Above(0);
  add(TENAX_KEY(checkpoint.async,
                "write in the background; training blocks only while state is copied to host "
                "memory"));
  add(TENAX_KEY(checkpoint.memory_replicas,
                "distributed: keep the newest checkpoint of each rank and its peer in /dev/shm"));
  add(TENAX_KEY(checkpoint.keep_latest, "checkpoints kept; 0 keeps all")).AtLeast(0);
  add(TENAX_KEY(checkpoint.resume, "latest | none | PATH to a step folder"))
      .Check([](const Config& c) { return !c.checkpoint.resume.empty(); },
             "latest, none, or a checkpoint path");

  // [metrics]
  add(TENAX_KEY(metrics.log_interval, "steps between logged metrics")).Above(0);
  add(TENAX_KEY(metrics.eval_interval, "steps between validation runs; 0 = only at the end"))
      .AtLeast(0);
  add(TENAX_KEY(metrics.eval_tokens, "validation tokens per evaluation")).Above(0);
  add(TENAX_KEY(metrics.tensorboard, "also write TensorBoard event files (run folder/tb)"));
  add(TENAX_KEY(metrics.progress, "auto (a live line on a terminal) | always | never"))
      .OneOf({"auto", "always", "never"});
  add(TENAX_KEY(metrics.profile_step,
                "profile from this step on (libtorch's profiler: a Chrome trace and a table of "
                "each GPU kernel's time per step in the run folder's profile/); 0 = never"))
      .AtLeast(0);
  add(TENAX_KEY(metrics.profile_steps, "steps profiled from metrics.profile_step")).Above(0);
  // [resilience]
  add(TENAX_KEY(resilience.mode,
                "restart (every rank restarts from the newest checkpoint) | live (a failed "
                "data-parallel replica leaves, the others keep training its samples, a "
                "replacement heals from them; docs/resilience.md)"))
      .OneOf({"restart", "live"});
  add(TENAX_KEY(resilience.sdc_check_interval,
                "every N steps each data-parallel rank replays another's step and the results "
                "are compared bit for bit, to find silent data corruption; also at the second "
                "step of each launch generation and at every checkpoint step; 0 = never "
                "(docs/resilience.md)"))
      .AtLeast(0);
  add(TENAX_KEY(resilience.sdc_tolerance,
                "0: the checks compare bit for bit; above 0: the loss, the gradients' norm and a "
                "random projection of them must agree within this fraction (for GPU kernels "
                "that are not deterministic; a smaller corruption goes unseen)"))
      .Range(KeyBound{0, true}, KeyBound{0.1, true});
  return k;
}

// Optimal string alignment distance: insertions, deletions, substitutions, and a swap of two
// neighbours ("setps") as one edit.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

const char* KeyTypeName(KeyType t) {
  switch (t) {
    case KeyType::kString:
      return "string";
    case KeyType::kInt:
      return "integer";
    case KeyType::kUInt:
      return "integer >= 0";
    case KeyType::kFloat:
      return "number";
    case KeyType::kBool:
      return "bool";
  }
  return "?";
}

KeySpec& KeySpec::OneOf(std::vector<std::string> values) {
  allowed = std::move(values);
  return *this;
}

KeySpec& KeySpec::Range(std::optional<KeyBound> low, std::optional<KeyBound> high,
                        std::string text) {
  lo = low;
  hi = high;
  range_text = text.empty() ? BoundsText(lo, hi) : std::move(text);
  return *this;
}

KeySpec& KeySpec::Check(std::function<bool(const Config&)> ok, std::string text) {
  checks.push_back({std::move(ok), std::move(text)});
  return *this;
}

KeySpec& KeySpec::Auto(std::function<bool&(Config&)> is_auto) {
  allows_auto = true;
  auto get_int = get;
  auto set_int = set;
  get = [get_int, is_auto](const Config& c) -> std::optional<KeyValue> {
    if (is_auto(const_cast<Config&>(c))) return KeyValue(std::string("auto"));
    return get_int(c);
  };
  set = [set_int, is_auto](Config& c, const std::optional<KeyValue>& v) {
    if (v && std::holds_alternative<std::string>(*v)) {
      is_auto(c) = true;
      return;
    }
    is_auto(c) = false;
    set_int(c, v);
  };
  return *this;
}

std::string KeySpec::RangeProblem(double v) const {
  if (!lo && !hi) return "";
  if (std::find(special.begin(), special.end(), v) != special.end()) return "";
  const bool low_ok = !lo || (lo->inclusive ? v >= lo->value : v > lo->value);
  const bool high_ok = !hi || (hi->inclusive ? v <= hi->value : v < hi->value);
  return low_ok && high_ok ? "" : range_text;
}

std::string KeySpec::Expected() const {
  std::string range = range_text;
  if (!special.empty() && range.find(" or ") == std::string::npos) {
    std::string s;
    for (double v : special) s += Num(v) + " or ";
    range = s + range;
  }
  switch (type) {
    case KeyType::kString: {
      if (allowed.empty()) return "a string";
      std::string out = "one of: ";
      for (size_t i = 0; i < allowed.size(); ++i) out += (i ? ", " : "") + allowed[i];
      return out;
    }
    case KeyType::kInt:
      if (allows_auto) return "an integer" + (range.empty() ? "" : " " + range) + " or \"auto\"";
      return "an integer" + (range.empty() ? "" : " " + range);
    case KeyType::kUInt:
      return "a non-negative integer";
    case KeyType::kFloat:
      return "a finite number" + (range.empty() ? "" : " " + range);
    case KeyType::kBool:
      return "true or false";
  }
  return "";
}

const std::vector<KeySpec>& ConfigKeys() {
  static const std::vector<KeySpec> keys = BuildKeys();
  return keys;
}

const std::vector<std::string>& ConfigSections() {
  static const std::vector<std::string> sections = [] {
    std::vector<std::string> out;
    for (const KeySpec& k : ConfigKeys()) {
      if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
    }
    return out;
  }();
  return sections;
}

const KeySpec* FindKey(const std::string& path) {
  for (const KeySpec& k : ConfigKeys()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

std::string KeyValueToml(const KeyValue& v) {
  std::ostringstream os;
  std::visit(
      [&os](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) {
          // Shortest text that reads back to the same double; always with a '.' or exponent,
          // so that TOML reads a float.
          std::string s = fmt::format("{}", x);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          os << s;
        } else if constexpr (std::is_same_v<T, std::string>) {
          // A basic string (double quotes), escaped as TOML requires.
          os << '"';
          for (char c : x) {
            if (c == '"' || c == '\\') {
              os << '\\' << c;
            } else if (c == '\n') {
              os << "\\n";
            } else if (c == '\t') {
              os << "\\t";
            } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
              os << fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
            } else {
              os << c;
            }
          }
          os << '"';
        } else {
          os << toml::value<T>(x);
        }
      },
      v);
  return os.str();
}

std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A typo changes a few characters; a different word changes most of them.
  const size_t limit = std::max<size_t>(2, std::min(word.size(), best.size()) / 3);
  return best_d <= limit ? best : "";
}

}  // namespace tenax
