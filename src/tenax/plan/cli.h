// `tenax plan` and `tenax simulate`: registered on the CLI by apps/tenax.cc, implemented in
// src/tenax/plan/. Torch-free.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "tenax/core/status.h"

namespace tenax::plan {

// Adds the `plan` and `simulate` subcommands to `app`. The returned function runs whichever of
// them was parsed (returns std::nullopt-like Ok and sets *ran = false when neither was).
std::function<Status(bool* ran)> AddCommands(CLI::App& app);

}  // namespace tenax::plan
