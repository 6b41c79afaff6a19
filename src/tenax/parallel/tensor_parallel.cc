#include "tenax/parallel/tensor_parallel.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include <unordered_map>
#include <utility>

#include "tenax/core/check.h"
#include "tenax/model/fused_cross_entropy.h"

namespace tenax::parallel {

Status CheckTensorParallel(const ModelSpec& spec, int tp, int64_t seq_len) {
  if (tp < 1) {
    return InvalidArgument(fmt::format("tensor_parallel ({}) must be at least 1", tp));
  }
  std::vector<std::string> problems;
  if (spec.n_heads % tp != 0) {
    problems.push_back(fmt::format("model.n_heads ({}) is not divisible by tensor_parallel ({})",
                                   spec.n_heads, tp));
  }
  if (spec.n_kv_heads % tp != 0) {
    problems.push_back(fmt::format("model.n_kv_heads ({}) is not divisible by tensor_parallel ({})",
                                   spec.n_kv_heads, tp));
  }
  if (spec.ffn_hidden_dim % tp != 0) {
    problems.push_back(
        fmt::format("model.ffn_hidden_dim ({}) is not divisible by tensor_parallel ({})",
                    spec.ffn_hidden_dim, tp));
  }
  if (seq_len % tp != 0) {
    problems.push_back(fmt::format(
        "training.seq_len ({}) is not divisible by tensor_parallel ({}) (sequence parallelism "
        "splits the sequence across the tensor-parallel ranks)",
        seq_len, tp));
  }
  if (problems.empty()) return Status::Ok();
  std::string msg = fmt::format("the model does not split over tensor_parallel ({}):", tp);
  for (const auto& p : problems) msg += "\n  - " + p;
  return InvalidArgument(msg);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The communicator travels through ctx->saved_data as an integer: IValue cannot hold a raw
// pointer, and the caller guarantees the communicator outlives the backward pass.
int64_t CommHandle(Communicator& tp) { return reinterpret_cast<int64_t>(&tp); }
Communicator& CommFrom(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

// The communicator concatenates flat 1-D buffers in rank order. Laying an activation out sequence
// first makes "rank order" equal "sequence order", so the gathered buffer is the full sequence.
// x (B, S, ...) -> (S * B * ...) in (S, B, ...) order.
at::Tensor SequenceMajorFlat(const at::Tensor& x) {
  return x.transpose(0, 1).contiguous().view({-1});
}
// The inverse for a target shape (B, S, ...): flat (S * B * ...) -> (B, S, ...). Contiguous, so
// downstream .view() calls (Attention reshapes its projections) keep working.
at::Tensor FromSequenceMajor(const at::Tensor& flat, std::vector<int64_t> shape) {
  std::swap(shape[0], shape[1]);
  return flat.view(shape).transpose(0, 1).contiguous();
}
std::vector<int64_t> WithSequence(const at::Tensor& x, int64_t seq) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[1] = seq;
  return shape;
}

// x (B, T/tp, ...) -> (B, T, ...)
at::Tensor AllGatherSequence(const at::Tensor& x, Communicator& tp) {
  return FromSequenceMajor(tp.AllGather(SequenceMajorFlat(x)),
                           WithSequence(x, x.size(1) * tp.size()));
}
// x (B, T, ...) -> summed over ranks, (B, T/tp, ...)
at::Tensor ReduceScatterAlongSequence(const at::Tensor& x, Communicator& tp) {
  TENAX_CHECK_MSG(x.size(1) % tp.size() == 0, "sequence not divisible by the TP degree");
  return FromSequenceMajor(tp.ReduceScatterSum(SequenceMajorFlat(x)),
                           WithSequence(x, x.size(1) / tp.size()));
}

struct CopyToFn : public torch::autograd::Function<CopyToFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;  // autograd returns an input as a fresh view carrying this node
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // Clone: the incoming gradient may be shared with other consumers; all-reduce is in place.
    at::Tensor g = grads[0].contiguous().clone();
    CommFrom(ctx).AllReduceSum(g);
    return {g, at::Tensor()};
  }
};

struct ReduceFromFn : public torch::autograd::Function<ReduceFromFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    at::Tensor y = x.contiguous().clone();
    reinterpret_cast<Communicator*>(comm)->AllReduceSum(y);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct GatherSequenceFn : public torch::autograd::Function<GatherSequenceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return AllGatherSequence(x, *reinterpret_cast<Communicator*>(comm));
  }
  // Every rank's (B, T, ...) output feeds its own local heads, so the gradient of this rank's
  // shard is the sum over ranks of their gradients for those positions: a reduce-scatter.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {ReduceScatterAlongSequence(grads[0], CommFrom(ctx)), at::Tensor()};
  }
};

