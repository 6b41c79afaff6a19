// Test helper (tests only): a fresh directory under /tmp, removed when the object dies.
#pragma once

#include <cstdlib>
#include <string>

#include "tenax/core/check.h"
#include "tenax/core/fs.h"

namespace tenax::data::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tenax_data_test_XXXXXX";
    TENAX_CHECK(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { (void)LocalFs().RemoveAll(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return JoinPath(path_, name); }

 private:
  std::string path_;
};

}  // namespace tenax::data::testing
