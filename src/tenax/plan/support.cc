#include "tenax/plan/support.h"

#include <fmt/format.h>

namespace tenax::plan {

const char* TenaxActivationCheckpoint(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kAlternate:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
    case Recompute::kOp:
      return "";
  }
  return "";
}

TrainSupport TenaxTrainSupport(const Workload& w, const Layout& l) {
  TrainSupport s;
  auto lacks = [&](std::string what) { s.missing.push_back(std::move(what)); };
  if (l.cp > 1) lacks("context parallelism");
  if (l.fp8) lacks("fp8 matmuls");
  if (l.shard() > 1 && !l.reshard) lacks("the distributed optimizer (ZeRO-1/2) apart from FSDP");
  if (*TenaxActivationCheckpoint(l.recompute) == '\0') {
    lacks(fmt::format("recompute = {} (tenax: none, alternate as \"selective\", full)",
                      RecomputeName(l.recompute)));
  }
  if (l.pp > 1 &&
      (l.first_layers > 0 || l.last_layers > 0 || w.model.n_layers % (l.pp * l.vpp) != 0)) {
    lacks(fmt::format("an uneven pipeline split ({} layers over pp {} x v {})", w.model.n_layers,
                      l.pp, l.vpp));
  }
  if (l.tp > 1 && w.seq_len % l.tp != 0) lacks("seq_len not divisible by tp");
  if (l.vpp > 1 && l.micro_batches % l.pp != 0) {
    lacks(fmt::format("interleaved 1F1B with micro-batches ({}) not a multiple of pp ({})",
                      l.micro_batches, l.pp));
  }
  const Software& sw = w.sw;
  if (sw.attention != AttentionKind::kFlash2) {
    lacks(fmt::format("attention = {}", AttentionName(sw.attention)));
  }
  if (sw.kernels != Kernels::kEager) lacks("fused kernels");
  if (sw.dropout > 0) lacks("dropout");
  if (sw.tp_overlap != TpOverlap::kNone) lacks("tensor-parallel communication overlap");
  if (!sw.sequence_parallel && l.tp > 1) lacks("tensor parallelism without sequence parallelism");
  const Architecture& a = w.arch;
  if (!a.gated_mlp || a.layer_norm || a.biases || a.learned_positions) lacks("GPT-style layers");
  s.runnable = s.missing.empty();
  return s;
}

TrainSettings TenaxTrainSettings(const Workload& w, const Layout& l) {
  std::vector<std::pair<std::string, std::string>> kv;  // section.key, TOML value
  auto set = [&kv](const char* key, const std::string& value) { kv.emplace_back(key, value); };
  auto num = [](int64_t v) { return std::to_string(v); };
  set("parallelism.data_parallel_replicate", num(l.dp_replicate));
  set("parallelism.data_parallel_shard", num(l.dp_shard));
  set("parallelism.tensor_parallel", num(l.tp));
  set("parallelism.pipeline_parallel", num(l.pp));
  if (l.pp > 1) {
    // 1F1B keeps one micro-batch per stage in flight, so it needs m >= pp; GPipe does not.
    const char* schedule = l.vpp > 1                 ? "interleaved_1f1b"
                           : l.micro_batches >= l.pp ? "1f1b"
                                                     : "gpipe";
    set("parallelism.pipeline_schedule", fmt::format("\"{}\"", schedule));
    set("parallelism.virtual_stages", num(l.vpp));
    set("parallelism.microbatches", num(l.micro_batches));
  }
  set("parallelism.activation_checkpoint",
      fmt::format("\"{}\"", TenaxActivationCheckpoint(l.recompute)));
  set("training.seq_len", num(w.seq_len));
  set("training.local_batch_size", num(l.pp > 1 ? l.micro_batch * l.micro_batches : l.micro_batch));
  set("training.grad_accum_steps", num(l.pp > 1 ? 1 : l.micro_batches));
  set("training.mixed_precision", "\"bf16\"");
  TrainSettings out;
  std::string section;
  for (const auto& [key, value] : kv) {
    // A --set value is read as TOML when it parses, so strings need no quotes on the command
    // line (and none there keeps shells out of it).
    std::string bare = value;
    if (bare.size() >= 2 && bare.front() == '"') bare = bare.substr(1, bare.size() - 2);
    out.sets.push_back(key + "=" + bare);
    const std::string sec = key.substr(0, key.find('.'));
    if (sec != section) {
      out.toml += (section.empty() ? "[" : "\n[") + sec + "]\n";
      section = sec;
    }
    out.toml += key.substr(key.find('.') + 1) + " = " + value + "\n";
  }
  return out;
}

}  // namespace tenax::plan
