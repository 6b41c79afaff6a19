// The trained model as the training loop sees it: one interface for a single process
// (SingleProcessModel, the whole model::Llama) and for any parallel layout (ParallelModel), so
// the loop has no branch on which one it drives.
// The step, in this order (every rank calls every method in the same order: collectives):
//   BeginStep, ForwardBackward per accumulated micro-batch, FinishStep (every gradient
//   reduction), ClipGradNorm, the optimizer on optimizer_params(), ZeroGrad.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/model/llama.h"

namespace tenax::train {

class StepModel {
 public:
  virtual ~StepModel() = default;

  // The tensors the optimizer updates (this rank's shards under a parallel layout).
  virtual std::vector<model::NamedTensor>& optimizer_params() = 0;
  // Per optimizer parameter, which elements get weight decay; empty: decided by name (AdamW).
  virtual std::vector<at::Tensor> decay_masks() const = 0;
  // Parameters + gradients + optimizer state this rank keeps resident, in bytes.
  virtual int64_t ResidentStateBytes() const = 0;

  virtual void BeginStep() = 0;
  // One micro-batch (B, T): forward and backward; returns its mean loss. Gradients are scaled by
  // 1 / micro_batches so the step's gradient is the mean over them, and by `share` when these
  // are only part of a micro-batch's samples (live recovery spreads a lost rank's samples over
  // the others): share = their count over the micro-batch's, so the parts add up to it.
  virtual Result<double> ForwardBackward(const at::Tensor& tokens, const at::Tensor& targets,
                                         int micro_batches, double share = 1.0) = 0;
  virtual void FinishStep() = 0;
  // Global L2 norm of the gradients, then all of them scaled to max_norm (0: no clipping).
  virtual double ClipGradNorm(double max_norm) = 0;
  // Drops every gradient (the next step starts from none).
  virtual void ZeroGrad() = 0;
  // After a collective of the step failed (live recovery): drops the step's partial gradients
  // and any reduction still pending on the lost group, so the step can run again. With `keep`,
  // a model that kept this rank's own gradients of the step (before any reduction across
  // replicas) holds on to them and returns true: the step may then run again from BeginStep,
  // ResumeStep, and only the micro-batches it did not run yet.
  virtual bool AbandonStep(bool keep = false) {
    (void)keep;
    ZeroGrad();
    return false;
  }
  virtual void ResumeStep() {}
  // What AbandonStep could keep is dropped (the step went through, or cannot be resumed).
  virtual void ForgetKeptGradients() {}

  // Forward only: mean loss of (tokens, targets).
  virtual Result<double> EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) = 0;
  virtual void EndEval() = 0;  // frees what evaluation gathered

  // Mixture of experts (model/moe.h): the routing statistics and balancing biases of the layers
  // this rank runs; null for a dense model.
  virtual model::MoeState* moe_state() { return nullptr; }
  // Of the ranks holding each layer, how many count the routing of the same samples
  // (CollectMoeMetrics).
  virtual int moe_count_copies() const { return 1; }
};

// One process, no layout: the whole model::Llama.
class SingleProcessModel final : public StepModel {
 public:
  SingleProcessModel(model::Llama& model, at::ScalarType compute_dtype)
      : model_(model), compute_dtype_(compute_dtype) {}

  std::vector<model::NamedTensor>& optimizer_params() override { return model_.params(); }
  std::vector<at::Tensor> decay_masks() const override { return {}; }
  int64_t ResidentStateBytes() const override;
  void BeginStep() override {}
  Result<double> ForwardBackward(const at::Tensor& tokens, const at::Tensor& targets,
                                 int micro_batches, double share = 1.0) override;
  void FinishStep() override {}
  double ClipGradNorm(double max_norm) override;
  void ZeroGrad() override;
  Result<double> EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) override;
  void EndEval() override {}
  model::MoeState* moe_state() override { return model_.moe(); }

 private:
  model::Llama& model_;
  const at::ScalarType compute_dtype_;
};

}  // namespace tenax::train
