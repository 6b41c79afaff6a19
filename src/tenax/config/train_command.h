// The `tenax train` command line (--config, --set), defined once: the tenax-torch CLI parses it
// to train, and `tenax launch` parses the same words after `--` to check the config and find the
// run folder before it starts any rank.
#pragma once

#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tenax {

struct TrainCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value, in order
};

// Adds --config and --set to a CLI11 (sub)command, filling `out` when it is parsed.
void AddTrainOptions(CLI::App& command, TrainCommand* out);
// Parses the words after `train` (e.g. {"--config", "c.toml", "--set", "a.b=1"}); a word the
// train command does not accept is InvalidArgument naming it.
Result<TrainCommand> ParseTrainCommand(const std::vector<std::string>& args);

}  // namespace tenax
