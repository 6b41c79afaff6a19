#include "tenax/core/rate.h"

#include <cmath>
#include <cstdlib>

namespace tenax {

std::optional<PerWindow> ParsePerWindow(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0) return std::nullopt;
  const std::string number = text.substr(0, slash);
  char* end = nullptr;
  const double n = std::strtod(number.c_str(), &end);
  if (*end != '\0' || !std::isfinite(n) || n < 0) return std::nullopt;
  const std::string unit = text.substr(slash + 1);
  const double window = unit == "h" ? 3600 : unit == "min" ? 60 : unit == "s" ? 1 : 0;
  if (window == 0) return std::nullopt;
  return PerWindow{n, window};
}

}  // namespace tenax
