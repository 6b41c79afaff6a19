// Gradient operations shared by every parallel layout (and the single-process trainer): clipping
// to a global norm already computed by the caller (each layout counts its norm differently) and
// averaging gradients over a group through one flat buffer (one collective, not one per tensor).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/parallel/communicator.h"

namespace tenax::parallel {

// Scales `grads` in place by max_norm / (norm + 1e-6) when that is below 1, like
// torch.nn.utils.clip_grad_norm_; max_norm 0 disables clipping.
void ClipToMaxNorm(const std::vector<at::Tensor>& grads, double norm, double max_norm);

// Sums `grads` over `group` (skipped for a group of one), then divides them by `divisor`.
// Collective: every rank of the group passes tensors of the same shapes in the same order.
void AllReduceGradients(const std::vector<at::Tensor>& grads, Communicator& group,
                        double divisor);

}  // namespace tenax::parallel
