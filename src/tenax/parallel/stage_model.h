// What a pipeline stage (and FSDP) needs from "this rank's part of the model": the forward in
// pieces and the parameters it reads. Implemented by ShardedLlama (any TP degree, any subset of
// layers) and by LlamaStage (a whole model::Llama, for tests and single-stage use).
// Activations between pieces are this rank's sequence shard (B, T / sequence_shards(), C).
// Thread safety: none (one training thread).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/model/llama.h"

namespace tenax::parallel {

class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual const ModelSpec& spec() const = 0;
  virtual const at::Device& device() const = 0;
  // The parameters this rank holds, canonical names, canonical order (tok_embeddings first).
  virtual std::vector<model::NamedTensor>& params() = 0;
  virtual int64_t sequence_shards() const { return 1; }
  // tokens (B, T) -> (B, T / sequence_shards, C)
  virtual at::Tensor Embed(const at::Tensor& tokens, at::ScalarType compute_dtype) = 0;
  // layers [begin, end); (B, T / s, C) -> (B, T / s, C)
  virtual at::Tensor Blocks(const at::Tensor& h, int64_t begin, int64_t end) = 0;
  // Final norm, output projection, mean cross-entropy over the full (B, T) targets.
  virtual at::Tensor HeadLoss(const at::Tensor& h, const at::Tensor& targets) = 0;
};

// A whole model::Llama as a stage model (borrowed; must outlive this).
class LlamaStage final : public StageModel {
 public:
  explicit LlamaStage(model::Llama& model) : model_(model) {}
  const ModelSpec& spec() const override { return model_.spec(); }
  const at::Device& device() const override { return model_.device(); }
  std::vector<model::NamedTensor>& params() override { return model_.params(); }
  at::Tensor Embed(const at::Tensor& tokens, at::ScalarType dtype) override {
    return model_.Embed(tokens, dtype);
  }
  at::Tensor Blocks(const at::Tensor& h, int64_t begin, int64_t end) override {
    return model_.Blocks(h, begin, end);
  }
  at::Tensor HeadLoss(const at::Tensor& h, const at::Tensor& targets) override {
    return model_.HeadLoss(h, targets);  // chunked: no (B, T, V) logits
  }

 private:
  model::Llama& model_;
};

}  // namespace tenax::parallel