struct ReduceScatterSequenceFn : public torch::autograd::Function<ReduceScatterSequenceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return ReduceScatterAlongSequence(x, *reinterpret_cast<Communicator*>(comm));
  }
  // Each rank's partial input contributed to every rank's shard with weight 1, so its gradient
  // is every shard's gradient: an all-gather.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {AllGatherSequence(grads[0], CommFrom(ctx)), at::Tensor()};
  }
};

bool EndsWith(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

using ParamMap = std::unordered_map<std::string, at::Tensor>;
const at::Tensor& Param(const ParamMap& params, const std::string& name) {
  auto it = params.find(name);
  TENAX_CHECK_MSG(it != params.end(), name.c_str());
  return it->second;
}

}  // namespace

at::Tensor CopyToTensorParallel(const at::Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;
  return CopyToFn::apply(x, CommHandle(tp));
}
at::Tensor ReduceFromTensorParallel(const at::Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;
  return ReduceFromFn::apply(x, CommHandle(tp));
}
at::Tensor GatherSequence(const at::Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;  // no sequence parallelism: the identity, without copies
  return GatherSequenceFn::apply(x, CommHandle(tp));
}
at::Tensor ReduceScatterSequence(const at::Tensor& x, Communicator& tp) {
  if (tp.size() == 1) return x;
  return ReduceScatterSequenceFn::apply(x, CommHandle(tp));
}

std::vector<ShardSpec> TensorParallelShardSpecs(const ModelSpec& spec, int tp_rank, int tp_size) {
  TENAX_CHECK(0 <= tp_rank && tp_rank < tp_size);
  TENAX_CHECK(spec.n_heads % tp_size == 0 && spec.n_kv_heads % tp_size == 0 &&
              spec.ffn_hidden_dim % tp_size == 0);
  const int64_t r = tp_rank, d = spec.head_dim();
  const int64_t q_rows = spec.n_heads / tp_size * d;      // local query heads x D
  const int64_t kv_rows = spec.n_kv_heads / tp_size * d;  // local kv heads x D
  const int64_t f_rows = spec.ffn_hidden_dim / tp_size;
  std::vector<ShardSpec> specs;
  for (const auto& [name, shape] : model::Llama::ParamShapes(spec)) {
    ShardSpec s{name, -1, 0, 0};
    if (EndsWith(name, "attention.wq.weight")) {
      s = {name, 0, r * q_rows, (r + 1) * q_rows};
    } else if (EndsWith(name, "attention.wk.weight") || EndsWith(name, "attention.wv.weight")) {
      s = {name, 0, r * kv_rows, (r + 1) * kv_rows};
    } else if (EndsWith(name, "attention.wo.weight")) {
      s = {name, 1, r * q_rows, (r + 1) * q_rows};
    } else if (EndsWith(name, "feed_forward.w1.weight") ||
               EndsWith(name, "feed_forward.w3.weight")) {
      s = {name, 0, r * f_rows, (r + 1) * f_rows};
    } else if (EndsWith(name, "feed_forward.w2.weight")) {
      s = {name, 1, r * f_rows, (r + 1) * f_rows};
    }
    specs.push_back(s);
  }
  return specs;
}

std::vector<model::NamedTensor> ShardForTensorParallel(const std::vector<model::NamedTensor>& full,
                                                       const ModelSpec& spec, int tp_rank,
                                                       int tp_size) {
  ParamMap by_name;
  for (const auto& p : full) {
    TENAX_CHECK_MSG(by_name.emplace(p.name, p.tensor).second, p.name.c_str());  // no duplicates
  }
  const std::vector<ShardSpec> specs = TensorParallelShardSpecs(spec, tp_rank, tp_size);
  TENAX_CHECK(by_name.size() == specs.size());
  at::NoGradGuard no_grad;
  std::vector<model::NamedTensor> local;
  for (const auto& s : specs) {
    const at::Tensor& src = Param(by_name, s.name);
    at::Tensor t = s.dim < 0 ? src.detach() : src.detach().narrow(s.dim, s.begin, s.end - s.begin);
    // A copy, never a view: the local leaf must not share storage (or .grad) with the full one.
    t = t.contiguous().clone();
    t.set_requires_grad(src.requires_grad());
    local.push_back({s.name, t});
  }
  return local;
}

