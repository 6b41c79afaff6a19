// `tenax train`: builds data, model and optimizer from a Config, resumes from the newest good
// checkpoint when asked, runs the optimizer loop with gradient accumulation and clipping, evaluates
// and checkpoints on schedule, and reports progress. Single process today; the loop is written
// over "this rank's micro-batches" so data/tensor/pipeline parallel wrappers slot in (issue 3).
#pragma once

#include <optional>
#include <string>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax::train {

struct TrainSummary {
  std::string model_name;
  int64_t n_params = 0;
  int64_t first_step = 0;  // first step this process ran (> 1 when resumed)
  int64_t last_step = 0;
  double final_loss = 0;
  std::optional<double> final_val_loss;
  std::optional<double> entropy_rate_nats;  // synthetic data: the best achievable loss
  double tokens_per_s = 0;                  // averaged over this process's steps
  double flops_per_s = 0;
  std::optional<double> mfu;
  std::string run_dir;
  std::string checkpoint_dir;  // newest checkpoint written, if any
  std::string metrics_path;
  std::string tensorboard_dir;
};

Result<TrainSummary> Train(const Config& config);

}  // namespace tenax::train
