#include "tenax/parallel/gradients.h"

namespace tenax::parallel {

void ClipToMaxNorm(const std::vector<at::Tensor>& grads, const at::Tensor& norm, double max_norm) {
  if (max_norm <= 0 || grads.empty()) return;
  at::NoGradGuard no_grad;
  // fp64 as before, when the norm was a double: the same coefficient bit for bit. A NaN norm
  // gives a NaN coefficient (clamp keeps NaN), poisoning the gradients as torch does.
  const at::Tensor coef = at::clamp_max(max_norm / (norm.to(at::kDouble).reshape({}) + 1e-6), 1.0);
  if (coef.is_cpu()) {
    const double c = coef.item<double>();
    if (c >= 1.0) return;
    for (const at::Tensor& g : grads) g.mul_(c);
    return;
  }
  for (const at::Tensor& g : grads) g.mul_(coef);
}

}  // namespace tenax::parallel
