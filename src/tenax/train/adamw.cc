#include "tenax/train/adamw.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "tenax/parallel/gradients.h"

namespace tenax::train {

AdamW::AdamW(const OptimizerOptions& options, const std::vector<model::NamedTensor>& params,
             std::vector<at::Tensor> decay_masks)
    : options_(options), params_(params), decay_masks_(std::move(decay_masks)) {
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p.tensor, p.tensor.options().dtype(at::kFloat)));
    exp_avg_sq_.push_back(at::zeros_like(p.tensor, p.tensor.options().dtype(at::kFloat)));
    decay_.push_back(p.tensor.dim() >= 2);
  }
}

void AdamW::Step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(step_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i].tensor;
    at::Tensor g = p.grad();
    if (!g.defined()) continue;
    if (options_.weight_decay != 0) {
      if (!decay_masks_.empty()) {
        p.addcmul_(p, decay_masks_[i], -lr * options_.weight_decay);
      } else if (decay_[i]) {
        p.mul_(1.0 - lr * options_.weight_decay);
      }
    }
    exp_avg_[i].mul_(b1).add_(g, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

std::vector<model::NamedTensor> AdamW::StateTensors() const {
  std::vector<model::NamedTensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back({"exp_avg." + params_[i].name, exp_avg_[i]});
    out.push_back({"exp_avg_sq." + params_[i].name, exp_avg_sq_[i]});
  }
  return out;
}

Status AdamW::LoadState(const std::vector<model::NamedTensor>& state, int64_t step_count) {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& s : state) by_name[s.name] = &s.tensor;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto [prefix, dst] :
         {std::pair{"exp_avg.", &exp_avg_[i]}, std::pair{"exp_avg_sq.", &exp_avg_sq_[i]}}) {
      auto it = by_name.find(prefix + params_[i].name);
      if (it == by_name.end()) {
        return DataError(fmt::format("optimizer state lacks '{}{}'", prefix, params_[i].name));
      }
      if (it->second->sizes() != dst->sizes()) {
        return DataError(
            fmt::format("optimizer state '{}{}' has the wrong shape", prefix, params_[i].name));
      }
      dst->copy_(*it->second);
    }
  }
  if (by_name.size() != 2 * params_.size()) {
    return DataError(fmt::format("optimizer state has {} tensors, expected {}", by_name.size(),
                                 2 * params_.size()));
  }
  step_ = step_count;
  return Status::Ok();
}

double ClipGradNorm(const std::vector<model::NamedTensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const auto& p : params) {
    if (p.tensor.grad().defined()) norms.push_back(p.tensor.grad().norm(2).to(at::kFloat));
  }
  if (norms.empty()) return 0.0;
  const double total = at::stack(norms).norm(2).item<double>();
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    if (p.tensor.grad().defined()) grads.push_back(p.tensor.grad());
  }
  parallel::ClipToMaxNorm(grads, total, max_norm);
  return total;
}

}  // namespace tenax::train
