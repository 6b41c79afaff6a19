// Gradient operations shared by every parallel layout (and the single-process trainer): clipping
// to a global norm already computed by the caller (each layout counts its norm differently).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/parallel/communicator.h"

namespace tenax::parallel {

// Scales `grads` in place by min(1, max_norm / (norm + 1e-6)), like
// torch.nn.utils.clip_grad_norm_; max_norm 0 disables clipping. `norm` is a one-element tensor
// (any floating dtype); the coefficient is computed in fp64 and applied as a tensor multiply, so
// on an accelerator nothing is read back to the host. On CPU, where reading it costs nothing,
// a coefficient of 1 skips the multiply (the result is the same).
void ClipToMaxNorm(const std::vector<at::Tensor>& grads, const at::Tensor& norm, double max_norm);

}  // namespace tenax::parallel
