#include "tenax/model/llama.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <map>

#include "tenax/core/check.h"
#include "tenax/model/fused_cross_entropy.h"

namespace tenax::model {

std::vector<std::pair<std::string, std::vector<int64_t>>> Llama::ParamShapes(const ModelSpec& s) {
  const int64_t c = s.dim, hd = s.head_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"tok_embeddings.weight", {s.vocab_size, c}});
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string p = fmt::format("layers.{}.", i);
    out.push_back({p + "attention_norm.weight", {c}});
    out.push_back({p + "attention.wq.weight", {s.n_heads * hd, c}});
    out.push_back({p + "attention.wk.weight", {s.n_kv_heads * hd, c}});
    out.push_back({p + "attention.wv.weight", {s.n_kv_heads * hd, c}});
    out.push_back({p + "attention.wo.weight", {c, s.n_heads * hd}});
    out.push_back({p + "ffn_norm.weight", {c}});
    if (s.moe.IsMoeLayer(i)) {  // model/moe.h
      const int64_t f = s.moe.ffn_hidden_dim, sf = s.moe.n_shared * f;
      out.push_back({p + "moe.router.weight", {s.moe.n_experts, c}});
      for (int64_t e = 0; e < s.moe.n_experts; ++e) {
        const std::string x = ExpertParamPrefix(i, e);
        out.push_back({x + "w1.weight", {f, c}});
        out.push_back({x + "w2.weight", {c, f}});
        out.push_back({x + "w3.weight", {f, c}});
      }
      if (sf > 0) {
        out.push_back({p + "moe.shared.w1.weight", {sf, c}});
        out.push_back({p + "moe.shared.w2.weight", {c, sf}});
        out.push_back({p + "moe.shared.w3.weight", {sf, c}});
      }
      continue;
    }
    out.push_back({p + "feed_forward.w1.weight", {s.ffn_hidden_dim, c}});
    out.push_back({p + "feed_forward.w2.weight", {c, s.ffn_hidden_dim}});
    out.push_back({p + "feed_forward.w3.weight", {s.ffn_hidden_dim, c}});
  }
  out.push_back({"norm.weight", {c}});
  if (!s.tie_embeddings) out.push_back({"output.weight", {s.vocab_size, c}});
  return out;
}

Llama::Llama(ModelSpec spec, uint64_t seed, const at::Device& device, Init init)
    : spec_(std::move(spec)), device_(device) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double resid_std = spec_.init_std / std::sqrt(2.0 * static_cast<double>(spec_.n_layers));
  for (auto& [name, shape] : ParamShapes(spec_)) {
    at::Tensor t;
    auto ends_with = [&name = name](const char* suffix) {
      const std::string s(suffix);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (shape.size() == 1) {
      t = at::ones(shape, at::kFloat);
    } else if (init == Init::kOverwritten) {
      t = at::zeros(shape, at::TensorOptions().dtype(at::kFloat).device(device_));
    } else {
      const double std =
          (ends_with("wo.weight") || ends_with("w2.weight")) ? resid_std : spec_.init_std;
      t = at::normal(0.0, std, shape, gen, at::TensorOptions().dtype(at::kFloat));
    }
    t = t.to(device_);
    t.set_requires_grad(true);
    params_.push_back({name, t});
  }
  if (spec_.moe.enabled()) moe_ = std::make_unique<MoeState>(spec_);
  BindAliases();
}

LayerWeights BindLayer(const ModelSpec& spec, int64_t i,
                       const std::map<std::string, at::Tensor>& by_name) {
  const std::string p = fmt::format("layers.{}.", i);
  LayerWeights l;
  l.attention_norm = by_name.at(p + "attention_norm.weight");
  l.wq = by_name.at(p + "attention.wq.weight");
  l.wk = by_name.at(p + "attention.wk.weight");
  l.wv = by_name.at(p + "attention.wv.weight");
  l.wo = by_name.at(p + "attention.wo.weight");
  l.ffn_norm = by_name.at(p + "ffn_norm.weight");
  if (spec.moe.IsMoeLayer(i)) {
    l.is_moe = true;
    l.moe.router = by_name.at(p + "moe.router.weight");
    for (int64_t e = 0; e < spec.moe.n_experts; ++e) {
      const std::string x = ExpertParamPrefix(i, e);
      l.moe.w1.push_back(by_name.at(x + "w1.weight"));
      l.moe.w2.push_back(by_name.at(x + "w2.weight"));
      l.moe.w3.push_back(by_name.at(x + "w3.weight"));
    }
    if (spec.moe.n_shared > 0) {
      l.moe.shared_w1 = by_name.at(p + "moe.shared.w1.weight");
      l.moe.shared_w2 = by_name.at(p + "moe.shared.w2.weight");
      l.moe.shared_w3 = by_name.at(p + "moe.shared.w3.weight");
    }
  } else {
    l.w1 = by_name.at(p + "feed_forward.w1.weight");
    l.w2 = by_name.at(p + "feed_forward.w2.weight");
    l.w3 = by_name.at(p + "feed_forward.w3.weight");
  }
  return l;
}

