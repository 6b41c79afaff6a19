// AdamW with decoupled weight decay (Loshchilov & Hutter), step-for-step identical to
// torch.optim.AdamW(foreach=False) so a reference run in Python can be compared bitwise-close.
// Weight decay applies to matrices (dim >= 2: projections and embeddings), never to norm gains,
// following GPT-2/nanoGPT practice. State (exp_avg, exp_avg_sq) is fp32, one pair per parameter
// in the model's order, so it checkpoints and (later) shards by parameter name.
//
// Layout (issue 17): the state of all parameters of one (device, dtype) group lives in two flat
// fp32 buffers, and each parameter's exp_avg/exp_avg_sq is a view into them, so checkpoints keep
// their per-parameter names while the update runs as a handful of large element-wise operations
// over the whole group instead of ~7 small ones (and one allocation) per parameter. The
// gradients are copied into a reusable flat buffer of the group (one concatenation), which then
// holds the denominator and the update in turn; each parameter receives its slice with one add_
// (and its weight decay with one more). A group with a missing gradient (a parameter autograd did
// not reach) falls back to the per-parameter loop for that step, which skips it as before. The
// result is bit-identical to the per-parameter loop on CPU (optim_test.cc keeps that loop as its
// reference). Nothing here reads a value back to the host.
//
// Non-goals: a hand-written kernel (the large ATen ops are vectorised and threaded already);
// making the parameters or their .grad views of one buffer (the model and FSDP own them).
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
  // The parameters of one device and dtype, in the order they appear in params_.
  struct Group {
    std::vector<size_t> members;     // indices into params_
    std::vector<int64_t> offsets;    // each member's first element in the flat buffers
    at::Tensor exp_avg, exp_avg_sq;  // (numel,) fp32; exp_avg_[i], exp_avg_sq_[i] are views
    at::Tensor work;  // (numel,) the parameters' dtype: gradients, then denominator, then update
    at::Tensor zero;  // (numel,) a 0 broadcast from one element (addcdiv_out's `self`)
  };
  // The per-parameter update of parameter i (the reference path, for groups missing a gradient).
  void StepOne(size_t i, double lr, double bias1, double bias2_sqrt);
  void StepGroup(Group& g, double lr, double bias1, double bias2_sqrt);
  void Decay(size_t i, double lr);

  // Constant after construction.
  OptimizerOptions options_;
  std::vector<model::NamedTensor> params_;        // aliases of the model's tensors
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;  // views into the groups' flat buffers
  std::vector<bool> decay_;
  std::vector<at::Tensor> decay_masks_;
  std::vector<Group> groups_;
  int64_t step_ = 0;
};

// Scales all gradients so their global L2 norm is at most `max_norm` (0: no clipping) and returns
// the norm before clipping (a 0-dim fp32 tensor on the gradients' device), as
// torch.nn.utils.clip_grad_norm_ does, without reading anything back to the host.
at::Tensor ClipGradNormTensor(const std::vector<model::NamedTensor>& params, double max_norm);
// The same, with the norm read back (the one read of the step, after the scaling is queued).
double ClipGradNorm(const std::vector<model::NamedTensor>& params, double max_norm);

}  // namespace tenax::train
