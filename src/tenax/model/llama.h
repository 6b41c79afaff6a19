// A Llama 3 decoder (token embedding; N x [RMSNorm, GQA attention with RoPE, residual, RMSNorm,
// SwiGLU, residual]; final RMSNorm; output projection, tied or untied) whose parameters live in a
// flat, ordered list of named fp32 tensors. The flat list is the unit every later layer works on:
// the optimizer, checkpoints, HF interop and FSDP sharding (parallel/fsdp.h) all iterate it by
// name.
// Non-goals: parallelism (parallel/ wraps these functions), fused GPU kernels.
//
// Parameter names (tenax's canonical names, same as torchtitan's):
//   tok_embeddings.weight                (V, C)
//   layers.{i}.attention_norm.weight     (C)
//   layers.{i}.attention.wq.weight       (H*D, C)   wk, wv: (K*D, C)   wo: (C, H*D)
//   layers.{i}.ffn_norm.weight           (C)
//   layers.{i}.feed_forward.w1.weight    (F, C)     w3: (F, C)   w2: (C, F)
//   (MoE layers have layers.{i}.moe.* instead of feed_forward.*: model/moe.h)
//   norm.weight                          (C)
//   output.weight                        (V, C)     absent when tied to tok_embeddings
// wq/wk rows follow Meta's interleaved RoPE layout (see layers.h).
//
// Thread safety: none; one training thread owns a model.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"
#include "tenax/model/layers.h"
#include "tenax/model/moe.h"

namespace tenax::model {

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

// Activation checkpointing of one block (reentrant, like torch.utils.checkpoint with
// use_reentrant=True): runs (*fn)(x) without recording a graph, keeps only x, and re-runs (*fn)
// with gradients on during backward. `fn` must stay valid until the backward has run.
at::Tensor RecomputeInBackward(const std::function<at::Tensor(const at::Tensor&)>* fn,
                               const at::Tensor& x);

// One decoder layer's parameters: aliases of the tensors in `by_name` (the names above), bound
// once by the training model and by the decoder of model/generate.h.
struct LayerWeights {
  at::Tensor attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;
  bool is_moe = false;
  MoeWeights moe;  // MoE layers (w1, w2, w3 then undefined)
};
LayerWeights BindLayer(const ModelSpec& spec, int64_t layer,
                       const std::map<std::string, at::Tensor>& by_name);

class Llama {
 public:
  // What the parameters start as: drawn from the seed, or zeros (norms at 1) for a model whose
  // weights are about to be overwritten anyway (a checkpoint, a live peer's state), which skips
  // the draws (on the CPU: minutes at 8B).
  enum class Init { kRandom, kOverwritten };
  // Allocates the parameters on `device` (fp32), deterministically initialised from `seed`:
  // matrices ~ N(0, init_std), the residual-stream outputs (wo, w2) scaled by 1/sqrt(2 L) as in
  // GPT-2, norms at 1. Initialisation runs on the CPU generator so CPU and GPU start identical.
  Llama(ModelSpec spec, uint64_t seed, const at::Device& device, Init init = Init::kRandom);
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const at::Device& device() const { return device_; }
  std::vector<NamedTensor>& params() { return params_; }
  const std::vector<NamedTensor>& params() const { return params_; }
  // The expected (name, shape) list for `spec`, without allocating.
  static std::vector<std::pair<std::string, std::vector<int64_t>>> ParamShapes(
      const ModelSpec& spec);

  // tokens (B, T) int64 -> logits (B, T, V) fp32. `compute_dtype`: kFloat, kBFloat16 or kDouble.
  at::Tensor Logits(const at::Tensor& tokens, at::ScalarType compute_dtype = at::kFloat);
  // The forward pass in pieces, for pipeline stages: Logits(t) == Head(Blocks(Embed(t), 0, L)).
  at::Tensor Embed(const at::Tensor& tokens, at::ScalarType compute_dtype);  // -> (B, T, C)
  at::Tensor Blocks(const at::Tensor& h, int64_t begin, int64_t end);        // layers [begin, end)
  at::Tensor Head(const at::Tensor& h);  // final norm + output projection -> fp32 (B, T, V)
  // Final norm, output projection and mean cross-entropy against targets (B, T), chunked (see
  // fused_cross_entropy.h): the fp32 (B, T, V) logits are never materialised.
  at::Tensor HeadLoss(const at::Tensor& h, const at::Tensor& targets);

  // Mean next-token cross-entropy (nats) of logits(tokens) against targets (B, T). Computed by
  // HeadLoss: equal to cross_entropy(Logits(tokens), targets) up to summation order, without
  // ever holding the (B, T, V) logits.
  at::Tensor Loss(const at::Tensor& tokens, const at::Tensor& targets,
                  at::ScalarType compute_dtype = at::kFloat);

  // Activation checkpointing: "none" keeps every block's activations for backward; "full"
  // keeps only each block's input and recomputes the block during backward; "selective"
  // recomputes every second block (torchtitan's layer-frequency option), about half the saving
  // for half the extra compute. Gradients are identical in every mode.
  void SetActivationCheckpoint(const std::string& mode);
  // How the blocks' matmuls run (layers.h); the activations' dtype by default. MoE experts stay
  // in the activations' dtype.
  void SetBlockMatmul(BlockMatmul mm) { block_matmul_ = mm; }

  // Copies `values` (name -> tensor, any device/dtype convertible to fp32) into the parameters;
  // every parameter must be present with the right shape, and no extra names are allowed.
  Status LoadParams(const std::vector<NamedTensor>& values);
  // LoadParams' checks alone: every parameter present once with the right shape, nothing extra.
  Status CheckParams(const std::vector<NamedTensor>& values) const;
  // Frees the parameters' memory, keeping their names and shapes (zero-stride placeholders):
  // the model then only serves as a shape reference (distributed training holds its part in
  // parallel::ShardedLlama).
  void ReleaseParams();
  // Makes `tensors` (same order and shapes as params()) the parameters. Used when parameters are
  // rematerialised (FSDP gathers, finite-difference tests).
  void ReplaceParams(const std::vector<at::Tensor>& tensors);
  // Casts every parameter to `dtype` (kDouble for finite-difference tests).
  void CastParams(at::ScalarType dtype);
  // Routing statistics and balancing biases of the MoE layers; null for a dense model.
  MoeState* moe() { return moe_.get(); }

 private:
  using Layer = LayerWeights;  // aliases of tensors in params_
  void BindAliases();
  const RopeTable& Rope(int64_t seq_len);
  at::Tensor Block(const Layer& layer, const at::Tensor& h, const RopeTable& rope) const;

  ModelSpec spec_;
  at::Device device_;
  std::vector<NamedTensor> params_;
  at::Tensor tok_embeddings_, norm_, output_;
  std::vector<Layer> layers_;
  std::unique_ptr<MoeState> moe_;  // MoE models only
  RopeTable rope_;                 // cached for the longest sequence seen so far
  int64_t rope_len_ = 0;
  int checkpoint_every_ = 0;  // recompute block i in backward when (i + 1) % this == 0; 0: never
  BlockMatmul block_matmul_ = BlockMatmul::kComputeDtype;
  std::vector<std::function<at::Tensor(const at::Tensor&)>> block_fns_;  // one per layer
};

}  // namespace tenax::model
