#include "tenax/core/cli.h"

#include <CLI/CLI.hpp>

namespace tenax::cli {

const Runner* Commands::Parsed() const {
  for (const auto& [command, run] : commands_) {
    if (command->parsed()) return &run;
  }
  return nullptr;
}

}  // namespace tenax::cli
