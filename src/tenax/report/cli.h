// `tenax report`: a run's HTML report and its summary, registered on the CLI (core/cli.h).
// Torch-free.
#pragma once

#include "tenax/core/cli.h"

namespace tenax::report {

// Adds the `report` subcommand to `app` and their runners to `commands`.
void AddCommands(CLI::App& app, cli::Commands& commands);

}  // namespace tenax::report
