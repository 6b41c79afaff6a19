#include "tenax/plan/units.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "tenax/core/format.h"

namespace tenax::plan {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Splits "1.5e3Mi" into the number and the suffix; strtod alone would read "1.5e3" and stop.
bool SplitNumber(const std::string& text, double* number, std::string* suffix) {
  std::string digits;
  for (char c : text) {
    if (c != ',' && c != '_') digits += c;  // thousands separators people paste from papers
  }
  if (digits.empty()) return false;
  const char* begin = digits.c_str();
  char* end = nullptr;
  *number = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(*number)) return false;
  *suffix = Trim(std::string(end));
  return true;
}

}  // namespace

Result<double> ParseCount(const std::string& text, const std::string& what) {
  double v = 0;
  std::string suffix;
  if (!SplitNumber(Trim(text), &v, &suffix)) {
    return InvalidArgument(
        fmt::format("{} = '{}' is not a number (examples: 2048, 16Mi, 15T)", what, text));
  }
  static const std::vector<std::pair<std::string, double>> kSuffixes = {
      {"", 1.0},      {"K", 1e3},        {"k", 1e3},           {"M", 1e6},
      {"G", 1e9},     {"B", 1e9},        {"T", 1e12},          {"P", 1e15},
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  for (const auto& [s, scale] : kSuffixes) {
    if (suffix == s) {
      if (v < 0) return InvalidArgument(fmt::format("{} = '{}' must not be negative", what, text));
      return v * scale;
    }
  }
  return InvalidArgument(fmt::format(
      "{} = '{}': unknown suffix '{}'; use K M G T P (powers of 1000) or Ki Mi Gi Ti (powers of "
      "1024)",
      what, text, suffix));
}

Result<int64_t> ParsePositiveInt(const std::string& text, const std::string& what) {
  TENAX_ASSIGN_OR_RETURN(double v, ParseCount(text, what));
  if (v < 1 || v != std::floor(v) || v > 9.0e18) {
    return InvalidArgument(
        fmt::format("{} = '{}' must be a whole number >= 1 (it is {})", what, text, v));
  }
  return static_cast<int64_t>(v);
}

Result<double> ParseDuration(const std::string& text, const std::string& what) {
  double v = 0;
  std::string suffix;
  if (!SplitNumber(Trim(text), &v, &suffix) || v < 0) {
    return InvalidArgument(fmt::format(
        "{} = '{}' is not a duration (examples: 90s, 5m, 2h, 54d; a bare number is seconds)", what,
        text));
  }
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},       {"s", 1},       {"sec", 1},      {"m", 60},        {"min", 60},
      {"h", kHour},  {"hr", kHour},  {"hour", kHour}, {"hours", kHour}, {"d", kDay},
      {"day", kDay}, {"days", kDay}, {"w", 7 * kDay}, {"ms", 1e-3}};
  for (const auto& [u, scale] : kUnits) {
    if (suffix == u) return v * scale;
  }
  return InvalidArgument(
      fmt::format("{} = '{}': unknown time unit '{}'; use s, m, h, d or w", what, text, suffix));
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s)) return "inf";
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 2 * kHour) return fmt::format("{:.1f} min", s / 60);
  if (s < 2 * kDay) return fmt::format("{:.2f} h", s / kHour);
  return fmt::format("{:.1f} d", s / kDay);
}

std::string FormatCount(double v) {
  const double a = std::fabs(v);
  if (a >= 1e15) return fmt::format("{:.2f}P", v / 1e15);
  if (a >= 1e12) return fmt::format("{:.2f}T", v / 1e12);
  if (a >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}K", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) {
    bytes /= 1024;
    ++i;
  }
  return fmt::format("{:g} {}", std::round(bytes * 10) / 10, units[i]);
}

std::string FormatGiB(double bytes) { return tenax::FormatGiB(bytes, 1); }

std::string FormatThousands(double value) {
  if (!std::isfinite(value)) return "inf";
  std::string digits = fmt::format("{:.0f}", std::fabs(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (value < 0 && out != "0" ? "-" : "") + out;
}

std::string FormatMoney(double dollars) {
  if (!std::isfinite(dollars)) return "inf";
  return (dollars < 0 ? "-$" : "$") + FormatThousands(std::fabs(dollars));
}

}  // namespace tenax::plan
