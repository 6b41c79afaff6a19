// Training state for tensor parallelism: this rank's shards of the parameters (tensor_parallel.h
// splits them), the loss over them, the gradient fix-ups TP needs after backward, the global
// gradient norm, and conversions to and from full tensors for checkpoints (any layout reads a
// checkpoint written from full tensors).
// Contract: every rank of the TP group calls the methods in the same order (collectives).
// Non-goals (yet): FSDP over TP shards; activation checkpointing inside TP blocks.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/tensor_parallel.h"

namespace tenax::parallel {

class TensorParallelModel {
 public:
  // Shards `full` (identical on every rank of the group) for this rank.
  TensorParallelModel(const ModelSpec& spec, const std::vector<model::NamedTensor>& full,
                      Communicator& tp, const at::Device& device);
  TensorParallelModel(const TensorParallelModel&) = delete;
  TensorParallelModel& operator=(const TensorParallelModel&) = delete;

  std::vector<model::NamedTensor>& params() { return params_; }  // local shards, canonical names
  // The full-batch mean loss (identical on every TP rank); backward it like an ordinary loss.
  at::Tensor Loss(const at::Tensor& tokens, const at::Tensor& targets, at::ScalarType dtype);
  // After backward: replicated parameters' gradients are partial sums over sequence shards.
  void FinishGradients();
  // Squared global L2 norm of the gradients, counting replicated parameters once.
  double GradNormSquared();
  // Full tensors of the parameters, or of per-parameter optimizer state named "<prefix><param>"
  // (all-gathers; every rank gets them).
  std::vector<model::NamedTensor> FullParams();
  std::vector<model::NamedTensor> FullState(const std::vector<model::NamedTensor>& local_state);
  // Local shards of full tensors named like params() (or "<prefix><param>" for state).
  std::vector<model::NamedTensor> Shard(const std::vector<model::NamedTensor>& full) const;
  void LoadFull(const std::vector<model::NamedTensor>& full_params);

 private:
  const ShardSpec& SpecFor(const std::string& param_name) const;

  ModelSpec spec_;
  Communicator& tp_;
  std::vector<ShardSpec> specs_;  // parallel to params_
  std::vector<model::NamedTensor> params_;
  model::RopeTable rope_;
  int64_t rope_len_ = 0;
  at::Device device_;
};

}  // namespace tenax::parallel
