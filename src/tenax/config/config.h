// Loads a tenax TOML config into typed options (options.h), applying `--set section.key=value`
// overrides first, and validates every value once against the key table (keys.h). Unknown keys
// and bad values are errors that name the key, the value, what is allowed (and the closest key
// or value, for a typo) and where the value came from (the file and line, or the --set): a typo
// must never be silently ignored.
// Non-goal: knowing what a model preset contains (config/model_spec.h resolves those).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/run_paths.h"
#include "tenax/core/status.h"

namespace tenax {

// Reads FILE (may be empty: defaults only) and applies overrides in order.
Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides);
// Same, from text; `source_name` names the text in error messages.
Result<Config> ParseConfig(std::string_view toml_text, const std::vector<std::string>& overrides,
                           const std::string& source_name);
// TOML that ParseConfig reads back into the same Config (stored in run folders and checkpoints).
std::string ConfigToToml(const Config& config);
// `tenax config show`: every key of the table with its help, what it accepts and its default as
// comments, and its value in `config` (unset optional keys as comments), so that reading the
// text back gives `config` again. `title` is the first comment line.
std::string ConfigShowToml(const Config& config, const std::string& title);
// The key list of docs/config.md: one Markdown table per section.
std::string ConfigKeysMarkdown();

// The run folder a config trains in (job.dump_folder/job.name, checkpoint.folder inside it).
RunPaths RunPathsOf(const Config& config);

}  // namespace tenax
