// Data parallelism over the mesh's two data axes:
//   replicate only (DDP):  every rank holds all parameters; gradients are all-reduced.
//   shard (FSDP / ZeRO-3): all parameters, viewed as one flat fp32 vector padded to a multiple of
//                          the shard degree, are split into equal contiguous shards. Between steps
//                          a rank holds only its shard of parameters, gradients and optimizer
//                          state. Gather() all-gathers the full parameters for forward and
//                          backward; ReduceGradients() reduce-scatters the gradients back to
//                          shards and Release() frees the gathered copy.
//   both (HSDP):           sharded within a replica, gradient shards all-reduced across replicas.
// Averaging: every rank's loss is a mean over an equal number of tokens, so the global mean's
// gradient is the sum of the ranks' gradients divided by the data-parallel degree.
// Contract: every rank calls the methods in the same order (they run collectives).
// Non-goals (yet): per-block gathering with prefetch and re-gathering in backward, which needs
// autograd hooks; bucketed overlap of reduction with backward. See docs/parallelism.md.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"

namespace tenax::parallel {

// Where each parameter sits in the flat vector, and which part of it this rank owns.
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

class DataParallel {
 public:
  // `shard` and `replicate` are this rank's groups along the two data axes (size 1 = absent).
  // Takes the model's current (identical on every rank) parameters as the starting point.
  DataParallel(model::Llama& model, Communicator& shard, Communicator& replicate);
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  bool sharded() const { return shard_.size() > 1; }
  int shard_rank() const { return shard_.rank(); }
  int shard_count() const { return shard_.size(); }
  int replica_index() const { return replicate_.rank(); }
  int dp_degree() const { return shard_.size() * replicate_.size(); }
  const FlatLayout& layout() const { return layout_; }
  // The tensors the optimizer updates: the model's parameters (DDP) or this rank's flat shard.
  std::vector<model::NamedTensor>& optimizer_params() { return opt_params_; }
  // Per-element weight-decay masks for optimizer_params() (sharded only; empty otherwise).
  std::vector<at::Tensor> decay_masks() const;

  void Gather();           // full parameters into the model (FSDP); no-op for DDP
  void ReduceGradients();  // averaged gradients into optimizer_params()' .grad()
  void Release();          // drops the gathered parameters (FSDP)
  // Global L2 norm of the averaged gradients, then clipped to max_norm (0: no clipping).
  double ClipGradNorm(double max_norm);

  // This rank's [begin, end) of each parameter's flattened elements (sharded), as named 1-D
  // slices of `flat` (the shard or an optimizer-state tensor of the same shape).
  struct Slice {
    std::string name;
    int64_t begin = 0;
    int64_t end = 0;
    at::Tensor values;  // 1-D, end - begin elements
  };
  std::vector<Slice> Slices(const at::Tensor& flat) const;
  // Sets the whole state from full tensors (any source layout): parameters into the shard / the
  // model; `full_state` (name -> full tensor) into `flat_state` for an optimizer tensor.
  void LoadFull(const std::vector<model::NamedTensor>& full_params);
  at::Tensor ShardOf(const std::vector<model::NamedTensor>& full) const;

  // Bytes of parameters + gradients + AdamW state (2 tensors) this rank holds between steps.
  int64_t ResidentStateBytes() const;

 private:
  model::Llama& model_;
  Communicator& shard_;
  Communicator& replicate_;
  FlatLayout layout_;
  at::Tensor shard_param_;  // (shard_size) fp32, the master copy (sharded mode)
  std::vector<model::NamedTensor> opt_params_;
};

FlatLayout MakeFlatLayout(const std::vector<model::NamedTensor>& params, int shards);

}  // namespace tenax::parallel
