#include "tenax/train/adamw.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "tenax/model/cpu_parallel.h"
#include "tenax/parallel/gradients.h"
#include "tenax/train/adamw_kernel.h"

namespace tenax::train {

AdamW::AdamW(const OptimizerOptions& options, const std::vector<model::NamedTensor>& params,
             std::vector<at::Tensor> decay_masks)
    : options_(options), params_(params), decay_masks_(std::move(decay_masks)) {
  at::NoGradGuard no_grad;
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  // Group by device and dtype, keeping the model's order inside each group.
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i].tensor;
    decay_.push_back(p.dim() >= 2);
    Group* g = nullptr;
    for (Group& h : groups_) {
      const at::Tensor& first = params_[h.members.front()].tensor;
      if (first.device() == p.device() && first.scalar_type() == p.scalar_type()) g = &h;
    }
    if (g == nullptr) g = &groups_.emplace_back();
    g->offsets.push_back(
        g->members.empty() ? 0 : g->offsets.back() + params_[g->members.back()].tensor.numel());
    g->members.push_back(i);
  }
  for (Group& g : groups_) {
    const at::Tensor& first = params_[g.members.front()].tensor;
    for (size_t i : g.members) g.largest = std::max(g.largest, params_[i].tensor.numel());
    g.numel = g.offsets.back() + params_[g.members.back()].tensor.numel();
    const at::TensorOptions fp32 = first.options().dtype(at::kFloat);
    g.exp_avg = at::zeros({g.numel}, fp32);
    g.exp_avg_sq = at::zeros({g.numel}, fp32);
    for (size_t k = 0; k < g.members.size(); ++k) {
      const at::Tensor& p = params_[g.members[k]].tensor;
      exp_avg_[g.members[k]] = g.exp_avg.narrow(0, g.offsets[k], p.numel()).view(p.sizes());
      exp_avg_sq_[g.members[k]] = g.exp_avg_sq.narrow(0, g.offsets[k], p.numel()).view(p.sizes());
    }
  }
}

void AdamW::Decay(size_t i, double lr) {
  if (options_.weight_decay == 0) return;
  at::Tensor p = params_[i].tensor;
  if (!decay_masks_.empty()) {
    p.addcmul_(p, decay_masks_[i], -lr * options_.weight_decay);
  } else if (decay_[i]) {
    p.mul_(1.0 - lr * options_.weight_decay);
  }
}

void AdamW::StepOne(size_t i, double lr, double bias1, double bias2_sqrt,
                    const at::Tensor& scratch) {
  at::Tensor p = params_[i].tensor;
  at::Tensor g = p.grad();
  if (!g.defined()) return;
  Decay(i, lr);
  const double b1 = options_.beta1, b2 = options_.beta2;
  exp_avg_[i].mul_(b1).add_(g, 1.0 - b1);
  exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
  // (v.sqrt() / bias2_sqrt) + eps, in the scratch instead of two fresh tensors.
  at::Tensor denom = scratch.narrow(0, 0, p.numel()).view(p.sizes());
  at::sqrt_out(denom, exp_avg_sq_[i]).div_(bias2_sqrt).add_(options_.eps);
  p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
}

void AdamW::StepLoop(size_t i, double lr, double bias1, double bias2_sqrt) {
  at::Tensor p = params_[i].tensor;
  if (!p.grad().defined()) return;
  const at::Tensor g = p.grad().contiguous();
  AdamWScalars s;
  if (options_.weight_decay != 0 && !decay_masks_.empty()) {
    s.decay = AdamWScalars::Decay::kMask;
    s.decay_coef = static_cast<float>(-lr * options_.weight_decay);
  } else if (options_.weight_decay != 0 && decay_[i]) {
    s.decay = AdamWScalars::Decay::kScale;
    s.decay_factor = static_cast<float>(1.0 - lr * options_.weight_decay);
  }
  const double b1 = options_.beta1, b2 = options_.beta2;
  s.beta1 = static_cast<float>(b1);
  s.one_minus_beta1 = static_cast<float>(1.0 - b1);
  s.beta2 = static_cast<float>(b2);
  s.one_minus_beta2 = static_cast<float>(1.0 - b2);
  s.bias2_sqrt = static_cast<float>(bias2_sqrt);
  s.eps = static_cast<float>(options_.eps);
  s.step_size = static_cast<float>(-lr / bias1);
  const at::Tensor mask =
      s.decay == AdamWScalars::Decay::kMask ? decay_masks_[i].contiguous() : at::Tensor();
  float* pp = p.data_ptr<float>();
  const float* pg = g.data_ptr<float>();
  float* pm = exp_avg_[i].data_ptr<float>();
  float* pv = exp_avg_sq_[i].data_ptr<float>();
  const float* pk = mask.defined() ? mask.data_ptr<float>() : nullptr;
  model::ParallelFor(0, p.numel(), model::kLoopGrain,
                     [&](int64_t b, int64_t e) { AdamWUpdate(pp, pg, pm, pv, pk, b, e, s); });
  // Written through pointers: tell autograd's version checks, as the in-place ops did.
  for (const at::Tensor* t : {&p, &exp_avg_[i], &exp_avg_sq_[i]}) {
    t->unsafeGetTensorImpl()->bump_version();
  }
}

