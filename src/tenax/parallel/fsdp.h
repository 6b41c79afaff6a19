// Data parallelism over this rank's part of the model (a ShardedLlama, i.e. after tensor and
// pipeline parallelism), along the mesh's two data axes:
//   replicate only (DDP): every rank keeps its parameters; gradients are all-reduced in one
//                         bucket per unit, issued from gradient hooks as soon as the block's
//                         backward is done (overlapping the blocks below), waited in FinishStep.
//   shard (FSDP/ZeRO-3):  parameters are grouped in units (one per transformer block, plus a root
//                         unit with the embedding, final norm and output). Each unit's parameters
//                         form one flat fp32 vector, padded to a multiple of the shard degree and
//                         split into equal contiguous shards; between steps a rank holds only its
//                         shard of parameters, gradients and optimizer state.
//                         Forward: a block's unit is all-gathered just before the block runs
//                         (the next block's gather is issued first, so it overlaps this block's
//                         compute) and freed right after (reshard_after_forward).
//                         Backward: a hook on the block's output fires when its gradient arrives,
//                         i.e. just before the block's backward; it re-gathers the unit (waiting
//                         for the prefetch issued one block earlier) and prefetches the previous
//                         block's unit. Hooks on the unit's parameters collect their gradients
//                         into a bucket; when the last one arrives the bucket's reduce-scatter is
//                         issued (non-blocking) and the unit is freed, so the reduction overlaps
//                         the backward of the blocks below. FinishStep waits for them all.
//                         The root unit stays gathered through the step (it is used at both ends).
//                         Gathers go straight into the unit's flat buffer (one flat
//                         all_gather_into_tensor), in options.param_dtype; gradients are summed
//                         into an fp32 bucket and reduce-scattered in fp32.
//                         Without reshard_after_forward (pipeline parallelism: each micro-batch
//                         would re-gather) every unit is gathered once per step and reduced at
//                         the end.
//   both (HSDP):          sharded within a replica; gradient shards all-reduced across replicas.
// Averaging: every rank's loss is a mean over an equal number of tokens, so the global mean's
// gradient is the sum of the ranks' gradients divided by the data-parallel degree.
// Tensor parallelism: parameters replicated over TP (norms, embedding, output) get partial
// gradients on each TP rank; FinishStep sums them over the TP group (on the shards).
// Expert parallelism (sharded mode, `expert_shard` given): a block's routed experts form a unit
// of their own ("layers.<i>.experts"), sharded over `expert_shard` (the data-parallel shard ranks
// holding the same experts) instead of the whole shard group, gathered and reduced together with
// the block's other unit. Their gradients already sum the tokens of every expert-parallel rank
// (the all-to-all's backward brings them), so the same 1 / dp averaging applies.
//
// Memory: gathered buffers are released by freeing their storage while autograd still refers to
// the parameter views, and re-filled in place for backward (the same trick as PyTorch FSDP).
// Streams (NCCL): collectives run on c10d's NCCL stream; waiting for one orders the compute
// stream after it (no host block). A buffer's storage is allocated on the compute stream before
// its gather is issued and freed there after the block that used it, i.e. after the compute
// stream has waited for the gather, so the caching allocator cannot hand it out while NCCL still
// writes it; inputs of collectives in flight are kept alive by the PendingCollective (and by
// c10d) until they are waited for.
// Contract: every rank of the shard/replicate groups calls the methods in the same order and runs
// the same forward/backward sequence (hooks issue collectives).
// Thread safety: one training thread.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tenax/parallel/communicator.h"
#include "tenax/parallel/sharded_llama.h"

namespace tenax::parallel {

// Where each parameter of a unit sits in its flat vector.
struct FlatLayout {
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0;  // into the flat vector
    int64_t numel = 0;
  };
  std::vector<Entry> entries;
  int64_t total = 0;       // sum of numel
  int64_t padded = 0;      // total rounded up to a multiple of the shard degree
  int64_t shard_size = 0;  // padded / shard degree
};
FlatLayout MakeFlatLayout(const std::vector<model::NamedTensor>& params, int shards);

