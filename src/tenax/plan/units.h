// Numbers with units as people type them on a command line ("16Mi" tokens, "54d",
// "0.04%/node-hour") and as the planner prints them back. Parsing returns InvalidArgument naming
// the flag and what was expected; formatting never fails. Non-goals: locale-aware formatting; units
// beyond those the planner and simulator need.
#pragma once

#include <cstdint>
#include <string>

#include "tenax/core/status.h"

namespace tenax::plan {

// "2048", "16Mi" (binary: Ki Mi Gi Ti), "15T" or "1.5e12" (decimal: K M G T P), "16,777,216".
// `what` names the flag in the error message. The value must be finite and >= 0.
Result<double> ParseCount(const std::string& text, const std::string& what);
// Same, but the value must be a whole number that fits in int64 and be > 0.
Result<int64_t> ParsePositiveInt(const std::string& text, const std::string& what);

// "90s", "5m", "5min", "2h", "54d", "1.5h", "1w"; a bare number is seconds. Returns seconds (>= 0).
Result<double> ParseDuration(const std::string& text, const std::string& what);

// Human forms: "3.1 h", "132.2 d", "45 s"; "16.8M"; "71.3 GiB".
std::string FormatDuration(double seconds);
std::string FormatCount(double value);
std::string FormatGiB(double bytes);
// Message sizes: "32 KiB", "1 MiB", "16 GiB" (binary units, as nccl-tests sweeps use).
std::string FormatBytes(double bytes);
// Whole numbers with thousands separators: "21,958,486".
std::string FormatThousands(double value);
// Dollars with thousands separators: "$1,234,567".
std::string FormatMoney(double dollars);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kHour = 3600.0;
constexpr double kDay = 86400.0;

}  // namespace tenax::plan
