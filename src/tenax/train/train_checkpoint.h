// What a training checkpoint holds and how it is restored (docs/checkpoint_format.md):
//   model weights        model.safetensors (one process / DDP) or, with FSDP, one
//                        model-rankRRRRR-of-NNNNN.safetensors per shard holding 1-D slices
//   optimizer state      optimizer.safetensors or optimizer-rank*.safetensors, likewise:
//                        exp_avg.<param> / exp_avg_sq.<param>
//   train_state.json     step, optimizer step, data position, tokens seen, CPU RNG state, the
//                        resolved model shape, the config and the parallel layout
// Restoring all of it makes the resumed trajectory identical to an uninterrupted one, and any
// layout reads any other's checkpoint (shards are reassembled by name, then re-split).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "tenax/checkpoint/store.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/data_parallel.h"
#include "tenax/parallel/tensor_parallel_model.h"
#include "tenax/train/adamw.h"

namespace tenax::train {

struct TrainProgress {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // training windows consumed (data/loader.h)
  int64_t tokens_seen = 0;
};

// What is being saved or restored. `dp` and `world` are null for a single process.
struct TrainTarget {
  model::Llama& model;
  AdamW& optimizer;
  parallel::DataParallel* dp = nullptr;
  parallel::Communicator* world = nullptr;
  // Tensor parallel: checkpoints hold full tensors gathered over the TP group (single-file
  // layout), so any layout can read them.
  parallel::TensorParallelModel* tp = nullptr;
  nlohmann::json layout = nlohmann::json::object();  // recorded in the manifest
  // Called (collectively) before anything is written, e.g. to bring pipeline stages' parameters
  // to every rank.
  std::function<void()> before_save;
};

// Collective when distributed: every rank calls it; rank 0 prepares and commits.
Status SaveTrainCheckpoint(ckpt::CheckpointStore& store, const TrainProgress& progress,
                           TrainTarget& target, const std::string& config_toml);

// Loads `step` from `store` into the target, whatever layout wrote it. A weights-only checkpoint
// (import-hf) starts a fresh optimizer and data stream at step 0.
Result<TrainProgress> RestoreTrainCheckpoint(ckpt::CheckpointStore& store, int64_t step,
                                             TrainTarget& target);

}  // namespace tenax::train
