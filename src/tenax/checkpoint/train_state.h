// train_state.json, the one JSON file of a tenax checkpoint (docs/checkpoint_format.md), as a
// typed record: written by the trainer (train/train_checkpoint.h) and import-hf
// (model/model_checkpoint.h), read by resume, eval, export-hf and generate. Every field is read
// and written here and nowhere else; a missing or mistyped field is an error naming the file and
// the key. Torch-free. Not a goal: the tensors (they live in the safetensors files).
//
//   step               optimizer steps completed (0 for an imported model)
//   model              the resolved model shape (config/model_spec_json.h)
//   optimizer_step     } training checkpoints only (`training` below): AdamW's step count,
//   data.position      } the global sample cursor (data/loader.h), the batch the steps were
//   data.*_batch_size  } made with (global/local_batch_size, grad_accum_steps, data_parallel),
//   tokens_seen        } tokens trained, the CPU generator's state (hex) and the effective
//   rng.torch_cpu      } config (TOML)
//   config             }
//   layout             the parallel layout (also in the manifest), an object
//   loss_history       the loss-spike detector's window (train/loss_spike.h), when on
//   tokenizer          {"spec", "bos_id", "eos_id"} of the training text, when it was text
//   moe_expert_bias    sigmoid routers' biases, one row per layer, when the model has them
//   imported_from      the Hugging Face folder import-hf read
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/config/batch.h"
#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"

namespace tenax {

struct Config;

inline constexpr const char* kTrainStateFile = "train_state.json";

// The tokenizer of a run's training text, so that export-hf and generate find it.
struct TokenizerRecord {
  std::string spec;  // "tiktoken:PATH" | "hf:PATH" | "byte" | ... (data/tokenizer.h)
  std::optional<int64_t> bos_id;
  std::optional<int64_t> eos_id;
};

struct TrainState {
  int64_t step = 0;
  ModelSpec model;

  // A training checkpoint (as opposed to weights only) has the fields below up to `config`.
  bool training = false;
  int64_t optimizer_step = 0;
  int64_t data_position = 0;
  // The batch the steps were made with. Checkpoints from before it was recorded derive it from
  // their config and layout; all zero when neither tells.
  BatchShape batch{0, 0, 0, 0};
  int64_t tokens_seen = 0;
  std::string rng_torch_cpu;  // the CPU generator's state, hexadecimal
  std::string config_toml;    // empty when absent

  nlohmann::json layout = nlohmann::json::object();
  std::vector<double> loss_history;
  std::optional<TokenizerRecord> tokenizer;
  std::vector<std::vector<double>> moe_expert_bias;  // (n_layers, n_experts); empty: none
  std::string imported_from;

  // The text of train_state.json.
  std::string ToJson() const;
  // Parses `text`; `where` names the file in errors (e.g. runs/x/checkpoints/step_00000100).
  static Result<TrainState> Parse(const std::string& text, const std::string& where);

  // The config the checkpoint was written with; an error when it has none or it does not parse.
  Result<Config> SavedConfig() const;
  // The tokenizer spec of the training text: the record, or for checkpoints from before it the
  // config's (Brown corpus runs); empty when neither says.
  std::string TokenizerSpec() const;
};

}  // namespace tenax