struct FsdpOptions {
  bool reshard_after_forward = true;  // per-block gather/free; false for pipeline stages
  bool prefetch = true;               // issue the next unit's all-gather one block early
  // The dtype parameters are gathered in and the model computes with (sharded mode): fp32, or
  // bf16 (half the all-gather bytes and the gathered memory; torchtitan's param_dtype). Master
  // shards, gradient buckets, reduce-scatters and optimizer state stay fp32 either way.
  at::ScalarType param_dtype = at::kFloat;
  // Tests: flat units, gathers and reduce-scatters even over a shard group of one rank (the GPU
  // tests run FSDP's device code on one rank of NCCL).
  bool shard_single_rank = false;
  // Reduce each block's gradients from backward hooks, as soon as they exist (overlapping the
  // rest of backward; once per micro-batch). false: once per step, in FinishStep, so every rank
  // issues the same collectives however many micro-batches it ran (live recovery, whose ranks
  // run a lost rank's micro-batches too).
  bool reduce_in_backward = true;
  // Live recovery (needs reduce_in_backward = false): this rank's own gradients of the step, as
  // they were before any reduction across replicas, are kept from FinishStep until
  // ForgetKeptGradients (DDP: the unreduced .grad tensors it would otherwise free; sharded: a copy
  // of the shard's gradient summed over the shard group, a shard's size). A step whose reduction
  // across replicas failed can then run again adding only the samples dealt to this rank since
  // (AbandonStep(true), ResumeStep).
  bool keep_local_gradients = false;
};

// Sees this rank's own computation for silent-data-corruption checks (train/sdc_check.h): the
// weights each block computes with, the block's output, and every gradient bucket before its
// reduction, in the order they are reduced. It may change them in place (fault injection).
// Called on the training thread.
class ComputeObserver {
 public:
  virtual ~ComputeObserver() = default;
  // `gathered` (sharded): a copy of the block's unit just gathered, which nothing keeps beyond
  // its use (shown once per gather); otherwise (DDP) the rank's own parameters, the same tensors
  // every pass (shown before each forward of the block).
  virtual void OnBlockWeights(int64_t layer, const std::vector<at::Tensor>& weights,
                              bool gathered) = 0;
  virtual void OnBlockOutput(int64_t layer, const at::Tensor& output) = 0;
  // `flat`: unit `unit`'s local gradients (fp32, padded), about to be reduced.
  virtual void OnLocalGradients(const std::string& unit, const at::Tensor& flat) = 0;
};

class Fsdp final : public BlockHooks {
 public:
  // `shard` and `replicate`: this rank's groups along the two data axes (size 1 = absent).
  // Takes the model's current parameters (identical across the data-parallel ranks) as the
  // starting point and, when sharded, frees them. All references must outlive this object.
  // `expert_shard` (expert parallelism; null otherwise): the group that shards expert units.
  Fsdp(ShardedLlama& model, Communicator& shard, Communicator& replicate, FsdpOptions options,
       Communicator* expert_shard = nullptr);
  ~Fsdp() override;
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  bool sharded() const { return shard_.size() > 1 || options_.shard_single_rank; }
  int replica_index() const { return replicate_.rank(); }
  int dp_degree() const { return shard_.size() * replicate_.size(); }

  // Units: 0 is the root (may be empty on middle pipeline stages), then one per held block (two
  // under expert parallelism: the block, then its experts).
  struct Unit;
  int num_units() const { return static_cast<int>(units_.size()); }
  const FlatLayout& layout(int unit) const;
  const std::string& unit_name(int unit) const;  // "root", "layers.<i>" or "layers.<i>.experts"
  at::Tensor unit_shard(int unit) const;         // this rank's flat shard (sharded only)
  // The model's params() index of each entry of layout(unit).
  const std::vector<int>& param_indices(int unit) const;

