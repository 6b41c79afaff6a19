#include "tenax/parallel/gradients.h"

namespace tenax::parallel {

void ClipToMaxNorm(const std::vector<at::Tensor>& grads, double norm, double max_norm) {
  if (max_norm <= 0) return;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  at::NoGradGuard no_grad;
  for (const at::Tensor& g : grads) g.mul_(coef);
}

}  // namespace tenax::parallel
