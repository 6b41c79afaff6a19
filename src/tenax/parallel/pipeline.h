// Pipeline-parallel execution of a StageModel (stage_model.h): the layers are split evenly into p *
// v model stages (stage 0 also embeds the tokens, the last stage also runs the head and the loss),
// rank r of the pipeline group runs chunks c = 0..v-1 holding the stages the plan places there
// (c * p + r, or r and 2p - 1 - r in the V of zbv and dualpipev), and one Step runs a
// PipelinePlan (pipeline_schedule.h) over m micro-batches of a (B, T) batch, passing activations
// forward and their gradients backward (messages: below). A split backward's I computes
// only the stage input's gradient and its W the weight gradients (pipeline.cc, WeightGroup).
//
// The stage model may hold the whole model (LlamaStage, in tests: only the parameters of the
// rank's own stages then get gradients, owned_params()) or only the rank's stages
// (ShardedLlama, in training; train/parallel_model.h combines it with TP and FSDP). A tied output
// projection is owned by the first and the last stage; Step sums its two halves so both ranks
// hold the full gradient.
//
// Messages: sends and receives are both issued without waiting, in the order BuildPrograms
// (pipeline_schedule.h) gives every rank, which pairs them up without deadlock even where
// messages carry no tags (NCCL). A send is waited for at the end of the step; a receive by the
// compute that uses its message, so a transfer runs under the computes before it (DualPipeV's
// forward and backward of a pair each have their message in flight while the other computes).
//
// Non-goals: activation memory beyond what the schedule holds.
//
// Cross-process contract: every rank of `comm` calls Step with tensors of the same shape, in the
// same order; the executor issues the same Send/Recv pairs and one Broadcast per step on all
// ranks. Thread safety: one thread; the executor borrows the model and the communicator.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/pipeline_schedule.h"
#include "tenax/parallel/stage_model.h"

namespace tenax::parallel {

struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int microbatches = 1;
  int virtual_stages = 1;
  at::ScalarType compute_dtype = at::kFloat;
  // Barrier before and after the actions so that every rank's step_s spans the same interval
  // (the whole pipeline's makespan), which makes per-rank idle time comparable to the simulator.
  // Costs two barriers per step; off for training.
  bool barrier_for_timing = false;
  // Called inside every action's timed span, after its compute (tests inject a fixed sleep here
  // so compute dominates the noise of an oversubscribed CPU).
  std::function<void(const Action&)> on_action;
};

// One entry of a rank's step timeline. Times are seconds since the step started on this rank
// (after the optional start barrier), from a steady clock. On CUDA a compute span measures the
// host side (kernel launches) unless the on_action hook synchronizes.
struct TimelineEvent {
  StepType type = StepType::kCompute;
  Action action;  // for Send/Recv: the action whose input (Recv: its posting, and the wait
                  // before that action) or output (Send) moves
  int stage = 0;  // model stage of that action
  double start_s = 0;
  double end_s = 0;
};

struct StepTimeline {
  std::vector<TimelineEvent> events;  // in execution order
  double step_s = 0;       // wall clock of the step's actions (barrier to barrier if requested)
  double compute_s = 0;    // sum of compute spans
  double recv_s = 0;       // time spent posting receives and waiting for their messages
  double send_s = 0;       // time spent issuing sends
  int peak_in_flight = 0;  // max (micro-batch, chunk) activations held at once
  // Measured bubble, same definition as the simulator's: (step - compute) / compute.
  double idle_fraction() const { return (step_s - compute_s) / compute_s; }
};

struct PipelineStepResult {
  double loss = 0;  // mean cross-entropy over the batch (every rank gets it)
  StepTimeline timeline;
};

class PipelineExecutor {
 public:
  // Validates the layout (schedule vs p, m, v; layers divisible by p * v) and builds the plan.
  // `model` and `comm` (the pipeline group; rank = pipeline rank) must outlive the executor.
  static Result<std::unique_ptr<PipelineExecutor>> Create(StageModel& model, Communicator& comm,
                                                          PipelineOptions options);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // One forward + backward over `tokens` and `targets` (B, T) int64 on the model's device,
  // B % microbatches == 0. Gradients accumulate into the owned parameters' .grad as a plain
  // backward would (zero them between optimizer steps; several Steps without zeroing accumulate),
  // and equal those of model.Loss(tokens, targets) up to float rounding: each micro-batch's mean
  // loss is back-propagated scaled by 1 / m.
  // Errors: InvalidArgument for bad shapes (before any communication); Internal when libtorch or
  // the communicator fails mid-step, after which the ranks are out of step and the job must stop.
  Result<PipelineStepResult> Step(const at::Tensor& tokens, const at::Tensor& targets);
  // Forward only (no graph): the mean loss of (tokens, targets) on every rank. The stages run in
  // order, each receiving from the previous one; collective over the pipeline group.
  Result<double> EvalLoss(const at::Tensor& tokens, const at::Tensor& targets);

  const PipelinePlan& plan() const { return plan_; }
  // Layers [begin, end) of this rank's chunk c, for c in [0, v).
  const std::vector<LayerRange>& chunk_layers() const { return chunk_layers_; }
  // Indices into model.params() of the parameters this rank's stages use (and so gets gradients
  // for), in params() order.
  const std::vector<size_t>& owned_params() const { return owned_; }
  // The pipeline ranks whose stages use parameter `name` (two for a tied embedding when p > 1).
  std::vector<int> OwningRanks(const std::string& name) const;

 private:
  struct StepState;

  PipelineExecutor(StageModel& model, Communicator& comm, PipelineOptions options,
                   PipelinePlan plan, std::vector<LayerRange> stage_layers);
  std::optional<size_t> InputSlot(const Action& a) const;
  void RunCompute(StepState& st, const Action& a);
  void RunStep(StepState& st);
  void SumTiedEmbeddingGrad(const at::Tensor& grad_before);

  // Constant after construction.
  StageModel& model_;
  Communicator& comm_;
  const PipelineOptions options_;
  const PipelinePlan plan_;
  const std::vector<LayerRange> stage_layers_;  // [model stage]
  std::vector<LayerRange> chunk_layers_;        // [chunk] of this rank
  std::vector<size_t> owned_;
  std::vector<ProgramStep> program_;  // this rank's computes, sends and receives, in order
};

}  // namespace tenax::parallel
