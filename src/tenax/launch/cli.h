// `tenax launch`: start and supervise the ranks of a job on this node (and meet other nodes in
// etcd), registered on the CLI (core/cli.h). Torch-free.
#pragma once

#include "tenax/core/cli.h"

namespace tenax::launch {

// Adds the `launch` subcommand to `app` and their runners to `commands`.
void AddCommands(CLI::App& app, cli::Commands& commands);

}  // namespace tenax::launch
