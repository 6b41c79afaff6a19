// ModelSpec <-> JSON, as stored in checkpoints (train_state.json "model") and printed by
// `tenax model --json`. Reading validates the fields so a hand-edited file fails clearly.
#pragma once

#include <nlohmann/json.hpp>

#include "tenax/config/model_spec.h"

namespace tenax {

nlohmann::json ModelSpecToJson(const ModelSpec& spec);
Result<ModelSpec> ModelSpecFromJson(const nlohmann::json& j);

}  // namespace tenax
