// This rank's model under the configured layout, built as one ordered recipe (torchtitan's
// apply_llama), with the reason for each step's place:
//   1. tensor parallel   ShardedLlama keeps this rank's TP shard of the layers it runs: the
//                        shapes every later step sees are the local ones.
//   2. pipeline          the layers of this rank's stages (chunks c * p + r), the embedding on
//                        stage 0 and the head on the last; nothing else is allocated.
//   3. act. checkpoint   inside the blocks, so recomputation also re-runs TP collectives.
//   3b. expert parallel  MoE layers keep only this rank's experts (those of its position in the
//                        expert-parallel group) and exchange tokens with all-to-alls inside the
//                        blocks (parallel/expert_parallel.h). After TP and PP because the expert
//                        group is made of data-parallel ranks of the same TP and PP coordinates
//                        (torchtitan borrows it from dp_shard too), so what it splits is the
//                        local layer; before FSDP, which must see the experts this rank keeps.
//   3c. context parallel  ShardedLlama's ring attention and RoPE positions over the CP group;
//                        ForwardBackward and EvalLoss cut each sequence into this rank's two
//                        chunks (parallel/context_parallel.h) and average the loss over the
//                        group. FSDP's shard group spans data_parallel_shard x context, so
//                        parameters are sharded over both and the gradients of the CP ranks
//                        (each of its own tokens) are summed like data-parallel ones.
//   4. data parallel     Fsdp over what remains (per-block units; DDP when the shard degree is
//                        1); last, because it shards the local tensors steps 1-3b produced. The
//                        experts form units of their own, sharded over the shard ranks that hold
//                        the same experts (data_parallel_shard / expert_parallel of them).
// Every combination whose product is the world size works (3D: replicate x shard x pp x tp).
// The step: BeginStep, ForwardBackward per accumulated micro-batch, FinishStep (all gradient
// reductions), ClipGradNorm, then the optimizer on optimizer_params().
// Checkpoints: every rank of the first replica writes its own pieces (1-D slices of TP blocks);
// parameters replicated over TP are written by TP rank 0 only, a tied embedding by stage 0 only.
// Contract: every rank calls every method in the same order (collectives).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"
#include "tenax/model/tensor_io.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/expert_parallel.h"
#include "tenax/parallel/fsdp.h"
#include "tenax/parallel/mesh.h"
#include "tenax/parallel/pipeline.h"
#include "tenax/parallel/sharded_llama.h"
#include "tenax/train/step_model.h"

namespace tenax::train {

struct ParallelGroups {  // this rank's group along each mesh axis (size 1 when absent)
  parallel::Communicator* world = nullptr;
  parallel::Communicator* replicate = nullptr;
  parallel::Communicator* shard = nullptr;
  parallel::Communicator* pp = nullptr;
  parallel::Communicator* tp = nullptr;
  // Context parallelism (null or one rank: off). `shard` then spans data_parallel_shard x
  // context (mesh.h's ShardGroupOf): FSDP shards over both, and sums their gradients.
  parallel::Communicator* cp = nullptr;
  // Expert parallelism (null when expert_parallel = 1): the expert-parallel group and the shard
  // ranks holding the same experts (mesh.h).
  parallel::Communicator* ep = nullptr;
  parallel::Communicator* expert_shard = nullptr;
};

// parallelism.fsdp_param_dtype: "fp32", "bf16", or "auto" (bf16 when the model computes in
// bf16 on a GPU, as torchtitan's mixed precision does; fp32 otherwise, which keeps CPU runs
// bit-identical to a single process).
Result<at::ScalarType> FsdpParamDtype(const std::string& setting, const at::Device& device,
                                      at::ScalarType compute_dtype);

class ParallelModel final : public StepModel {
 public:
  // `full`: the initial parameters of the whole model (same on every rank; only the parts this
  // rank holds are copied). The groups must outlive the object.
  // `live` (live recovery: a replica's samples may run on another replica): the same gradient
  // collectives on every rank whatever its number of micro-batches, this rank's own gradients
  // kept through a failed reduction across replicas (parallel::FsdpOptions::reduce_in_backward,
  // keep_local_gradients), and MoE routing counted within each replica (model/moe.h).
  // `sdc` (silent-data-corruption checks: another rank replays this rank's step): MoE routing
  // counted within each data-parallel rank's micro-batch, so that a replay depends on the weights
  // and its samples alone, not on what the other ranks computed meanwhile.
  static Result<std::unique_ptr<ParallelModel>> Create(
      const ModelSpec& spec, const std::vector<model::NamedTensor>& full, ParallelGroups groups,
      const ParallelismOptions& options, const at::Device& device, at::ScalarType compute_dtype,
      bool live = false, bool sdc = false);
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  std::vector<model::NamedTensor>& optimizer_params() override { return fsdp_->optimizer_params(); }
  std::vector<at::Tensor> decay_masks() const override { return fsdp_->decay_masks(); }
  int64_t ResidentStateBytes() const override { return fsdp_->ResidentStateBytes(); }
  int replicas() const { return groups_.replicate->size(); }
  model::MoeState* moe_state() override { return model_->moe(); }
  void SetBlockMatmul(model::BlockMatmul mm) { model_->SetBlockMatmul(mm); }
  // Every rank holds each of its stage's layers (all but the pipeline axis); live, only a
  // replica's count the same samples, and with silent-data-corruption checks only a
  // data-parallel rank's.
  int moe_count_copies() const override {
    return groups_.world->size() / groups_.pp->size() / moe_count_apart_;
  }

