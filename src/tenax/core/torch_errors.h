// The adapter between libtorch's exceptions and tenax's Status: libtorch throws c10::Error (and
// occasionally std::exception); callers at the library boundary wrap calls with TorchCall so that
// nothing above this layer has to know libtorch throws.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <utility>

#include "tenax/core/status.h"

namespace tenax {

template <typename F>
Status TorchCall(const std::string& what, F&& fn) {
  try {
    std::forward<F>(fn)();
    return Status::Ok();
  } catch (const c10::Error& e) {
    return Internal(what + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(what + ": " + e.what());
  }
}

}  // namespace tenax
