// Test helper (tests only, header-only): a fresh folder under /tmp, removed when the object dies
// unless TENAX_KEEP_TEST_DIRS is set (to inspect what a failing test left behind).
#pragma once

#include <cstdlib>
#include <string>

#include "tenax/core/check.h"
#include "tenax/core/fs.h"

namespace tenax::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tenax-test-XXXXXX";
    TENAX_CHECK(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    if (std::getenv("TENAX_KEEP_TEST_DIRS") == nullptr) (void)LocalFs().RemoveAll(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return JoinPath(path_, name); }
  std::string operator/(const std::string& name) const { return Join(name); }
  // Writes `text` to `name` inside the folder and returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    TENAX_CHECK(LocalFs().WriteFileAtomic(Join(name), text).ok());
    return Join(name);
  }

 private:
  std::string path_;
};

}  // namespace tenax::testing
