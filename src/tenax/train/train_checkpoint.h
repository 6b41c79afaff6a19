// What a training checkpoint holds and how it is restored (docs/checkpoint_format.md):
//   model.safetensors      parameters (fp32, canonical names)
//   optimizer.safetensors  AdamW exp_avg.* / exp_avg_sq.*
//   train_state.json       step, optimizer step, data position, tokens seen, CPU RNG state,
//                          the resolved model shape and the config the run used
// Restoring all of it makes the resumed trajectory identical to an uninterrupted one.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tenax/checkpoint/store.h"
#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"
#include "tenax/train/adamw.h"

namespace tenax::train {

struct TrainProgress {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // training windows consumed (data/loader.h)
  int64_t tokens_seen = 0;
};

Status SaveTrainCheckpoint(ckpt::CheckpointStore& store, const TrainProgress& progress,
                           const model::Llama& model, const AdamW& optimizer,
                           const std::string& config_toml);

// Loads `step` from `store` into the model and optimizer. A weights-only checkpoint (no
// optimizer file, e.g. from import-hf) starts a fresh optimizer and data stream at step 0.
Result<TrainProgress> RestoreTrainCheckpoint(ckpt::CheckpointStore& store, int64_t step,
                                             model::Llama& model, AdamW& optimizer);

}  // namespace tenax::train
