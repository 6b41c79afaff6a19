// `tenax model` and `tenax config`: a model's size and FLOPs, the config keys and a config's
// effective values, registered on the CLI (core/cli.h). Torch-free.
#pragma once

#include "tenax/core/cli.h"

namespace tenax {

// Adds the `model` and `config` subcommands to `app` and their runners to `commands`.
void AddCommands(CLI::App& app, cli::Commands& commands);

}  // namespace tenax
