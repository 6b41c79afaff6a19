// Model weights inside a tenax checkpoint (docs/checkpoint_format.md): model.safetensors holds
// the parameters under their canonical names (llama.h), train_state.json holds the resolved model
// shape under "model". Used by eval, export-hf and import-hf, which need weights but no optimizer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/checkpoint/store.h"
#include "tenax/checkpoint/train_state.h"
#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"

namespace tenax::model {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";

struct ModelCheckpoint {
  std::string dir;  // the step folder it came from
  int64_t step = 0;
  ModelSpec spec;
  std::vector<NamedTensor> params;           // CPU tensors, canonical names
  TrainState train_state;                    // its train_state.json
  std::map<std::string, std::string> files;  // every verified file, by name
};

// Full tensors of `stem` ("model" or "optimizer") from a checkpoint's verified files, whichever
// layout wrote them: STEM.safetensors (one process) or STEM-rankRRRRR-of-NNNNN.safetensors
// (one per rank, sliced). Empty when the checkpoint has no such files.
Result<std::vector<NamedTensor>> AssembleFromFiles(const std::map<std::string, std::string>& files,
                                                   const std::string& stem, const std::string& dir);
std::string RankFileName(const std::string& stem, int rank, int ranks);

// `path` is a step folder or a checkpoint folder (its newest checkpoint that verifies).
// Checksums are verified; a damaged file is named in the error.
Result<ModelCheckpoint> LoadModelCheckpoint(const std::string& path);
// The same from files already read and verified (e.g. gathered from memory replicas); `loaded`
// needs step, dir (for messages) and files.
Result<ModelCheckpoint> ModelCheckpointFromFiles(ckpt::LoadedCheckpoint loaded);

// Writes a weights-only checkpoint (step folder committed with a marker) into `folder`, with
// `state` (its step and model shape are set from `step` and `spec`).
Status WriteModelCheckpoint(const std::string& folder, int64_t step, const ModelSpec& spec,
                            const std::vector<NamedTensor>& params, TrainState state);

}  // namespace tenax::model