  // The tensors the optimizer updates: one flat shard per unit ("fsdp.<unit>", sharded) or the
  // model's own parameters (DDP).
  std::vector<model::NamedTensor>& optimizer_params() { return opt_params_; }
  // Per-element weight-decay masks for optimizer_params() (sharded only; empty otherwise).
  std::vector<at::Tensor> decay_masks() const;

  void BeginStep();   // before the step's first forward
  void FinishStep();  // after the step's last backward: averaged gradients in optimizer_params()
  // After a failed collective: forgets the step's buckets and the reductions pending on the lost
  // group (their results are never waited for) and reshards, as at the start of a step. With
  // `keep` (and options.keep_local_gradients), this rank's own gradients of the step, kept by
  // FinishStep, stay for ResumeStep; returns whether there were any.
  bool AbandonStep(bool keep = false);
  // After BeginStep of the step abandoned with its gradients kept: puts them back, so that the
  // next backward passes add to them and FinishStep reduces the sum.
  void ResumeStep();
  // Drops what FinishStep kept (the step went through, or it cannot be resumed).
  void ForgetKeptGradients();
  // Silent-data-corruption checks: the observer (null: none), and replay, in which gradients are
  // observed and dropped, never reduced (FinishStep leaves none). Every rank of the groups
  // replays the same steps together: the gathers are still collectives.
  void SetObserver(ComputeObserver* observer) { observer_ = observer; }
  void SetReplay(bool replay) { replay_ = replay; }
  void GatherAll();   // every unit gathered (evaluation, checkpoint conversion)
  void ReleaseAll();  // ... and freed again

  // Flat shard of unit `u` (sharded) built from full-model tensors named like the model's params
  // (each is cut with the TP shard spec first) or "<prefix><param>" for optimizer state.
  at::Tensor ShardOf(int u, const std::vector<model::NamedTensor>& full,
                     const std::string& prefix = "") const;
  void LoadFull(const std::vector<model::NamedTensor>& full_params);
  // This rank's [begin, end) of each entry's flattened local (TP-shard) elements in `flat`
  // (unit u's shard or a tensor of its shape).
  struct Slice {
    int param = 0;  // model params() index
    int64_t begin = 0, end = 0;
    at::Tensor values;  // 1-D
  };
  std::vector<Slice> Slices(int u, const at::Tensor& flat) const;

  // Bytes of parameters + gradients + AdamW state (2 tensors) this rank holds between steps.
  int64_t ResidentStateBytes() const;

  // BlockHooks (called by the model).
  void BeforeBlock(int64_t layer) override;
  void AfterBlock(int64_t layer, const at::Tensor& output) override;

 private:
  void StartGather(Unit& u);
  void EnsureGathered(Unit& u);
  void Reshard(Unit& u);
  void HookGrad(Unit& u, size_t entry, const at::Tensor& param);  // OnParamGrad on each gradient
  void OnParamGrad(Unit& u, size_t entry, const at::Tensor& grad);
  at::Tensor FlatGrads(const Unit& u) const;  // (padded) the unit's .grad, zeros where absent
  void ReduceFromGrads(Unit& u);              // issue the reduction of the unit's accumulated .grad
  void WaitReduction(Unit& u);
  at::Tensor ObservedGrads(const Unit& u);  // FlatGrads, shown to the observer
  void DropGrads(Unit& u);                  // replay: the unit's gradients go nowhere
  // Sums each unit's TP-replicated ranges (Unit::tp_replicated) of `flats` over the TP group.
  void SumOverTp(const std::vector<std::pair<const Unit*, at::Tensor>>& flats);
  const std::vector<int>& UnitsOfLayer(int64_t layer) const;  // empty when not held

  // Constant after construction.
  ShardedLlama& model_;
  Communicator& shard_;
  Communicator& replicate_;
  const FsdpOptions options_;
  Communicator* const expert_shard_;              // null: experts stay in their block's unit
  std::vector<std::vector<int>> units_of_layer_;  // [layer] -> units (block, then experts)

  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<model::NamedTensor> opt_params_;
  bool in_step_ = false;
  ComputeObserver* observer_ = nullptr;
  bool replay_ = false;
};

}  // namespace tenax::parallel
