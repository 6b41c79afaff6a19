// Test and benchmark helper (header only): the optimizer step as it was before issue 17, AdamW as
// one loop over the parameters (the update of torch.optim.AdamW(foreach=False) written out per
// tensor: ~7 small operations and one fresh denominator per parameter), and clipping that reads
// the norm back and skips the multiply when it is not needed. optim_test.cc checks AdamW against
// this loop bit for bit; bench/ times it for before/after figures. Not used by training.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/model/llama.h"

namespace tenax::testing {

class LoopAdamW {
 public:
  // `masks`: per-parameter weight-decay masks (AdamW's decay_masks), or empty for "matrices only".
  LoopAdamW(const OptimizerOptions& o, std::vector<model::NamedTensor> params,
            std::vector<at::Tensor> masks = {})
      : o_(o), params_(std::move(params)), masks_(std::move(masks)) {
    for (const auto& p : params_) {
      m_.push_back(at::zeros_like(p.tensor, p.tensor.options().dtype(at::kFloat)));
      v_.push_back(at::zeros_like(p.tensor, p.tensor.options().dtype(at::kFloat)));
    }
  }

  void Step(double lr) {
    at::NoGradGuard no_grad;
    ++t_;
    const double bias1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bias2_sqrt = std::sqrt(1.0 - std::pow(o_.beta2, static_cast<double>(t_)));
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor p = params_[i].tensor;
      at::Tensor g = p.grad();
      if (!g.defined()) continue;
      if (o_.weight_decay != 0) {
        if (!masks_.empty()) {
          p.addcmul_(p, masks_[i], -lr * o_.weight_decay);
        } else if (p.dim() >= 2) {
          p.mul_(1.0 - lr * o_.weight_decay);
        }
      }
      m_[i].mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
      v_[i].mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
      at::Tensor denom = (v_[i].sqrt() / bias2_sqrt).add_(o_.eps);
      p.addcdiv_(m_[i], denom, -lr / bias1);
    }
  }
  const std::vector<at::Tensor>& m() const { return m_; }  // exp_avg, per parameter
  const std::vector<at::Tensor>& v() const { return v_; }  // exp_avg_sq, per parameter

 private:
  OptimizerOptions o_;
  std::vector<model::NamedTensor> params_;  // aliases of the caller's tensors
  std::vector<at::Tensor> masks_, m_, v_;
  int64_t t_ = 0;
};

inline double LoopClipGradNorm(const std::vector<model::NamedTensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const auto& p : params) {
    if (p.tensor.grad().defined()) norms.push_back(p.tensor.grad().norm(2).to(at::kFloat));
  }
  if (norms.empty()) return 0.0;
  const double total = at::stack(norms).norm(2).item<double>();
  const double coef = max_norm / (total + 1e-6);
  if (max_norm > 0 && coef < 1.0) {
    for (const auto& p : params) {
      if (p.tensor.grad().defined()) p.tensor.grad().mul_(coef);
    }
  }
  return total;
}

}  // namespace tenax::testing
