// AdamW with decoupled weight decay (Loshchilov & Hutter), step-for-step identical to
// torch.optim.AdamW(foreach=False) so a reference run in Python can be compared bitwise-close.
// Weight decay applies to matrices (dim >= 2: projections and embeddings), never to norm gains,
// following GPT-2/nanoGPT practice. State (exp_avg, exp_avg_sq) is fp32, one pair per parameter
// in the model's order, so it checkpoints and (later) shards by parameter name.
//
// Layout (issue 17): the state of all parameters of one (device, dtype) group lives in two flat
// fp32 buffers, and each parameter's exp_avg/exp_avg_sq is a view into them, so checkpoints keep
// their per-parameter names. How the update runs depends on the device (UpdateMode::kAuto):
//  - off the CPU (kFlat): the group's gradients are copied into one reusable flat buffer (one
//    concatenation), which then holds the denominator and the update in turn, so the moments,
//    the denominator and the update are six large element-wise operations over the whole group
//    instead of ~7 small launches (and one allocation) per parameter; each parameter receives
//    its slice with one add_ (and its weight decay with one more).
//  - on the CPU, fp32 (kLoop): per parameter, one pass of adamw_kernel.h over parameter,
//    gradient and moments, split over the intra-op threads (7 ATen passes before: 30 -> 14 ms a
//    step on the 29M shape, docs/performance.md).
//  - on the CPU, other dtypes (kPerTensor): the same operations per parameter on the views, the
//    denominator in one scratch buffer allocated once per step (the size of the largest
//    parameter). Measured on the 29M shape (docs/performance.md, "Optimizer"), a pass over the
//    whole 117 MB group streams every buffer through DRAM at each of the ~15 operations and is
//    slower than the old loop; per parameter (at most a few MB) the operations after the first
//    hit the cache, and what the old loop lost was allocating two fresh tensors (page faults) per
//    parameter per step.
//  - on a GPU with tenax's GPU paths on (kFused, training.fused_kernels): PyTorch's fused AdamW
//    kernel (what torch.optim.AdamW(fused=True) runs), one launch per group of decayed and of
//    undecayed parameters, reading and writing each parameter, gradient and moment once where
//    kFlat makes eight passes (measured on an H200: docs/performance.md, "GPU"). The same
//    formula; within a few fp32 ulps of kFlat (it interpolates the first moment with lerp).
//    Decay masks (FSDP's flat shards) and fp64 fall back to kFlat.
// The flat and per-tensor paths give the per-parameter loop's result bit for bit on CPU
// (optim_test.cc keeps that loop as its reference): every element sees the same IEEE operations
// in the same order. The one-pass loop gives its moments bit for bit and its parameters within
// an ulp per step (its square root is correctly rounded, ATen 2.11's vectorized one is not:
// adamw_kernel.h). A group with a
// missing gradient (a parameter autograd did not reach) takes the per-tensor path, which skips
// that parameter as before. Nothing here reads a value back to the host.
//
// Non-goals: making the parameters or their .grad views of one buffer (the
// model and FSDP own them).
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

  // How Step runs the update (see the file comment); the result is the same. kAuto: kLoop for
  // fp32 on the CPU, kPerTensor for other CPU dtypes, kFlat elsewhere. For tests and benchmarks.
  enum class UpdateMode { kAuto, kFlat, kPerTensor, kLoop, kFused };
  void set_update_mode(UpdateMode mode) { mode_ = mode; }

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
    int64_t numel = 0;
    int64_t largest = 0;  // numel of the largest member
    // kFlat's (numel,) fp32 scratch, allocated at its first step: the gradients, then the
    // denominator, then the update. (kPerTensor allocates its (largest,) denominator per step.)
    at::Tensor work;
    // kFused's step count, one fp32 element per member (the kernel takes a tensor each; they
    // are views of this one, set to the step in one fill).
    at::Tensor steps;
  };
  // The per-parameter update of parameter i, its denominator in `scratch` (>= its numel).
  void StepOne(size_t i, double lr, double bias1, double bias2_sqrt, const at::Tensor& scratch);
  void StepFlat(Group& g, double lr, double bias1, double bias2_sqrt);
  // kFused: the group's decayed and undecayed members, each set in one fused launch.
  void StepFused(Group& g, double lr);
  // The per-parameter update of parameter i in one pass (adamw_kernel.h); fp32 CPU tensors.
  void StepLoop(size_t i, double lr, double bias1, double bias2_sqrt);
  void Decay(size_t i, double lr);

  // Constant after construction.
  OptimizerOptions options_;
  std::vector<model::NamedTensor> params_;        // aliases of the model's tensors
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;  // views into the groups' flat buffers
  std::vector<bool> decay_;
  std::vector<at::Tensor> decay_masks_;
  std::vector<Group> groups_;
  UpdateMode mode_ = UpdateMode::kAuto;
  int64_t step_ = 0;
};

// Scales all gradients so their global L2 norm is at most `max_norm` (0: no clipping) and returns
// the norm before clipping (a 0-dim fp32 tensor on the gradients' device), as
// torch.nn.utils.clip_grad_norm_ does, without reading anything back to the host.
at::Tensor ClipGradNormTensor(const std::vector<model::NamedTensor>& params, double max_norm);
// The same, with the norm read back (the one read of the step, after the scaling is queued).
double ClipGradNorm(const std::vector<model::NamedTensor>& params, double max_norm);

}  // namespace tenax::train
