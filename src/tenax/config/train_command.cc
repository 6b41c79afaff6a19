#include "tenax/config/train_command.h"

#include <CLI/CLI.hpp>

namespace tenax {

void AddTrainOptions(CLI::App& command, TrainCommand* out) {
  command.add_option("--config,-c", out->config_path, "TOML config (see configs/)");
  command.add_option("--set", out->overrides,
                     "override a config value: section.key=value (repeatable)");
}

Result<TrainCommand> ParseTrainCommand(const std::vector<std::string>& args) {
  TrainCommand cmd;
  CLI::App app{"tenax train"};
  AddTrainOptions(app, &cmd);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(std::string("train: ") + e.what() +
                           " (tenax train accepts --config FILE and --set section.key=value)");
  }
  return cmd;
}

}  // namespace tenax
