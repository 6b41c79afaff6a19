// The batch of one optimizer step, resolved from [training] and the data-parallel degree:
//   global batch (sequences) = local_batch_size x grad_accum_steps x data-parallel ranks.
// With training.global_batch_size set, the global batch is the fixed quantity and gradient
// accumulation is derived from it, so the same config runs on any number of data-parallel ranks
// that divides it (torchtitan's global_batch_size). Without it, the global batch follows from the
// other three factors, as before.
//
// Resuming: a run's global batch is part of its trajectory. ResolveResumedBatch decides what a
// resumed run uses given the batch its checkpoint was trained with, and says why in log lines:
//   * global_batch_size set: that value (a change from the checkpoint is logged as deliberate);
//   * unset, only the number of data-parallel ranks differs: the checkpoint's global batch is
//     kept and accumulation re-derived (a 2-rank run resumed on 1 rank accumulates 2 micro-batches
//     instead of halving its batch), or an error naming every factor when it cannot be;
//   * unset, local_batch_size or grad_accum_steps edited: the new product, logged as deliberate.
// Torch-free and pure, so the planner and the trainer share it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax {

struct BatchShape {
  int64_t local = 0;          // sequences per micro-batch per data-parallel rank
  int64_t accum = 1;          // micro-batches per optimizer step
  int64_t data_parallel = 1;  // ranks that read different data (replicas x shards)
  int64_t global = 0;         // sequences per optimizer step: local * accum * data_parallel
};

// The batch of a fresh run. Fails, naming every factor, when global_batch_size is not a multiple
// of local_batch_size x data_parallel.
Result<BatchShape> ResolveBatch(const TrainingOptions& training, int64_t data_parallel);

// The batch of a run resumed from a checkpoint trained with `saved` (saved.global == 0: unknown,
// the fresh resolution applies). Appends one line per decision worth logging to *notes.
Result<BatchShape> ResolveResumedBatch(const TrainingOptions& training, int64_t data_parallel,
                                       const BatchShape& saved, std::vector<std::string>* notes);

// "8 sequences (local_batch_size 2 x grad_accum_steps 1 x 4 data-parallel ranks)"
std::string DescribeBatch(const BatchShape& b);

}  // namespace tenax
