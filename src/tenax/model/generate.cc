#include "tenax/model/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "tenax/core/check.h"

namespace tenax::model {

int64_t Sampler::Next(const at::Tensor& logits) {
  const at::Tensor l = logits.detach().to(at::kCPU, at::kDouble).contiguous().view({-1});
  const double* v = l.data_ptr<double>();
  const int64_t n = l.numel();
  TENAX_CHECK(n > 0);
  if (o_.temperature <= 0) {  // greedy; the lowest id wins a tie
    return static_cast<int64_t>(std::max_element(v, v + n) - v);
  }
  // softmax(logits / T), stably (max subtracted), in double.
  const double top = *std::max_element(v, v + n);
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i] = std::exp((v[i] - top) / o_.temperature);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Most probable first; ties by id, so the order (and the draw) is the same everywhere.
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  // The nucleus: the shortest prefix whose mass reaches top_p (at least one token).
  size_t keep = 0;
  double mass = 0;
  while (keep < order.size() && (keep == 0 || mass < o_.top_p * sum)) mass += p[order[keep++]];
  const double u = rng_.Uniform() * mass;
  double c = 0;
  for (size_t i = 0; i < keep; ++i) {
    c += p[order[i]];
    if (u < c) return order[i];
  }
  return order[keep - 1];  // u within rounding of the total
}

Result<KvCacheDecoder> KvCacheDecoder::Create(Llama& model, int64_t capacity,
                                              at::ScalarType compute_dtype) {
  const ModelSpec& s = model.spec();
  if (capacity < 1 || capacity > s.max_seq_len) {
    return InvalidArgument(fmt::format(
        "a KV cache of {} positions: must be between 1 and the model's max_seq_len ({})", capacity,
        s.max_seq_len));
  }
  KvCacheDecoder d;
  d.spec_ = s;
  d.dtype_ = compute_dtype;
  d.capacity_ = capacity;
  std::map<std::string, at::Tensor> w;
  for (const auto& p : model.params()) w[p.name] = p.tensor.detach();
  d.tok_embeddings_ = w.at("tok_embeddings.weight");
  d.norm_ = w.at("norm.weight");
  d.output_ = s.tie_embeddings ? d.tok_embeddings_ : w.at("output.weight");
  d.moe_ = model.moe();
  // MoE layers: the same routed block as training (model/moe.h).
  for (int64_t i = 0; i < s.n_layers; ++i) d.layers_.push_back(BindLayer(s, i, w));
  d.rope_ = MakeRopeTable(s, capacity, model.device());
  d.k_cache_.resize(d.layers_.size());
  d.v_cache_.resize(d.layers_.size());
  return d;
}

at::Tensor KvCacheDecoder::Attend(size_t layer, const at::Tensor& x, const RopeTable& rope) {
  const Layer& l = layers_[layer];
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t h = spec_.n_heads, kv = spec_.n_kv_heads, d = spec_.head_dim();
  const at::Tensor q = ApplyRope(Linear(x, l.wq).view({b, t, h, d}), rope);   // (B, T, H, D)
  const at::Tensor k = ApplyRope(Linear(x, l.wk).view({b, t, kv, d}), rope);  // (B, T, K, D)
  const at::Tensor v = Linear(x, l.wv).view({b, t, kv, d});                   // (B, T, K, D)
  at::Tensor& kc = k_cache_[layer];                                           // (B, K, capacity, D)
  at::Tensor& vc = v_cache_[layer];
  if (!kc.defined() || kc.size(0) != b) {
    kc = at::zeros({b, kv, capacity_, d}, x.options());
    vc = at::zeros({b, kv, capacity_, d}, x.options());
  }
  kc.narrow(2, length_, t).copy_(k.transpose(1, 2));
  vc.narrow(2, length_, t).copy_(v.transpose(1, 2));
  const int64_t n = length_ + t;
  at::Tensor keys = kc.narrow(2, 0, n);  // (B, K, n, D)
  at::Tensor values = vc.narrow(2, 0, n);
  if (h != kv) {  // grouped-query: query head j reads kv head j / (H / K), as in training
    keys = keys.repeat_interleave(h / kv, 1);
    values = values.repeat_interleave(h / kv, 1);
  }
  // Scores and softmax in at least fp32. Query i (position length_ + i) sees keys [0, length_ + i].
  const at::ScalarType acc = dtype_ == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor scores = at::matmul(q.transpose(1, 2).to(acc), keys.transpose(-2, -1).to(acc))
                          .mul_(1.0 / std::sqrt(static_cast<double>(d)));  // (B, H, T, n)
  const at::Tensor future = at::ones({t, n}, scores.options().dtype(at::kBool)).triu_(length_ + 1);
  scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  const at::Tensor y = at::matmul(at::softmax(scores, -1), values.to(acc)).to(dtype_);  // (B,H,T,D)
  return Linear(y.transpose(1, 2).reshape({b, t, h * d}), l.wo);
}

