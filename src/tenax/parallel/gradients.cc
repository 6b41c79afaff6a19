#include "tenax/parallel/gradients.h"

namespace tenax::parallel {

void ClipToMaxNorm(const std::vector<at::Tensor>& grads, double norm, double max_norm) {
  if (max_norm <= 0) return;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  at::NoGradGuard no_grad;
  for (const at::Tensor& g : grads) g.mul_(coef);
}

void AllReduceGradients(const std::vector<at::Tensor>& grads, Communicator& group,
                        double divisor) {
  if (grads.empty() || (group.size() == 1 && divisor == 1.0)) return;  // nothing to do
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
  at::Tensor all = at::cat(flat);
  if (group.size() > 1) group.AllReduceSum(all);
  all.div_(divisor);
  int64_t offset = 0;
  for (const at::Tensor& g : grads) {
    g.copy_(all.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

}  // namespace tenax::parallel
