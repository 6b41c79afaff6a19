#include "tenax/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tenax/core/check.h"
#include "tenax/parallel/gradients.h"

namespace tenax::parallel {

FlatLayout MakeFlatLayout(const std::vector<model::NamedTensor>& params, int shards) {
  FlatLayout l;
  for (const auto& p : params) {
    l.entries.push_back({p.name, p.tensor.sizes().vec(), l.total, p.tensor.numel()});
    l.total += p.tensor.numel();
  }
  l.padded = (l.total + shards - 1) / shards * shards;
  l.shard_size = l.padded / shards;
  return l;
}

DataParallel::DataParallel(model::Llama& model, Communicator& shard, Communicator& replicate)
    : model_(model), shard_(shard), replicate_(replicate) {
  layout_ = MakeFlatLayout(model.params(), shard.size());
  if (!sharded()) {
    opt_params_ = model.params();
    return;
  }
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  for (const auto& p : model.params()) flat.push_back(p.tensor.detach().reshape({-1}));
  at::Tensor full = at::cat(flat);
  full = at::constant_pad_nd(full, {0, layout_.padded - layout_.total});
  shard_param_ = full.narrow(0, shard.rank() * layout_.shard_size, layout_.shard_size).clone();
  shard_param_.set_requires_grad(true);
  opt_params_ = {{"flat_shard", shard_param_}};
  Release();
}

std::vector<at::Tensor> DataParallel::decay_masks() const {
  if (!sharded()) return {};
  at::Tensor mask = at::zeros({layout_.padded}, at::kFloat);
  for (const auto& e : layout_.entries) {
    if (e.shape.size() >= 2) mask.narrow(0, e.offset, e.numel).fill_(1.0);
  }
  return {mask.narrow(0, shard_.rank() * layout_.shard_size, layout_.shard_size)
              .clone()
              .to(shard_param_.device())};
}

void DataParallel::Gather() {
  if (!sharded()) return;
  at::Tensor full;
  {
    at::NoGradGuard no_grad;
    full = shard_.AllGather(shard_param_.detach());
  }
  std::vector<at::Tensor> tensors;
  for (const auto& e : layout_.entries) {
    // Views of one buffer; each is its own autograd leaf so it collects its own gradient.
    tensors.push_back(full.narrow(0, e.offset, e.numel).view(e.shape).detach().requires_grad_());
  }
  model_.ReplaceParams(tensors);
}

void DataParallel::Release() {
  if (!sharded()) return;
  std::vector<at::Tensor> empty;
  for (const auto& e : layout_.entries) {
    // Zero-stride expanded scalars keep shapes (ReplaceParams checks them) at no memory cost.
    empty.push_back(at::zeros({}, shard_param_.options().requires_grad(false)).expand(e.shape));
  }
  model_.ReplaceParams(empty);
}

void DataParallel::ReduceGradients() {
  at::NoGradGuard no_grad;
  const double scale = 1.0 / dp_degree();
  std::vector<at::Tensor> grads;
  for (const auto& p : model_.params()) {
    at::Tensor g = p.tensor.grad();
    grads.push_back(g.defined() ? g.reshape({-1}) : at::zeros({p.tensor.numel()}, p.tensor.options()));
  }
  // One flat buffer: a single collective per step instead of one per parameter.
  at::Tensor flat = at::cat(grads);
  if (!sharded()) {
    replicate_.AllReduceSum(flat);
    flat.mul_(scale);
    for (size_t i = 0; i < layout_.entries.size(); ++i) {
      const auto& e = layout_.entries[i];
      model_.params()[i].tensor.mutable_grad() = flat.narrow(0, e.offset, e.numel).view(e.shape);
    }
    return;
  }
  flat = at::constant_pad_nd(flat, {0, layout_.padded - layout_.total});
  at::Tensor g = shard_.ReduceScatterSum(flat);
  replicate_.AllReduceSum(g);
  g.mul_(scale);
  shard_param_.mutable_grad() = g;
}

double DataParallel::ClipGradNorm(double max_norm) {
  at::NoGradGuard no_grad;
  at::Tensor sumsq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble));
  for (const auto& p : opt_params_) {
    if (p.tensor.grad().defined()) {
      sumsq += p.tensor.grad().to(at::kDouble).pow(2).sum().to(at::kCPU);
    }
  }
  if (sharded()) shard_.AllReduceSum(sumsq);  // replicas hold identical shards
  const double total = std::sqrt(sumsq.item<double>());
  std::vector<at::Tensor> grads;
  for (const auto& p : opt_params_) {
    if (p.tensor.grad().defined()) grads.push_back(p.tensor.grad());
  }
  ClipToMaxNorm(grads, total, max_norm);
  return total;
}

std::vector<DataParallel::Slice> DataParallel::Slices(const at::Tensor& flat) const {
  std::vector<Slice> out;
  const int64_t lo = sharded() ? shard_.rank() * layout_.shard_size : 0;
  const int64_t hi = sharded() ? lo + layout_.shard_size : layout_.total;
  for (const auto& e : layout_.entries) {
    const int64_t b = std::max(lo, e.offset), en = std::min(hi, e.offset + e.numel);
    if (b >= en) continue;
    out.push_back({e.name, b - e.offset, en - e.offset, flat.narrow(0, b - lo, en - b)});
  }
  return out;
}

at::Tensor DataParallel::ShardOf(const std::vector<model::NamedTensor>& full) const {
  std::map<std::string, at::Tensor> by_name;
  for (const auto& t : full) by_name[t.name] = t.tensor;
  std::vector<at::Tensor> flat;
  for (const auto& e : layout_.entries) {
    auto it = by_name.find(e.name);
    TENAX_CHECK_MSG(it != by_name.end(), e.name.c_str());
    flat.push_back(it->second.reshape({-1}).to(at::kFloat));
  }
  at::Tensor all = at::constant_pad_nd(at::cat(flat), {0, layout_.padded - layout_.total});
  const int64_t lo = sharded() ? shard_.rank() * layout_.shard_size : 0;
  return all.narrow(0, lo, sharded() ? layout_.shard_size : layout_.total).clone();
}

void DataParallel::LoadFull(const std::vector<model::NamedTensor>& full_params) {
  at::NoGradGuard no_grad;
  if (!sharded()) {
    TENAX_CHECK(model_.LoadParams(full_params).ok());
    return;
  }
  shard_param_.copy_(ShardOf(full_params));
}

int64_t DataParallel::ResidentStateBytes() const {
  const int64_t elements = sharded() ? layout_.shard_size : layout_.total;
  return 4 * elements * static_cast<int64_t>(sizeof(float));
}

}  // namespace tenax::parallel
