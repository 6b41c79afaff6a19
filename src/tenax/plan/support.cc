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

}  // namespace tenax::plan
