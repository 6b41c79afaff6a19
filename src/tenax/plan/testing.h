// Test helpers for plan/ (tests only): where the shipped hardware profiles are, and a temporary
// folder removed when the object dies.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "tenax/core/check.h"
#include "tenax/core/fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::plan::testing {

// $TENAX_SOURCE_DIR (ctest sets it), else the source tree the tests were built from.
inline std::string SourceDir() {
  if (const char* s = std::getenv("TENAX_SOURCE_DIR"); s && *s) return s;
#ifdef TENAX_SOURCE_DIR_DEFAULT
  return TENAX_SOURCE_DIR_DEFAULT;
#else
  return ".";
#endif
}

inline std::vector<std::string> HardwareDirs() {
  return {JoinPath(SourceDir(), "configs/hardware")};
}

using tenax::testing::TempDir;  // core/temp_dir.h

}  // namespace tenax::plan::testing
