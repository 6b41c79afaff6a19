// `tenax plan` and `tenax simulate`: their flags, registered on the CLI (core/cli.h),
// implemented in src/tenax/plan/. Torch-free.
#pragma once

#include <CLI/CLI.hpp>

#include "tenax/core/cli.h"

namespace tenax::plan {

// Adds the `plan` and `simulate` subcommands to `app` and their runners to `commands`.
void AddCommands(CLI::App& app, cli::Commands& commands);

}  // namespace tenax::plan
