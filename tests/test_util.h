// Helpers for cross-cutting tests: temp folders, running the tenax binary as a user would, and
// reading the files a run leaves behind. Paths come from ctest's environment (tests/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tenax/core/temp_dir.h"  // TempDir

namespace tenax::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

std::string SourceDir();     // $TENAX_SOURCE_DIR
std::string TenaxBinary();   // $TENAX_BINARY
std::string Python();        // $TENAX_PYTHON (Debian's python3 with python3-torch)

// Runs `command` through /bin/sh in `cwd`, capturing output.
CommandResult Run(const std::string& command, const std::string& cwd = ".");
// Same as Run; usable inside TEST bodies, where gtest's Test::Run hides the short name.
inline CommandResult RunCommand(const std::string& command, const std::string& cwd = ".") {
  return Run(command, cwd);
}
// Runs the tenax binary with `args` (already shell-quoted where needed) in `cwd`.
CommandResult RunTenax(const std::string& args, const std::string& cwd);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);
std::vector<nlohmann::json> ReadJsonl(const std::string& path);

}  // namespace tenax::testing