// The same operations as StepOne, in the same order per element, over the whole group: each
// element sees the same IEEE operations, so the result is the same bit for bit.
void AdamW::StepFlat(Group& g, double lr, double bias1, double bias2_sqrt) {
  const at::Tensor& first = params_[g.members.front()].tensor;
  if (!g.work.defined()) g.work = at::empty({g.numel}, first.options().dtype(at::kFloat));
  std::vector<at::Tensor> grads;
  grads.reserve(g.members.size());
  for (size_t i : g.members) grads.push_back(params_[i].tensor.grad().reshape({-1}));
  at::cat_out(g.work, grads, 0);  // (numel,) the gradients
  grads.clear();
  const double b1 = options_.beta1, b2 = options_.beta2;
  g.exp_avg.mul_(b1).add_(g.work, 1.0 - b1);
  g.exp_avg_sq.mul_(b2).addcmul_(g.work, g.work, 1.0 - b2);
  at::sqrt_out(g.work, g.exp_avg_sq).div_(bias2_sqrt).add_(options_.eps);  // the denominator
  // 0 + (-lr / bias1) * m / denom: exactly the term addcdiv_ adds to the parameter.
  const at::Tensor zero = at::zeros({1}, g.work.options()).expand({g.numel});
  at::addcdiv_out(g.work, zero, g.exp_avg, g.work, -lr / bias1);
  for (size_t k = 0; k < g.members.size(); ++k) {
    const size_t i = g.members[k];
    at::Tensor p = params_[i].tensor;
    Decay(i, lr);
    p.add_(g.work.narrow(0, g.offsets[k], p.numel()).view(p.sizes()));
  }
}

void AdamW::StepFused(Group& g, double lr) {
  const at::Tensor& first = params_[g.members.front()].tensor;
  if (!g.steps.defined()) {
    g.steps = at::empty({static_cast<int64_t>(g.members.size())}, first.options());
  }
  g.steps.fill_(static_cast<double>(step_));
  for (const bool decayed : {true, false}) {
    std::vector<at::Tensor> p, grad, m, v, steps;
    for (size_t k = 0; k < g.members.size(); ++k) {
      const size_t i = g.members[k];
      if (decay_[i] != decayed) continue;
      p.push_back(params_[i].tensor);
      grad.push_back(params_[i].tensor.grad());
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      steps.push_back(g.steps.narrow(0, static_cast<int64_t>(k), 1).view({}));
    }
    if (p.empty()) continue;
    at::_fused_adamw_(p, grad, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1,
                      options_.beta2, decayed ? options_.weight_decay : 0.0, options_.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
}

void AdamW::Step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, static_cast<double>(step_)));
  for (Group& g : groups_) {
    bool complete = true;
    for (size_t i : g.members) complete = complete && params_[i].tensor.grad().defined();
    const bool cpu = g.exp_avg.device().is_cpu();
    const at::Tensor& first = params_[g.members.front()].tensor;
    if (mode_ == UpdateMode::kFused && complete && decay_masks_.empty() && first.is_cuda() &&
        first.scalar_type() == at::kFloat) {
      StepFused(g, lr);
      continue;
    }
    const bool flat = mode_ == UpdateMode::kFlat ||
                      ((mode_ == UpdateMode::kAuto || mode_ == UpdateMode::kFused) && !cpu);
    if (flat && complete) {
      StepFlat(g, lr, bias1, bias2_sqrt);
      continue;
    }
    const bool fp32_cpu = cpu && params_[g.members.front()].tensor.scalar_type() == at::kFloat;
    if (fp32_cpu && (mode_ == UpdateMode::kLoop || mode_ == UpdateMode::kAuto)) {
      for (size_t i : g.members) StepLoop(i, lr, bias1, bias2_sqrt);
      continue;
    }
    // One allocation per step, freed after it: held between steps it would sit on top of
    // backward's peak (+8 MiB on the 29M shape).
    const at::Tensor scratch = at::empty({g.largest}, g.exp_avg.options());
    for (size_t i : g.members) StepOne(i, lr, bias1, bias2_sqrt, scratch);
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

at::Tensor ClipGradNormTensor(const std::vector<model::NamedTensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms, grads;
  for (const auto& p : params) {
    if (!p.tensor.grad().defined()) continue;
    grads.push_back(p.tensor.grad());
    norms.push_back(grads.back().norm(2).to(at::kFloat));
  }
  if (norms.empty()) return at::zeros({}, at::kFloat);
  at::Tensor total = at::stack(norms).norm(2);
  parallel::ClipToMaxNorm(grads, total, max_norm);
  return total;
}

double ClipGradNorm(const std::vector<model::NamedTensor>& params, double max_norm) {
  return ClipGradNormTensor(params, max_norm).item<double>();
}

}  // namespace tenax::train
