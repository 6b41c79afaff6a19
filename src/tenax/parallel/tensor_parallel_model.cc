#include "tenax/parallel/tensor_parallel_model.h"

#include <cmath>
#include <map>

#include "tenax/core/check.h"

namespace tenax::parallel {

TensorParallelModel::TensorParallelModel(const ModelSpec& spec,
                                         const std::vector<model::NamedTensor>& full,
                                         Communicator& tp, const at::Device& device)
    : spec_(spec), tp_(tp), device_(device) {
  specs_ = TensorParallelShardSpecs(spec, tp.rank(), tp.size());
  params_ = ShardForTensorParallel(full, spec, tp.rank(), tp.size());
  TENAX_CHECK(params_.size() == specs_.size());
  for (auto& p : params_) {
    p.tensor = p.tensor.detach().to(device_).contiguous();
    p.tensor.set_requires_grad(true);
  }
}

const ShardSpec& TensorParallelModel::SpecFor(const std::string& name) const {
  for (const auto& s : specs_) {
    if (s.name == name) return s;
  }
  TENAX_CHECK_MSG(false, name.c_str());
  return specs_.front();
}

at::Tensor TensorParallelModel::Loss(const at::Tensor& tokens, const at::Tensor& targets,
                                     at::ScalarType dtype) {
  if (tokens.size(1) > rope_len_) {
    rope_ = model::MakeRopeTable(spec_, tokens.size(1), device_);
    rope_len_ = tokens.size(1);
  }
  return TensorParallelLoss(spec_, params_, tp_, tokens, targets, rope_, dtype);
}

void TensorParallelModel::FinishGradients() { AllReduceReplicatedGrads(params_, specs_, tp_); }

double TensorParallelModel::GradNormSquared() {
  at::NoGradGuard no_grad;
  // [sharded sum, replicated sum]: shards differ across TP ranks and are summed over the group;
  // replicated gradients are identical on every rank (after FinishGradients) and count once.
  at::Tensor sums = at::zeros({2}, at::kDouble);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor g = params_[i].tensor.grad();
    if (!g.defined()) continue;
    const double s = g.to(at::kDouble).pow(2).sum().item<double>();
    sums[specs_[i].dim < 0 ? 1 : 0] += s;
  }
  at::Tensor sharded = sums.narrow(0, 0, 1).clone();
  tp_.AllReduceSum(sharded);
  return sharded.item<double>() + sums[1].item<double>();
}

std::vector<model::NamedTensor> TensorParallelModel::FullParams() {
  std::vector<model::NamedTensor> local;
  for (const auto& p : params_) local.push_back({p.name, p.tensor.detach().to(at::kCPU)});
  return Unshard(local, specs_, tp_);
}

std::vector<model::NamedTensor> TensorParallelModel::FullState(
    const std::vector<model::NamedTensor>& local_state) {
  // State tensors are named "<prefix><param>"; unshard each with its parameter's spec.
  std::vector<model::NamedTensor> out;
  for (const auto& s : local_state) {
    const size_t dot = s.name.find('.');
    const std::string prefix = s.name.substr(0, dot + 1);
    ShardSpec spec = SpecFor(s.name.substr(dot + 1));
    auto full = Unshard({{spec.name, s.tensor.detach().to(at::kCPU)}}, {spec}, tp_);
    out.push_back({prefix + full[0].name, full[0].tensor});
  }
  return out;
}

std::vector<model::NamedTensor> TensorParallelModel::Shard(
    const std::vector<model::NamedTensor>& full) const {
  std::vector<model::NamedTensor> out;
  for (const auto& f : full) {
    // Parameters are named like specs; state carries a "<prefix>." before the parameter name.
    std::string param = f.name, prefix;
    bool found = false;
    for (const auto& s : specs_) found = found || s.name == param;
    if (!found) {
      const size_t dot = f.name.find('.');
      prefix = f.name.substr(0, dot + 1);
      param = f.name.substr(dot + 1);
    }
    const ShardSpec& s = SpecFor(param);
    at::Tensor t = s.dim < 0 ? f.tensor : f.tensor.narrow(s.dim, s.begin, s.end - s.begin);
    out.push_back({prefix + param, t.contiguous()});
  }
  return out;
}

void TensorParallelModel::LoadFull(const std::vector<model::NamedTensor>& full_params) {
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> by_name;
  for (auto& t : Shard(full_params)) by_name[t.name] = t.tensor;
  for (auto& p : params_) {
    auto it = by_name.find(p.name);
    TENAX_CHECK_MSG(it != by_name.end(), p.name.c_str());
    p.tensor.copy_(it->second);
  }
}

}  // namespace tenax::parallel
