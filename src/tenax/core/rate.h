// Counts per time window as users write them on the command line: "10/h", "0.5/min", "3/s".
// One grammar for every flag that takes one (`--inject poisson:crash=RATE`, `--restart-budget`).
// Non-goals: compound units ("/node-hour": the planner's failure rates, plan/failure.h).
#pragma once

#include <optional>
#include <string>

namespace tenax {

struct PerWindow {
  double count = 0;     // >= 0
  double window_s = 0;  // 3600, 60 or 1
  double per_second() const { return count / window_s; }
};

// nullopt when `text` is not N/h, N/min or N/s with a finite N >= 0.
std::optional<PerWindow> ParsePerWindow(const std::string& text);

}  // namespace tenax