at::Tensor KvCacheDecoder::Forward(const at::Tensor& tokens) {
  TENAX_CHECK(tokens.dim() == 2);
  const int64_t t = tokens.size(1);
  TENAX_CHECK(t >= 1 && length_ + t <= capacity_);
  at::NoGradGuard no_grad;
  const RopeTable rope{rope_.cos.narrow(0, length_, t), rope_.sin.narrow(0, length_, t)};
  at::Tensor h = at::embedding(tok_embeddings_, tokens).to(dtype_);  // (B, T, C)
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    h = h + Attend(i, RmsNorm(h, l.attention_norm, spec_.norm_eps), rope);
    if (l.is_moe) {  // tokens are routed independently: (B, T, C) -> (B T, C) and back
      const at::Tensor y = RmsNorm(h, l.ffn_norm, spec_.norm_eps);
      h = h + MoeFeedForward(y.reshape({-1, y.size(-1)}), l.moe, spec_.moe, *moe_,
                             static_cast<int64_t>(i))
                  .view(y.sizes());
    } else {
      h = h + FeedForward(RmsNorm(h, l.ffn_norm, spec_.norm_eps), l.w1, l.w2, l.w3);
    }
  }
  length_ += t;
  const at::Tensor logits = Linear(RmsNorm(h, norm_, spec_.norm_eps), output_);  // (B, T, V)
  return logits.scalar_type() == at::kDouble ? logits : logits.to(at::kFloat);
}

Result<std::vector<int64_t>> Generate(Llama& model, const std::vector<int64_t>& prompt,
                                      const GenerateOptions& o,
                                      const std::function<void(int64_t)>& on_token) {
  const ModelSpec& s = model.spec();
  if (prompt.empty()) {
    return InvalidArgument("the prompt is empty; give at least one token (e.g. the BOS)");
  }
  for (int64_t id : prompt) {
    if (id < 0 || id >= s.vocab_size) {
      return InvalidArgument(fmt::format(
          "prompt token {} is outside the model's vocabulary [0, {})", id, s.vocab_size));
    }
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
  if (o.max_new_tokens < 0 || total > s.max_seq_len) {
    return InvalidArgument(fmt::format(
        "{} prompt tokens + {} new tokens = {} exceeds the model's max_seq_len ({}); ask for at "
        "most {} new tokens",
        prompt.size(), o.max_new_tokens, total, s.max_seq_len,
        std::max<int64_t>(0, s.max_seq_len - static_cast<int64_t>(prompt.size()))));
  }
  if (o.sampling.temperature < 0 || !(o.sampling.top_p > 0 && o.sampling.top_p <= 1)) {
    return InvalidArgument(fmt::format(
        "temperature {} and top-p {}: temperature must be >= 0 (0: greedy) and top-p in (0, 1]",
        o.sampling.temperature, o.sampling.top_p));
  }
  at::NoGradGuard no_grad;
  const auto as_tensor = [&](const std::vector<int64_t>& ids) {
    return at::tensor(ids, at::kLong).view({1, -1}).to(model.device());
  };
  Sampler sampler(o.sampling);
  std::vector<int64_t> out;
  std::vector<int64_t> seq = prompt;
  std::optional<KvCacheDecoder> decoder;
  at::Tensor logits;  // (V) for the next position
  if (o.use_cache) {
    TENAX_ASSIGN_OR_RETURN(
        decoder, KvCacheDecoder::Create(model, std::max<int64_t>(total, 1), o.compute_dtype));
    logits = decoder->Forward(as_tensor(prompt))[0][-1];
  }
  while (static_cast<int64_t>(out.size()) < o.max_new_tokens) {
    if (!o.use_cache) logits = model.Logits(as_tensor(seq), o.compute_dtype)[0][-1];
    const int64_t id = sampler.Next(logits);
    out.push_back(id);
    seq.push_back(id);
    if (on_token) on_token(id);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end()) break;
    if (o.use_cache && static_cast<int64_t>(out.size()) < o.max_new_tokens) {
      logits = decoder->Forward(as_tensor({id}))[0][0];
    }
  }
  return out;
}

}  // namespace tenax::model
