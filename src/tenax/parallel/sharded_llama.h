// This rank's part of a Llama 3 model under tensor and pipeline parallelism: the TP shards
// (tensor_parallel.h) of the layers this rank's pipeline stages run, plus the embedding and/or
// the head when its stages include the first and/or the last. Nothing else is allocated, so
// parameter memory shrinks as 1 / (tp x pp). With tp = 1 and every layer owned it computes exactly
// what model::Llama computes (same operations, no extra copies), which the tests check bitwise.
//
// Activation checkpointing (none | selective | full) works inside TP blocks: the recomputation
// re-issues the block's sequence collectives in backward, in the same order on every TP rank.
// FSDP attaches BlockHooks to gather a block's parameters just before it runs and to learn when
// its backward starts (parallel/fsdp.h). Parameters are looked up by index at every call, so FSDP
// may swap params()[i].tensor between calls.
//
// Mixture-of-experts layers (model/moe.h) run on the sequence shard: the router, the experts and
// the shared experts are replicated over TP (each TP rank routes its own T/tp tokens, so their
// gradients are partial sums like the norms'), and under expert parallelism this rank holds only
// the experts [expert_begin, expert_end) (parallel/expert_parallel.h ships tokens to the others).
//
// Contract: the ranks of the TP group call every method in the same order with equal shapes.
// Context parallelism (SetContextParallel, parallel/context_parallel.h): the tokens given are
// this rank's part of each sequence (ContextShard's layout); RoPE rotates each by its global
// position and attention is ring attention over the CP group. The loss is the local tokens' mean.
// Non-goals: vocabulary-parallel embedding/output (replicated over TP).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/model/layers.h"
#include "tenax/model/llama.h"
#include "tenax/model/moe.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/stage_model.h"
#include "tenax/parallel/tensor_parallel.h"

namespace tenax::parallel {

// Which parts of the model this rank runs.
struct Ownership {
  std::vector<bool> layers;  // [n_layers]
  bool embed = true;         // tok_embeddings (stage 0)
  bool head = true;          // norm + output (last stage; a tied output reuses tok_embeddings)
  // MoE layers: the routed experts held here (expert parallelism), global indices.
  int64_t expert_begin = 0;
  int64_t expert_end = 0;
  static Ownership All(const ModelSpec& spec);
};

// Called around every block's forward (FSDP). `output` requires grad when a backward will run.
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void BeforeBlock(int64_t layer) = 0;
  virtual void AfterBlock(int64_t layer, const at::Tensor& output) = 0;
};

class ShardedLlama final : public StageModel {
 public:
  // `full`: the whole model's parameters (canonical names; identical on every rank, any device).
  // Only the owned ones are copied (and TP-split) onto `device`; `tp` must outlive this object.
  ShardedLlama(const ModelSpec& spec, const std::vector<model::NamedTensor>& full, Communicator& tp,
               Ownership ownership, const at::Device& device);
  ShardedLlama(const ShardedLlama&) = delete;
  ShardedLlama& operator=(const ShardedLlama&) = delete;

  const ModelSpec& spec() const override { return spec_; }
  const at::Device& device() const override { return device_; }
  std::vector<model::NamedTensor>& params() override { return params_; }
  // Parallel to params(): where each local tensor sits in the full one.
  const std::vector<ShardSpec>& shard_specs() const { return specs_; }
  const Ownership& ownership() const { return own_; }
  Communicator& tp() { return tp_; }
  int64_t sequence_shards() const override { return tp_.size(); }
  // Index into params() of `name`, or -1 when this rank does not hold it.
  int IndexOf(const std::string& name) const;

  void SetActivationCheckpoint(const std::string& mode);  // none | selective | full
  // How the blocks' matmuls run (model/layers.h); MoE experts stay in the activations' dtype.
  void SetBlockMatmul(model::BlockMatmul mm) { block_matmul_ = mm; }
  // Routing statistics, balancing biases and (set by the caller) the MoE runtime; null for a
  // dense model.
  model::MoeState* moe() { return moe_.get(); }
  void SetHooks(BlockHooks* hooks) { hooks_ = hooks; }
  // Context parallelism over `cp` (outlives this object; a group of one rank: off). Before the
  // first forward.
  void SetContextParallel(Communicator* cp);

  at::Tensor Embed(const at::Tensor& tokens, at::ScalarType compute_dtype) override;
  at::Tensor Blocks(const at::Tensor& h, int64_t begin, int64_t end) override;
  at::Tensor HeadLoss(const at::Tensor& h, const at::Tensor& targets) override;
  // The whole forward + loss; requires owning everything (no pipeline).
  at::Tensor Loss(const at::Tensor& tokens, const at::Tensor& targets, at::ScalarType dtype);

 private:
  at::Tensor Block(int64_t layer, const at::Tensor& h);
  const model::RopeTable& Rope(int64_t seq_len);

  // Constant after construction.
  const ModelSpec spec_;
  Communicator& tp_;
  const Ownership own_;
  const at::Device device_;
  std::vector<ShardSpec> specs_;  // parallel to params_
  // [layer] -> indices into params_ (empty when not held): the 6 attention-half parameters in
  // kLayerParams order, then w1, w2, w3 (dense) or the router, (w1, w2, w3) per held expert and
  // the shared w1, w2, w3 (MoE).
  std::vector<std::vector<int>> layer_index_;
  int embed_index_ = -1, norm_index_ = -1, output_index_ = -1;
  std::vector<std::function<at::Tensor(const at::Tensor&)>> block_fns_;  // [layer], for recompute

  std::vector<model::NamedTensor> params_;
  std::unique_ptr<model::MoeState> moe_;  // MoE models only
  model::RopeTable rope_;  // cached for the longest sequence seen (the local one under CP)
  int64_t rope_len_ = 0;
  Communicator* cp_ = nullptr;  // context parallelism, when set and of more than one rank
  model::AttentionFn attend_;   // ring attention over cp_; empty: the default attention
  int checkpoint_every_ = 0;    // recompute block i when (i + 1) % this == 0; 0: never
  model::BlockMatmul block_matmul_ = model::BlockMatmul::kComputeDtype;
  BlockHooks* hooks_ = nullptr;
};

}  // namespace tenax::parallel
