// Gradient operations shared by every parallel layout (and the single-process trainer): clipping
// to a global norm already computed by the caller (each layout counts its norm differently).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/parallel/communicator.h"

namespace tenax::parallel {

// Scales `grads` in place by max_norm / (norm + 1e-6) when that is below 1, like
// torch.nn.utils.clip_grad_norm_; max_norm 0 disables clipping.
void ClipToMaxNorm(const std::vector<at::Tensor>& grads, double norm, double max_norm);

}  // namespace tenax::parallel
