// Riding out etcd's brief unavailability in the node agent's operations (node_agent.h) and what
// it delegates to (checkpoint_mirror.h).
// Thread safety: none needed; the caller's operation decides.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "tenax/core/status.h"
#include "tenax/protocol/protocol.h"

namespace tenax::launch {

// etcd is briefly unavailable while a member is lost and a new leader is elected (about a second
// with default settings): retry what must not fail for that, for up to `budget_s`. Only
// Unavailable is retried; every operation retried here is safe to repeat (idempotent, or a
// compare-and-swap whose repeat after an unknown outcome is harmless).
template <typename F>
auto Retry(F fn, double budget_s = 30) -> decltype(fn()) {
  const double deadline = protocol::MonotonicNow() + budget_s;
  double pause = 0.1;
  for (;;) {
    auto r = fn();
    if (r.ok() || r.status().code() != StatusCode::kUnavailable ||
        protocol::MonotonicNow() + pause > deadline) {
      return r;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    pause = std::min(pause * 2, 1.0);
  }
}

}  // namespace tenax::launch