  void BeginStep() override;
  // One micro-batch (B, T) of this data-parallel rank: forward and backward; returns its mean
  // loss (every rank of the TP/PP/CP group gets the same number). Gradients are scaled by
  // 1 / micro_batches so the step's gradient is the mean over them (and by `share`: StepModel;
  // not with a pipeline, which scales the step's gradients as a whole).
  Result<double> ForwardBackward(const at::Tensor& tokens, const at::Tensor& targets,
                                 int micro_batches, double share = 1.0) override;
  void FinishStep() override;
  // Global L2 norm of the averaged gradients (every element of the model counted once), then
  // all of them scaled to max_norm (0: no clipping).
  double ClipGradNorm(double max_norm) override;
  void ZeroGrad() override;
  bool AbandonStep(bool keep = false) override;
  void ResumeStep() override { fsdp_->ResumeStep(); }
  void ForgetKeptGradients() override { fsdp_->ForgetKeptGradients(); }
  // Silent-data-corruption checks (train/sdc_check.h): parallel::Fsdp's observer and replay.
  void SetComputeObserver(parallel::ComputeObserver* observer) { fsdp_->SetObserver(observer); }
  void SetReplay(bool replay) { fsdp_->SetReplay(replay); }

  // Forward only: mean loss of (tokens, targets) (every rank of the TP/PP group gets it).
  Result<double> EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) override;
  void EndEval() override;  // frees what evaluation gathered

  // Checkpoint pieces this rank writes (empty when another rank writes the same values).
  std::vector<model::TensorSlice> ParamPieces();
  // Optimizer state (AdamW::StateTensors() over optimizer_params()) as pieces named
  // "<state>.<param>".
  std::vector<model::TensorSlice> StatePieces(const std::vector<model::NamedTensor>& state);
  // Sets the parameters from full tensors (any source layout).
  void LoadFull(const std::vector<model::NamedTensor>& full_params);
  // Optimizer state for optimizer_params() from full "<state>.<param>" tensors.
  std::vector<model::NamedTensor> ShardState(const std::vector<model::NamedTensor>& full_state,
                                             const std::vector<std::string>& prefixes);

 private:
  ParallelModel() = default;
  bool Writes(int param) const;  // does this rank write parameter `param`'s pieces?
  // Context parallelism: this rank's part of every sequence of x (B, T), and the mean of a loss
  // over the CP group (both the identity without it).
  at::Tensor LocalTokens(const at::Tensor& x) const;
  double ContextMean(double loss) const;
  // Pieces of `values`, a tensor laid out like optimizer parameter `opt_name`, named
  // "<prefix><param>" (the parameters this rank writes).
  void AppendPieces(const std::string& prefix, const std::string& opt_name,
                    const at::Tensor& values, std::vector<model::TensorSlice>* out);
  double CopiesWeight(int param) const;  // 1 / (ranks of the TP/PP group holding its values)

  ModelSpec spec_;
  ParallelGroups groups_;
  at::ScalarType compute_dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
  std::vector<std::vector<int64_t>> full_shapes_;  // [model_->params() index] global shape
  std::unique_ptr<parallel::ShardedLlama> model_;
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;
  std::unique_ptr<parallel::Fsdp> fsdp_;
  std::unique_ptr<parallel::Communicator> local_;   // the expert group when expert_parallel = 1
  std::unique_ptr<model::MoeRuntime> moe_runtime_;  // MoE models only
  int moe_count_apart_ = 1;  // data-parallel groups that count routing apart (live, sdc)
  int pipeline_microbatches_ = 1;
  std::vector<at::Tensor>
      norm_weights_;  // sharded: [optimizer param] (shard_size) fp64, on device_
  int micro_batches_ = 1;
};

}  // namespace tenax::train
