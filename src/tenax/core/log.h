// Logging: plain lines on stderr, prefixed with the rank once ranks exist ("[rank 3] ...").
// Thread safety: each call writes one whole line under a mutex.
#pragma once

#include <fmt/format.h>

#include <string>

namespace tenax::log {

// Set once at start-up; -1 means single-process (no rank prefix).
void SetRank(int rank);
// A standby process before its assignment ("[standby in slot 4] ..."), until SetRank.
void SetStandby(int slot);
int Rank();
void Write(const std::string& level, const std::string& message);

template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... args) {
  Write("", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Warn(fmt::format_string<Args...> f, Args&&... args) {
  Write("warning: ", fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Error(fmt::format_string<Args...> f, Args&&... args) {
  Write("error: ", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tenax::log