std::vector<model::NamedTensor> Unshard(const std::vector<model::NamedTensor>& local,
                                        const std::vector<ShardSpec>& specs, Communicator& tp) {
  TENAX_CHECK(local.size() == specs.size());
  at::NoGradGuard no_grad;
  std::vector<model::NamedTensor> full;
  for (size_t i = 0; i < local.size(); ++i) {
    const ShardSpec& s = specs[i];
    const at::Tensor x = local[i].tensor.detach();
    TENAX_CHECK_MSG(local[i].name == s.name, s.name.c_str());
    if (s.dim < 0) {
      full.push_back({s.name, x.clone()});
      continue;
    }
    TENAX_CHECK(s.dim < x.dim() && x.size(s.dim) == s.end - s.begin);
    // Split dim first, so the rank-order concatenation is the concatenation along that dim; for
    // column splits (wo, w2) that means gathering the transpose and transposing back.
    at::Tensor moved = x.transpose(0, s.dim).contiguous();  // (local split, ...)
    std::vector<int64_t> shape = moved.sizes().vec();
    shape[0] *= tp.size();
    at::Tensor gathered = tp.AllGather(moved.view({-1})).view(shape);  // (full split, ...)
    full.push_back({s.name, gathered.transpose(0, s.dim).contiguous()});
  }
  return full;
}

at::Tensor TensorParallelEmbed(const at::Tensor& table, const at::Tensor& tokens, Communicator& tp,
                               at::ScalarType compute_dtype) {
  TENAX_CHECK(tokens.dim() == 2);
  const int64_t n = tp.size(), t = tokens.size(1);
  TENAX_CHECK_MSG(t % n == 0, "sequence length not divisible by the TP degree");
  // The embedding runs on the full sequence (the weight is replicated and every rank has the
  // tokens), then each rank keeps its shard. narrow's backward scatters the shard's gradient into
  // zeros, so the embedding gradient is this shard's contribution only, like the norms'.
  at::Tensor h = at::embedding(table, tokens).to(compute_dtype);  // (B, T, C)
  return n == 1 ? h : h.narrow(1, tp.rank() * (t / n), t / n);    // (B, T/tp, C)
}

at::Tensor TensorParallelAttentionResidual(const ModelSpec& spec, const TensorParallelLayer& l,
                                           Communicator& tp, const at::Tensor& h,
                                           const model::RopeTable& rope,
                                           const model::AttentionFn& attend,
                                           model::BlockMatmul mm) {
  const int64_t n = tp.size();
  const int64_t local_heads = spec.n_heads / n, local_kv_heads = spec.n_kv_heads / n;
  TENAX_CHECK(l.wq.size(0) == local_heads * spec.head_dim());
  // h (B, T/tp, C)
  at::Tensor x =
      GatherSequence(model::RmsNorm(h, l.attention_norm, spec.norm_eps), tp);  // (B, T, C)
  at::Tensor a = model::Attention(x, l.wq, l.wk, l.wv, l.wo,  // wk, wv (K/tp*D, C); wo (C, H/tp*D)
                                  local_heads, local_kv_heads, rope, attend, mm);  // (B, T, C)
  return h + ReduceScatterSequence(a, tp);                                         // (B, T/tp, C)
}

at::Tensor TensorParallelBlock(const ModelSpec& spec, const TensorParallelLayer& l,
                               Communicator& tp, const at::Tensor& h_in,
                               const model::RopeTable& rope, const model::AttentionFn& attend,
                               model::BlockMatmul mm) {
  at::Tensor h = TensorParallelAttentionResidual(spec, l, tp, h_in, rope, attend, mm);
  at::Tensor x = GatherSequence(model::RmsNorm(h, l.ffn_norm, spec.norm_eps), tp);  // (B, T, C)
  at::Tensor f = model::FeedForward(x, l.w1, l.w2, l.w3, mm);  // w1, w3 (F/tp, C); w2 (C, F/tp)
  return h + ReduceScatterSequence(f, tp);                     // (B, T/tp, C)
}