void Llama::BindAliases() {
  std::map<std::string, at::Tensor> by_name;
  for (auto& p : params_) by_name[p.name] = p.tensor;
  tok_embeddings_ = by_name.at("tok_embeddings.weight");
  norm_ = by_name.at("norm.weight");
  output_ = spec_.tie_embeddings ? tok_embeddings_ : by_name.at("output.weight");
  layers_.clear();
  // Per-layer closures for recomputation in backward, built once so their addresses (held by
  // pending autograd nodes) never change. They read layers_ and rope_ when called: a longer rope
  // table rebuilt meanwhile still starts with the same positions.
  for (int64_t i = static_cast<int64_t>(block_fns_.size()); i < spec_.n_layers; ++i) {
    block_fns_.emplace_back([this, i](const at::Tensor& x) {
      return Block(layers_[static_cast<size_t>(i)], x, rope_);
    });
  }
  for (int64_t i = 0; i < spec_.n_layers; ++i) layers_.push_back(BindLayer(spec_, i, by_name));
}

const RopeTable& Llama::Rope(int64_t seq_len) {
  if (seq_len > rope_len_) {
    rope_ = MakeRopeTable(spec_, seq_len, device_);
    rope_len_ = seq_len;
  }
  return rope_;
}

namespace {

// Reentrant recomputation (like torch.utils.checkpoint with use_reentrant=True): forward runs
// the block without recording a graph and keeps only its input; backward re-runs it with
// gradients on and back-propagates through the fresh graph, which accumulates the block's
// parameter gradients into their .grad directly and returns the input's gradient.
struct Recompute : public torch::autograd::Function<Recompute> {
  using BlockFn = std::function<at::Tensor(const at::Tensor&)>;
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t fn_address) {
    ctx->save_for_backward({x});
    ctx->saved_data["fn"] = fn_address;
    const auto* fn = reinterpret_cast<const BlockFn*>(fn_address);
    return (*fn)(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* fn = reinterpret_cast<const BlockFn*>(ctx->saved_data["fn"].toInt());
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::AutoGradMode enable(true);
    at::Tensor y = (*fn)(x);
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RecomputeInBackward(const std::function<at::Tensor(const at::Tensor&)>* fn,
                               const at::Tensor& x) {
  return Recompute::apply(x, reinterpret_cast<int64_t>(fn));
}

void Llama::SetActivationCheckpoint(const std::string& mode) {
  TENAX_CHECK(mode == "none" || mode == "selective" || mode == "full");
  checkpoint_every_ = mode == "full" ? 1 : mode == "selective" ? 2 : 0;
}

at::Tensor Llama::Block(const Layer& l, const at::Tensor& x, const RopeTable& rope) const {
  at::Tensor h = x + Attention(RmsNorm(x, l.attention_norm, spec_.norm_eps), l.wq, l.wk, l.wv, l.wo,
                               spec_.n_heads, spec_.n_kv_heads, rope, {}, block_matmul_);
  if (l.is_moe) {  // tokens are routed independently: (B, T, C) -> (B T, C) and back
    const at::Tensor y = RmsNorm(h, l.ffn_norm, spec_.norm_eps);
    const int64_t layer = &l - layers_.data();
    return h + MoeFeedForward(y.reshape({-1, y.size(-1)}), l.moe, spec_.moe, *moe_, layer)
                   .view(y.sizes());
  }
  return h + FeedForward(RmsNorm(h, l.ffn_norm, spec_.norm_eps), l.w1, l.w2, l.w3, block_matmul_);
}

at::Tensor Llama::Embed(const at::Tensor& tokens, at::ScalarType compute_dtype) {
  TENAX_CHECK(tokens.dim() == 2);
  Rope(tokens.size(1));
  return at::embedding(tok_embeddings_, tokens).to(compute_dtype);  // (B, T, C)
}

at::Tensor Llama::Blocks(const at::Tensor& input, int64_t begin, int64_t end) {
  TENAX_CHECK(0 <= begin && begin <= end && end <= spec_.n_layers);
  const RopeTable& rope = Rope(input.size(1));
  at::Tensor h = input;
  for (int64_t i = begin; i < end; ++i) {
    const Layer& l = layers_[static_cast<size_t>(i)];
    const bool recompute =
        checkpoint_every_ > 0 && at::GradMode::is_enabled() && (i + 1) % checkpoint_every_ == 0;
    if (recompute) {
      h = Recompute::apply(h, reinterpret_cast<int64_t>(&block_fns_[static_cast<size_t>(i)]));
    } else {
      h = Block(l, h, rope);
    }
  }
  return h;
}

at::Tensor Llama::Head(const at::Tensor& h) {
  at::Tensor logits = Linear(RmsNorm(h, norm_, spec_.norm_eps), output_);  // (B, T, V)
  return logits.scalar_type() == at::kDouble ? logits : logits.to(at::kFloat);
}

at::Tensor Llama::Logits(const at::Tensor& tokens, at::ScalarType compute_dtype) {
  return Head(Blocks(Embed(tokens, compute_dtype), 0, spec_.n_layers));
}

at::Tensor Llama::Loss(const at::Tensor& tokens, const at::Tensor& targets,
                       at::ScalarType compute_dtype) {
  return HeadLoss(Blocks(Embed(tokens, compute_dtype), 0, spec_.n_layers), targets);
}

at::Tensor Llama::HeadLoss(const at::Tensor& h, const at::Tensor& targets) {
  at::Tensor x = RmsNorm(h, norm_, spec_.norm_eps);  // (B, T, C)
  return LinearCrossEntropy(x.reshape({-1, x.size(-1)}), output_, targets.reshape({-1}));
}

Status Llama::LoadParams(const std::vector<NamedTensor>& values) {
  TENAX_RETURN_IF_ERROR(CheckParams(values));
  std::map<std::string, const at::Tensor*> given;
  for (const auto& v : values) given.emplace(v.name, &v.tensor);
  at::NoGradGuard no_grad;
  for (auto& p : params_) p.tensor.copy_(*given.at(p.name));
  return Status::Ok();
}

void Llama::ReleaseParams() {
  std::vector<at::Tensor> empty;
  for (const auto& p : params_) {
    empty.push_back(
        at::zeros({}, p.tensor.options().requires_grad(false)).expand(p.tensor.sizes()));
  }
  ReplaceParams(empty);
}

Status Llama::CheckParams(const std::vector<NamedTensor>& values) const {
  std::map<std::string, const at::Tensor*> given;
  for (const auto& v : values) {
    if (!given.emplace(v.name, &v.tensor).second) {
      return DataError("tensor '" + v.name + "' appears twice");
    }
  }
  for (const auto& p : params_) {
    auto it = given.find(p.name);
    if (it == given.end()) {
      return DataError(
          fmt::format("missing tensor '{}' (shape {}); the weights do not belong to "
                      "a model of this shape",
                      p.name, fmt::join(p.tensor.sizes(), "x")));
    }
    if (it->second->sizes() != p.tensor.sizes()) {
      return DataError(fmt::format("tensor '{}' has shape {} but the model expects {}", p.name,
                                   fmt::join(it->second->sizes(), "x"),
                                   fmt::join(p.tensor.sizes(), "x")));
    }
  }
  if (given.size() != params_.size()) {
    for (const auto& [name, t] : given) {
      bool known = false;
      for (const auto& p : params_) known = known || p.name == name;
      if (!known) return DataError("unexpected tensor '" + name + "' for this model shape");
    }
  }
  return Status::Ok();
}

void Llama::ReplaceParams(const std::vector<at::Tensor>& tensors) {
  TENAX_CHECK(tensors.size() == params_.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TENAX_CHECK(tensors[i].sizes() == params_[i].tensor.sizes());
    params_[i].tensor = tensors[i];
  }
  BindAliases();
}

void Llama::CastParams(at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  for (auto& p : params_) {
    p.tensor = p.tensor.detach().to(dtype);
    p.tensor.set_requires_grad(true);
  }
  BindAliases();
  rope_len_ = 0;
}

}  // namespace tenax::model
