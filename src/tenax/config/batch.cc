#include "tenax/config/batch.h"

#include <fmt/format.h>

namespace tenax {
namespace {

std::string Ranks(int64_t n) {
  return fmt::format("{} data-parallel rank{}", n, n == 1 ? "" : "s");
}

// Accumulation that turns `global` into micro-batches of `local` on `dp` ranks; `what` names where
// `global` came from in the error.
Result<int64_t> DeriveAccum(int64_t global, int64_t local, int64_t dp, const std::string& what) {
  const int64_t per_micro = local * dp;
  if (global % per_micro != 0 || global < per_micro) {
    return InvalidArgument(fmt::format(
        "{} ({} sequences) is not a multiple of training.local_batch_size ({}) x {} = {}, so "
        "gradient accumulation cannot be derived; choose a global batch that is a multiple of {}, "
        "or a local_batch_size that divides {} / {}{}",
        what, global, local, Ranks(dp), per_micro, per_micro, global, dp,
        global % dp != 0 ? fmt::format(" (impossible here: {} is not a multiple of {})", global, dp)
                         : ""));
  }
  return global / per_micro;
}

}  // namespace

std::string DescribeBatch(const BatchShape& b) {
  return fmt::format("{} sequences (local_batch_size {} x grad_accum_steps {} x {})", b.global,
                     b.local, b.accum, Ranks(b.data_parallel));
}

Result<BatchShape> ResolveBatch(const TrainingOptions& t, int64_t data_parallel) {
  if (t.local_batch_size < 1 || t.grad_accum_steps < 1 || data_parallel < 1 ||
      t.global_batch_size < 0) {
    return InvalidArgument(fmt::format(
        "training.local_batch_size ({}), grad_accum_steps ({}) and the data-parallel degree ({}) "
        "must be >= 1 and global_batch_size ({}) >= 0",
        t.local_batch_size, t.grad_accum_steps, data_parallel, t.global_batch_size));
  }
  BatchShape b;
  b.local = t.local_batch_size;
  b.data_parallel = data_parallel;
  if (t.global_batch_size == 0) {
    b.accum = t.grad_accum_steps;
    b.global = b.local * b.accum * data_parallel;
    return b;
  }
  if (t.grad_accum_steps != 1) {
    return InvalidArgument(fmt::format(
        "training.global_batch_size ({}) and training.grad_accum_steps ({}) are both set; with a "
        "global batch, accumulation is derived (global / (local_batch_size x data-parallel "
        "ranks)): remove grad_accum_steps",
        t.global_batch_size, t.grad_accum_steps));
  }
  TENAX_ASSIGN_OR_RETURN(b.accum, DeriveAccum(t.global_batch_size, b.local, data_parallel,
                                              "training.global_batch_size"));
  b.global = t.global_batch_size;
  return b;
}

Result<BatchShape> ResolveResumedBatch(const TrainingOptions& t, int64_t data_parallel,
                                       const BatchShape& saved, std::vector<std::string>* notes) {
  if (saved.global <= 0) return ResolveBatch(t, data_parallel);
  const bool elastic = data_parallel != saved.data_parallel;
  if (t.global_batch_size > 0) {
    TENAX_ASSIGN_OR_RETURN(BatchShape now, ResolveBatch(t, data_parallel));
    if (now.global != saved.global) {
      notes->push_back(fmt::format(
          "training.global_batch_size differs from the checkpoint's global batch: {} -> {}; a "
          "deliberate change, every step from here on sees {} sequences",
          DescribeBatch(saved), DescribeBatch(now), now.global));
    } else if (elastic) {
      notes->push_back(fmt::format("resumed on {} instead of {}: the global batch stays {}",
                                   Ranks(data_parallel), saved.data_parallel, DescribeBatch(now)));
    }
    return now;
  }
  const bool same_factors = t.local_batch_size == saved.local && t.grad_accum_steps == saved.accum;
  if (!same_factors) {
    TENAX_ASSIGN_OR_RETURN(BatchShape now, ResolveBatch(t, data_parallel));
    if (now.global != saved.global) {
      notes->push_back(fmt::format(
          "the global batch changes from the checkpoint's {} to {} (training.local_batch_size or "
          "grad_accum_steps edited): a deliberate change",
          DescribeBatch(saved), DescribeBatch(now)));
    }
    return now;
  }
  if (!elastic) return ResolveBatch(t, data_parallel);
  // Only the number of data-parallel ranks changed: the run keeps its global batch (the loss
  // trajectory continues as if nothing had happened) by accumulating more or fewer micro-batches.
  BatchShape b;
  b.local = t.local_batch_size;
  b.data_parallel = data_parallel;
  b.global = saved.global;
  Result<int64_t> accum =
      DeriveAccum(saved.global, b.local, data_parallel,
                  fmt::format("the checkpoint's global batch, {}, resumed on {},",
                              DescribeBatch(saved), Ranks(data_parallel)));
  if (!accum.ok()) {
    return InvalidArgument(accum.status().message() +
                           "; or set training.global_batch_size to change the global batch "
                           "deliberately");
  }
  b.accum = *accum;
  notes->push_back(fmt::format(
      "resumed on {} instead of {}: keeping the run's global batch of {} sequences with "
      "grad_accum_steps {} (was {}); set training.global_batch_size to change it deliberately",
      Ranks(data_parallel), saved.data_parallel, b.global, b.accum, saved.accum));
  return b;
}

}  // namespace tenax