at::Tensor TensorParallelHeadLoss(const ModelSpec& spec, const at::Tensor& norm,
                                  const at::Tensor& output, Communicator& tp, const at::Tensor& h,
                                  const at::Tensor& targets) {
  const int64_t n = tp.size(), t = targets.size(1);
  at::Tensor x = model::RmsNorm(h, norm, spec.norm_eps);  // (B, T/tp, C)
  at::Tensor local_targets =
      n == 1 ? targets : targets.narrow(1, tp.rank() * (t / n), t / n);  // (B, T/tp)
  // Chunked: the (B, T/tp, V) fp32 logits are never materialised.
  at::Tensor local_loss = model::LinearCrossEntropy(x.reshape({-1, x.size(-1)}), output,
                                                    local_targets.reshape({-1}));  // ()
  if (n == 1) return local_loss;
  // Every shard holds B*T/tp tokens, so the full mean is the mean of the shard means. Each rank
  // differentiates its own term local_loss / tp (the backward of the all-reduce is the identity),
  // and the terms of all ranks add up to the full loss.
  return ReduceFromTensorParallel(local_loss / static_cast<double>(n), tp);
}

TensorParallelLayer TensorParallelLayerOf(const std::vector<model::NamedTensor>& params,
                                          int64_t layer) {
  const std::string l = fmt::format("layers.{}.", layer);
  TensorParallelLayer out;
  std::pair<const char*, at::Tensor*> fields[] = {{"attention_norm.weight", &out.attention_norm},
                                                  {"attention.wq.weight", &out.wq},
                                                  {"attention.wk.weight", &out.wk},
                                                  {"attention.wv.weight", &out.wv},
                                                  {"attention.wo.weight", &out.wo},
                                                  {"ffn_norm.weight", &out.ffn_norm},
                                                  {"feed_forward.w1.weight", &out.w1},
                                                  {"feed_forward.w2.weight", &out.w2},
                                                  {"feed_forward.w3.weight", &out.w3}};
  for (const auto& p : params) {
    if (p.name.compare(0, l.size(), l) != 0) continue;
    for (auto& [suffix, field] : fields) {
      if (p.name.compare(l.size(), std::string::npos, suffix) == 0) *field = p.tensor;
    }
  }
  for (auto& [suffix, field] : fields) TENAX_CHECK_MSG(field->defined(), (l + suffix).c_str());
  return out;
}

at::Tensor TensorParallelLoss(const ModelSpec& spec,
                              const std::vector<model::NamedTensor>& local_params, Communicator& tp,
                              const at::Tensor& tokens, const at::Tensor& targets,
                              const model::RopeTable& rope, at::ScalarType compute_dtype) {
  TENAX_CHECK(tokens.dim() == 2 && targets.sizes() == tokens.sizes());
  TENAX_CHECK(rope.cos.size(0) >= tokens.size(1));
  ParamMap p;
  for (const auto& np : local_params) p.emplace(np.name, np.tensor);
  at::Tensor h = TensorParallelEmbed(Param(p, "tok_embeddings.weight"), tokens, tp, compute_dtype);
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    h = TensorParallelBlock(spec, TensorParallelLayerOf(local_params, i), tp, h, rope);
  }
  // A handle, not a reference: g++ 13 cannot tell that Param's result outlives the temporary name.
  const at::Tensor out_w =
      Param(p, spec.tie_embeddings ? "tok_embeddings.weight" : "output.weight");  // (V, C)
  return TensorParallelHeadLoss(spec, Param(p, "norm.weight"), out_w, tp, h, targets);
}

void AllReduceReplicatedGrads(const std::vector<model::NamedTensor>& local_params,
                              const std::vector<ShardSpec>& specs, Communicator& tp) {
  // Why a sum and not a mean: each rank back-propagated only its term local_loss / tp of the full
  // loss, and a replicated parameter touched only this rank's sequence shard, so its gradient here
  // is exactly that shard's contribution to d(full loss)/d(param). The full gradient is the sum of
  // the contributions; the 1/tp averaging already happened inside the loss.
  TENAX_CHECK(local_params.size() == specs.size());
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].dim >= 0) continue;
    TENAX_CHECK_MSG(local_params[i].name == specs[i].name, specs[i].name.c_str());
    at::Tensor g = local_params[i].tensor.grad();
    TENAX_CHECK_MSG(g.defined(), specs[i].name.c_str());
    TENAX_CHECK(grads.empty() || g.scalar_type() == grads[0].scalar_type());
    grads.push_back(g);
  }
  // One bucket: the norms are tiny, and one collective beats 2L + 3 small ones on latency.
  AllReduceSumInOneBucket(tp, grads);
}

void AllReduceSumInOneBucket(Communicator& group, const std::vector<at::Tensor>& tensors) {
  if (tensors.empty() || group.size() == 1) return;
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  at::Tensor bucket = at::cat(flat);  // (sum of numel)
  group.AllReduceSum(bucket);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    at::Tensor(t).copy_(bucket.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

}  // namespace tenax::parallel
