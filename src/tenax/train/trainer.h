// `tenax train`, one rank's part: builds data, model and optimizer from a Config, resumes from
// the newest good checkpoint when asked, runs the optimizer loop with gradient accumulation and
// clipping, evaluates and checkpoints on schedule, and reports progress. Single process or any
// parallel layout (the loop drives a StepModel, so it has no branch on which). Inside, a Trainer
// object (trainer_internal.h; Setup in trainer_setup.cc, Run in trainer.cc) keeps setup, step,
// evaluation, save and finish as separate methods.
//
// Process-level concerns belong to the caller (the CLI): reading the launcher's context once
// (protocol/rank_context.h), the terminate handler and the launcher watch. What the launcher
// sees of a rank goes through the protocol module: heartbeats, flight records, the exit report
// (written by Train before the process groups are torn down, so the peers that die of this
// rank's failure are recognisably second), and fault injection hooks.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/parallel/dist_env.h"
#include "tenax/protocol/exit_report.h"
#include "tenax/protocol/rank_context.h"

namespace tenax::train {

struct TrainSummary {
  std::string model_name;
  int64_t n_params = 0;
  int64_t first_step = 0;  // first step this process ran (> 1 when resumed)
  int64_t last_step = 0;
  bool already_complete = false;  // the checkpoint was at the final step: nothing ran
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

// What a standby process (tenax launch --spares) sets up before it knows its rank, while it
// waits: its data source, opened from the config. A replacement started that way skips that part
// of its start-up, which its peers would train short-handed through.
struct Prepared;
// nullptr when it could not: the error is met again, and said, once the rank is assigned.
std::shared_ptr<Prepared> PrepareBeforeAssignment(const Config& config);

// Trains this rank. On failure, `reporter` has written the exit report (kind and cause) before
// this returns. `prepared`: from PrepareBeforeAssignment with the same config, or nullptr.
Result<TrainSummary> Train(const Config& config, const protocol::RankContext& context,
                           const parallel::DistEnv& env, const protocol::ExitReporter& reporter,
                           std::shared_ptr<Prepared> prepared = nullptr);

// A single process without a launcher (tests, benchmarks): Train with a default context.
Result<TrainSummary> Train(const Config& config);

}  // namespace tenax::train
