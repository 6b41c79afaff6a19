#include "tenax/plan/cli.h"

namespace tenax::plan {

std::function<Status(bool* ran)> AddCommands(CLI::App& app) {
  return [](bool* ran) {
    *ran = false;
    return Status::Ok();
  };
}

}  // namespace tenax::plan
