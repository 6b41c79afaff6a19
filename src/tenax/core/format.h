// Numbers for people: durations, counts and parameter counts in the short forms every tenax
// command prints. Torch-free (the launcher and the planner print them too).
#pragma once

#include <string>

namespace tenax {

std::string FormatDuration(double seconds);  // "1h02m", "3m05s", "42s"
std::string FormatCount(double value);       // "12.3k", "4.56M", "1.20G"
std::string FormatParams(double count);      // "853.4k", "1.24B", "405.85B"
// Memory, always in GiB (2^30 bytes) so that every tenax output compares directly: "78.0 GiB",
// "0.012 GiB". `decimals` < 0: 1 decimal from 10 GiB, 2 from 1 GiB, 3 below.
std::string FormatGiB(double bytes, int decimals = -1);

}  // namespace tenax
