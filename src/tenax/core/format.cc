#include "tenax/core/format.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

namespace tenax {

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string FormatCount(double v) {
  if (v >= 1e12) return fmt::format("{:.2f}T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string FormatParams(double v) {
  std::string s = FormatCount(v);
  if (!s.empty() && s.back() == 'G') s.back() = 'B';  // parameters are counted in billions
  return s;
}

std::string FormatGiB(double bytes, int decimals) {
  const double gib = bytes / (1024.0 * 1024.0 * 1024.0);
  if (decimals < 0) decimals = gib >= 10 ? 1 : gib >= 1 ? 2 : 3;
  return fmt::format("{:.{}f} GiB", gib, decimals);
}

}  // namespace tenax
