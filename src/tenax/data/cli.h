// `tenax prepare` and `tenax tokenize`: text into token shards, and token ids of text, registered
// on the CLI (core/cli.h). Torch-free.
#pragma once

#include "tenax/core/cli.h"

namespace tenax::data {

// Adds the `prepare` and `tokenize` subcommands to `app` and their runners to `commands`.
void AddCommands(CLI::App& app, cli::Commands& commands);

}  // namespace tenax::data
