// Test helpers for plan/ (tests only): where the shipped hardware profiles are, and a temporary
// folder removed when the object dies.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "tenax/core/check.h"
#include "tenax/core/fs.h"

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

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tenax_plan_test_XXXXXX";
    TENAX_CHECK(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { (void)LocalFs().RemoveAll(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return JoinPath(path_, name); }
  std::string Write(const std::string& name, const std::string& text) const {
    TENAX_CHECK(LocalFs().WriteFileAtomic(Join(name), text).ok());
    return Join(name);
  }

 private:
  std::string path_;
};

}  // namespace tenax::plan::testing
