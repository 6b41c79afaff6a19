#include "tenax/parallel/sharded_llama.h"

#include <fmt/format.h>

#include <map>

#include "tenax/core/check.h"
#include "tenax/parallel/context_parallel.h"

namespace tenax::parallel {
namespace {

// Block parameter suffixes in the order TensorParallelLayer lists them.
constexpr const char* kLayerParams[] = {
    "attention_norm.weight",  "attention.wq.weight",    "attention.wk.weight",
    "attention.wv.weight",    "attention.wo.weight",    "ffn_norm.weight",
    "feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"};

bool Owned(const Ownership& own, const ModelSpec& spec, const std::string& name) {
  if (name == "tok_embeddings.weight") return own.embed || (own.head && spec.tie_embeddings);
  if (name == "norm.weight" || name == "output.weight") return own.head;
  TENAX_CHECK(name.rfind("layers.", 0) == 0);
  if (!own.layers.at(static_cast<size_t>(std::stoll(name.substr(7))))) return false;
  const int64_t expert = model::ExpertOfParam(name);
  return expert < 0 || (own.expert_begin <= expert && expert < own.expert_end);
}

}  // namespace

Ownership Ownership::All(const ModelSpec& spec) {
  Ownership o;
  o.layers.assign(static_cast<size_t>(spec.n_layers), true);
  o.expert_end = spec.moe.n_experts;
  return o;
}

ShardedLlama::ShardedLlama(const ModelSpec& spec, const std::vector<model::NamedTensor>& full,
                           Communicator& tp, Ownership ownership, const at::Device& device)
    : spec_(spec), tp_(tp), own_(std::move(ownership)), device_(device) {
  TENAX_CHECK(static_cast<int64_t>(own_.layers.size()) == spec_.n_layers);
  std::map<std::string, at::Tensor> by_name;
  for (const auto& p : full) by_name[p.name] = p.tensor;
  at::NoGradGuard no_grad;
  for (const ShardSpec& s : TensorParallelShardSpecs(spec_, tp.rank(), tp.size())) {
    if (!Owned(own_, spec_, s.name)) continue;
    auto it = by_name.find(s.name);
    TENAX_CHECK_MSG(it != by_name.end(), s.name.c_str());
    at::Tensor t = it->second.detach();
    if (s.dim >= 0) t = t.narrow(s.dim, s.begin, s.end - s.begin);
    // A fresh contiguous fp32 leaf on the device: never a view of the full tensor.
    t = t.to(device_, at::kFloat).contiguous().clone();
    t.set_requires_grad(true);
    params_.push_back({s.name, t});
    specs_.push_back(s);
  }
  layer_index_.resize(static_cast<size_t>(spec_.n_layers));
  for (int64_t i = 0; i < spec_.n_layers; ++i) {
    if (!own_.layers[static_cast<size_t>(i)]) continue;
    std::vector<std::string> names;
    for (int k = 0; k < 6; ++k) names.push_back(fmt::format("layers.{}.{}", i, kLayerParams[k]));
    if (spec_.moe.IsMoeLayer(i)) {
      names.push_back(fmt::format("layers.{}.moe.router.weight", i));
      for (int64_t e = own_.expert_begin; e < own_.expert_end; ++e) {
        for (const char* w : {"w1", "w2", "w3"}) {
          names.push_back(model::ExpertParamPrefix(i, e) + w + ".weight");
        }
      }
      if (spec_.moe.n_shared > 0) {
        for (const char* w : {"w1", "w2", "w3"}) {
          names.push_back(fmt::format("layers.{}.moe.shared.{}.weight", i, w));
        }
      }
    } else {
      for (int k = 6; k < 9; ++k) names.push_back(fmt::format("layers.{}.{}", i, kLayerParams[k]));
    }
    for (const auto& name : names) {
      const int idx = IndexOf(name);
      TENAX_CHECK_MSG(idx >= 0, name.c_str());
      layer_index_[static_cast<size_t>(i)].push_back(idx);
    }
  }
  if (spec_.moe.enabled()) {
    moe_ = std::make_unique<model::MoeState>(spec_);
    moe_->SetHeldLayers(own_.layers);
  }
  embed_index_ = IndexOf("tok_embeddings.weight");
  norm_index_ = IndexOf("norm.weight");
  output_index_ = spec_.tie_embeddings ? embed_index_ : IndexOf("output.weight");
  // Built once so their addresses (held by pending recompute nodes) never change.
  for (int64_t i = 0; i < spec_.n_layers; ++i) {
    block_fns_.emplace_back([this, i](const at::Tensor& x) { return Block(i, x); });
  }
}

int ShardedLlama::IndexOf(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

void ShardedLlama::SetActivationCheckpoint(const std::string& mode) {
  TENAX_CHECK(mode == "none" || mode == "selective" || mode == "full");
  checkpoint_every_ = mode == "full" ? 1 : mode == "selective" ? 2 : 0;
}

void ShardedLlama::SetContextParallel(Communicator* cp) {
  if (cp == nullptr || cp->size() == 1) return;
  cp_ = cp;
  attend_ = [cp](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return RingAttention(q, k, v, *cp);
  };
}

const model::RopeTable& ShardedLlama::Rope(int64_t seq_len) {
  if (cp_ != nullptr) {
    // The local tokens stand for positions scattered over the full sequence: a row per local
    // position, at its global position's angles. Rebuilt when the local length changes.
    if (seq_len != rope_len_) {
      const int n = cp_->size();
      const model::RopeTable full = model::MakeRopeTable(spec_, seq_len * n, device_);
      const at::Tensor pos = ContextPositions(seq_len * n, cp_->rank(), n, device_);
      rope_ = {full.cos.index_select(0, pos), full.sin.index_select(0, pos)};
      rope_len_ = seq_len;
    }
    return rope_;
  }
  if (seq_len > rope_len_) {
    rope_ = model::MakeRopeTable(spec_, seq_len, device_);
    rope_len_ = seq_len;
  }
  return rope_;
}

at::Tensor ShardedLlama::Embed(const at::Tensor& tokens, at::ScalarType compute_dtype) {
  TENAX_CHECK_MSG(own_.embed && embed_index_ >= 0, "this rank does not hold the embedding");
  Rope(tokens.size(1));
  return TensorParallelEmbed(params_[static_cast<size_t>(embed_index_)].tensor, tokens, tp_,
                             compute_dtype);
}

at::Tensor ShardedLlama::Block(int64_t layer, const at::Tensor& h) {
  const auto& idx = layer_index_[static_cast<size_t>(layer)];
  TENAX_CHECK_MSG(!idx.empty(), fmt::format("this rank does not hold layer {}", layer).c_str());
  auto p = [&](size_t k) { return params_[static_cast<size_t>(idx[k])].tensor; };
  // The rope table covers the sequence (this rank's part of it under context parallelism): h
  // holds 1 / tp of its positions.
  if (!spec_.moe.IsMoeLayer(layer)) {
    TensorParallelLayer l{p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8)};
    return TensorParallelBlock(spec_, l, tp_, h, rope_, attend_, block_matmul_);
  }
  TensorParallelLayer attention;  // the attention half's fields only
  attention.attention_norm = p(0);
  attention.wq = p(1);
  attention.wk = p(2);
  attention.wv = p(3);
  attention.wo = p(4);
  const at::Tensor r =
      TensorParallelAttentionResidual(spec_, attention, tp_, h, rope_, attend_, block_matmul_);
  model::MoeWeights w;
  w.router = p(6);
  w.first_expert = own_.expert_begin;
  size_t k = 7;
  for (int64_t e = own_.expert_begin; e < own_.expert_end; ++e, k += 3) {
    w.w1.push_back(p(k));
    w.w2.push_back(p(k + 1));
    w.w3.push_back(p(k + 2));
  }
  if (spec_.moe.n_shared > 0) {
    w.shared_w1 = p(k);
    w.shared_w2 = p(k + 1);
    w.shared_w3 = p(k + 2);
  }
  // The experts see this rank's sequence shard: tokens are routed independently.
  const at::Tensor x = model::RmsNorm(r, p(5), spec_.norm_eps);  // (B, T/tp, C)
  return r + model::MoeFeedForward(x.reshape({-1, x.size(-1)}), w, spec_.moe, *moe_, layer)
                 .view(x.sizes());
}

at::Tensor ShardedLlama::Blocks(const at::Tensor& input, int64_t begin, int64_t end) {
  TENAX_CHECK(0 <= begin && begin <= end && end <= spec_.n_layers);
  Rope(input.size(1) * tp_.size());
  at::Tensor h = input;
  for (int64_t i = begin; i < end; ++i) {
    if (hooks_ != nullptr) hooks_->BeforeBlock(i);
    const bool recompute =
        checkpoint_every_ > 0 && at::GradMode::is_enabled() && (i + 1) % checkpoint_every_ == 0;
    h = recompute ? model::RecomputeInBackward(&block_fns_[static_cast<size_t>(i)], h)
                  : Block(i, h);
    if (hooks_ != nullptr) hooks_->AfterBlock(i, h);
  }
  return h;
}

at::Tensor ShardedLlama::HeadLoss(const at::Tensor& h, const at::Tensor& targets) {
  TENAX_CHECK_MSG(own_.head && norm_index_ >= 0 && output_index_ >= 0,
                  "this rank does not hold the output head");
  return TensorParallelHeadLoss(spec_, params_[static_cast<size_t>(norm_index_)].tensor,
                                params_[static_cast<size_t>(output_index_)].tensor, tp_, h,
                                targets);
}

at::Tensor ShardedLlama::Loss(const at::Tensor& tokens, const at::Tensor& targets,
                              at::ScalarType dtype) {
  return HeadLoss(Blocks(Embed(tokens, dtype), 0, spec_.n_layers), targets);
}

}  // namespace tenax::parallel
