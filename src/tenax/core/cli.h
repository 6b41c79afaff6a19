// How a module offers its subcommands to the `tenax` executable. Each module that has some gives
// a function, in its own cli.h, that declares its CLI11 subcommands and their flags and registers
// here, for each, the function that runs it; apps/tenax.cc only builds the app, parses, and runs
// the one parsed.
// A runner returns the process's exit code (launch passes its job's on) or an error Status, which
// main maps to its documented exit code (docs/exit_codes.md).
// Non-goal: the libtorch subcommands (train, eval, ...), which tenax-torch runs (apps/torch/).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "tenax/core/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tenax::cli {

// Runs a parsed subcommand: its exit code (0: success), or an error.
using Runner = std::function<Result<int>()>;

// A Status-returning runner as a Runner (exit code 0 on success).
inline Runner FromStatus(std::function<Status()> run) {
  return [run = std::move(run)]() -> Result<int> {
    TENAX_RETURN_IF_ERROR(run());
    return 0;
  };
}

class Commands {
 public:
  // `command` was added to the app by the caller; `run` runs it once parsed.
  void Add(CLI::App* command, Runner run) { commands_.emplace_back(command, std::move(run)); }
  // The runner of the subcommand that was parsed, or null when none of these was.
  const Runner* Parsed() const;

 private:
  std::vector<std::pair<CLI::App*, Runner>> commands_;
};

}  // namespace tenax::cli
