#include "tenax/train/step_model.h"

#include "tenax/train/adamw.h"

namespace tenax::train {

int64_t SingleProcessModel::ResidentStateBytes() const {
  int64_t numel = 0;
  for (const auto& p : model_.params()) numel += p.tensor.numel();
  return 4 * numel * static_cast<int64_t>(sizeof(float));  // weights, gradients, two moments
}

Result<double> SingleProcessModel::ForwardBackward(const at::Tensor& tokens,
                                                   const at::Tensor& targets, int micro_batches,
                                                   double share) {
  if (model::MoeState* moe = model_.moe()) moe->aux_grad_scale = share / micro_batches;
  at::Tensor loss = model_.Loss(tokens, targets, compute_dtype_);
  // Each micro-batch holds the same number of tokens, so the mean of means is the mean.
  at::Tensor scaled = loss / static_cast<double>(micro_batches);
  if (share != 1.0) scaled = scaled * share;
  scaled.backward();
  return loss.item<double>();
}

double SingleProcessModel::ClipGradNorm(double max_norm) {
  return train::ClipGradNorm(model_.params(), max_norm);
}

void SingleProcessModel::ZeroGrad() {
  for (auto& p : model_.params()) p.tensor.mutable_grad() = at::Tensor();
}

Result<double> SingleProcessModel::EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) {
  return model_.Loss(tokens, targets, compute_dtype_).item<double>();
}

}  // namespace tenax::train
