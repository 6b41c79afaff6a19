// AdamW with decoupled weight decay (Loshchilov & Hutter), step-for-step identical to
// torch.optim.AdamW(foreach=False) so a reference run in Python can be compared bitwise-close.
// Weight decay applies to matrices (dim >= 2: projections and embeddings), never to norm gains,
// following GPT-2/nanoGPT practice. State (exp_avg, exp_avg_sq) is fp32, one pair per parameter
// in the model's order, so it checkpoints and (later) shards by parameter name.
// Thread safety: none.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"

namespace tenax::train {

class AdamW {
 public:
  // `decay_masks` (optional, one per parameter, same shape, 1 = decay, 0 = not) replaces the
  // dim >= 2 rule; FSDP's flat shards mix matrices and norm gains in one tensor.
  AdamW(const OptimizerOptions& options, const std::vector<model::NamedTensor>& params,
        std::vector<at::Tensor> decay_masks = {});

  // One update with learning rate `lr` using each parameter's .grad().
  void Step(double lr);
  int64_t step_count() const { return step_; }

  // exp_avg.<name> and exp_avg_sq.<name> for every parameter, plus the step count.
  std::vector<model::NamedTensor> StateTensors() const;
  Status LoadState(const std::vector<model::NamedTensor>& state, int64_t step_count);

 private:
  OptimizerOptions options_;
  std::vector<model::NamedTensor> params_;  // aliases of the model's tensors
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<bool> decay_;
  std::vector<at::Tensor> decay_masks_;
  int64_t step_ = 0;
};

// Scales all gradients so their global L2 norm is at most `max_norm` (0: no clipping) and returns
// the norm before clipping, as torch.nn.utils.clip_grad_norm_ does.
double ClipGradNorm(const std::vector<model::NamedTensor>& params, double max_norm);

}  // namespace tenax::train
