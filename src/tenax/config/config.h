// Loads a tenax TOML config into typed options (options.h), applying `--set section.key=value`
// overrides first, and validates every value once. Unknown keys and bad values are errors that
// name the key, the value and what is allowed: a typo must never be silently ignored.
// Non-goal: knowing what a model preset contains (model/presets.h resolves those).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax {

// Reads FILE (may be empty: defaults only) and applies overrides in order.
Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides);
// Same, from text; `source_name` names the text in error messages.
Result<Config> ParseConfig(std::string_view toml_text, const std::vector<std::string>& overrides,
                           const std::string& source_name);
// TOML that ParseConfig reads back into the same Config (stored in run folders and checkpoints).
std::string ConfigToToml(const Config& config);

}  // namespace tenax
