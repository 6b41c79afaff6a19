#include "tenax/plan/support.h"

#include <fmt/format.h>

#include <cstdint>

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

namespace {

// What tenax train lacks for a layout, one bit each, so that the search's runnable test needs no
// strings; TenaxTrainSupport names the set bits.
enum Missing : uint32_t {
  kContextParallel = 1u << 0,
  kFp8 = 1u << 1,
  kDistributedOptimizer = 1u << 2,
  kRecompute = 1u << 3,
  kUnevenSplit = 1u << 4,
  kSeqNotDivisibleByTp = 1u << 5,
  kInterleavedMicroBatches = 1u << 6,
  kAttention = 1u << 7,
  kFusedKernels = 1u << 8,
  kDropout = 1u << 9,
  kTpOverlap = 1u << 10,
  kNoSequenceParallel = 1u << 11,
  kGptLayers = 1u << 12,
};

uint32_t MissingFeatures(const Workload& w, const Layout& l) {
  uint32_t m = 0;
  // tenax's context parallelism is ring attention (parallel/context_parallel.h) on dense
  // models, each rank holding 2 chunks of seq_len / (2 cp), each split again over tp.
  if (l.cp > 1 && (w.sw.cp_attention != CpAttention::kRing || w.model.moe.enabled() ||
                   w.seq_len % (2 * l.cp * l.tp) != 0)) {
    m |= kContextParallel;
  }
  if (l.fp8) m |= kFp8;
  if (l.shard() > 1 && !l.reshard) m |= kDistributedOptimizer;
  if (*TenaxActivationCheckpoint(l.recompute) == '\0') m |= kRecompute;
  if (l.pp > 1 &&
      (l.first_layers > 0 || l.last_layers > 0 || w.model.n_layers % (l.pp * l.vpp) != 0)) {
    m |= kUnevenSplit;
  }
  if (l.tp > 1 && w.seq_len % l.tp != 0) m |= kSeqNotDivisibleByTp;
  if (l.vpp > 1 && l.schedule == PipeSchedule::k1F1B && l.micro_batches % l.pp != 0) {
    m |= kInterleavedMicroBatches;
  }
  const Software& sw = w.sw;
  if (sw.attention != AttentionKind::kFlash2) m |= kAttention;
  if (sw.kernels != Kernels::kEager) m |= kFusedKernels;
  if (sw.dropout > 0) m |= kDropout;
  if (sw.tp_overlap != TpOverlap::kNone) m |= kTpOverlap;
  if (!sw.sequence_parallel && l.tp > 1) m |= kNoSequenceParallel;
  const Architecture& a = w.arch;
  if (!a.gated_mlp || a.layer_norm || a.biases || a.learned_positions) m |= kGptLayers;
  return m;
}

}  // namespace

bool TenaxTrainRuns(const Workload& w, const Layout& l) { return MissingFeatures(w, l) == 0; }

TrainSupport TenaxTrainSupport(const Workload& w, const Layout& l) {
  const uint32_t m = MissingFeatures(w, l);
  TrainSupport s;
  auto lacks = [&](Missing bit, std::string what) {
    if (m & bit) s.missing.push_back(std::move(what));
  };
  if (m & kContextParallel) {
    s.missing.push_back(
        w.sw.cp_attention != CpAttention::kRing
            ? std::string("context parallelism as all-gather attention (tenax's is ring "
                          "attention: --cp-attention ring)")
        : w.model.moe.enabled()
            ? std::string("context parallelism with a mixture-of-experts model")
            : fmt::format("context parallelism with seq_len ({}) not divisible by 2 x cp x tp "
                          "({})",
                          w.seq_len, 2 * l.cp * l.tp));
  }
  lacks(kFp8, "fp8 matmuls");
  lacks(kDistributedOptimizer, "the distributed optimizer (ZeRO-1/2) apart from FSDP");
  // Items with numbers in them are formatted only when their bit is set.
  if (m & kRecompute) {
    s.missing.push_back(
        fmt::format("recompute = {} (tenax: none, alternate as \"selective\", full)",
                    RecomputeName(l.recompute)));
  }
  if (m & kUnevenSplit) {
    s.missing.push_back(fmt::format("an uneven pipeline split ({} layers over pp {} x v {})",
                                    w.model.n_layers, l.pp, l.vpp));
  }
  lacks(kSeqNotDivisibleByTp, "seq_len not divisible by tp");
  if (m & kInterleavedMicroBatches) {
    s.missing.push_back(
        fmt::format("interleaved 1F1B with micro-batches ({}) not a multiple of pp ({})",
                    l.micro_batches, l.pp));
  }
  if (m & kAttention) {
    s.missing.push_back(fmt::format("attention = {}", AttentionName(w.sw.attention)));
  }
  lacks(kFusedKernels, "fused kernels");
  lacks(kDropout, "dropout");
  lacks(kTpOverlap, "tensor-parallel communication overlap");
  lacks(kNoSequenceParallel, "tensor parallelism without sequence parallelism");
  lacks(kGptLayers, "GPT-style layers");
  s.runnable = m == 0;
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
  if (l.cp > 1) set("parallelism.context_parallel", num(l.cp));
  if (l.pp > 1) {
    // 1F1B keeps one micro-batch per stage in flight, so it needs m >= pp; GPipe does not.
    const char* schedule = l.schedule != PipeSchedule::k1F1B ? PipeScheduleName(l.schedule)
                           : l.vpp > 1                       ? "interleaved_1f1b"
                           : l.micro_batches >= l.pp         ? "1f1b"
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
