#include "tenax/plan/failure.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <sstream>
#include <vector>

#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status RateError(const std::string& text, const std::string& why) {
  return InvalidArgument(fmt::format(
      "--failure-rate '{}': {}. Forms: 0.0004/node-hour, 0.04%/instance-hour, 2e-5/gpu-hour, "
      "1.5/node-day, or a reported count such as \"419 in 54d on 16384 gpus\"",
      text, why));
}

}  // namespace

static Result<FailureRate> ParseFailureRateImpl(const std::string& text, int64_t gpus_per_node) {
  const std::string t = Lower(text);
  FailureRate r;
  r.text = text;
  if (t.find(" in ") != std::string::npos) {
    // "<count> in <duration> on <n> gpus|nodes|instances"
    std::istringstream in(t);
    std::string count, in_word, duration, on_word, n, unit;
    in >> count >> in_word >> duration >> on_word >> n >> unit;
    if (in_word != "in" || on_word != "on" || unit.empty()) {
      return RateError(text, "expected '<count> in <duration> on <n> gpus|nodes'");
    }
    TENAX_ASSIGN_OR_RETURN(double failures, ParseCount(count, "failure count"));
    TENAX_ASSIGN_OR_RETURN(double seconds, ParseDuration(duration, "failure window"));
    TENAX_ASSIGN_OR_RETURN(double units, ParseCount(n, "cluster size"));
    if (seconds <= 0 || units <= 0) return RateError(text, "the window and size must be > 0");
    double nodes = 0;
    if (unit.rfind("gpu", 0) == 0)
      nodes = units / static_cast<double>(gpus_per_node);
    else if (unit.rfind("node", 0) == 0 || unit.rfind("instance", 0) == 0 ||
             unit.rfind("host", 0) == 0)
      nodes = units;
    else
      return RateError(text, "the cluster size must be in gpus or nodes");
    r.per_node_hour = failures / (seconds / kHour) / nodes;
    return r;
  }
  const size_t slash = t.find('/');
  if (slash == std::string::npos) return RateError(text, "missing the unit (e.g. /node-hour)");
  std::string number = t.substr(0, slash), unit = t.substr(slash + 1);
  double scale = 1;
  if (!number.empty() && number.back() == '%') {
    number.pop_back();
    scale = 0.01;
  }
  TENAX_ASSIGN_OR_RETURN(double value, ParseCount(number, "--failure-rate"));
  value *= scale;
  const size_t dash = unit.find('-');
  if (dash == std::string::npos) return RateError(text, "the unit must be like node-hour");
  const std::string who = unit.substr(0, dash), per = unit.substr(dash + 1);
  double per_hours = 0;
  if (per == "hour" || per == "h" || per == "hr")
    per_hours = 1;
  else if (per == "day" || per == "d")
    per_hours = 24;
  else
    return RateError(text, "the time unit must be hour or day");
  double per_nodes = 0;
  if (who == "node" || who == "instance" || who == "host")
    per_nodes = 1;
  else if (who == "gpu")
    per_nodes = 1.0 / static_cast<double>(gpus_per_node);
  else
    return RateError(text, "the rate must be per node, instance or gpu");
  r.per_node_hour = value / per_hours / per_nodes;
  return r;
}

Result<FailureRate> ParseFailureRate(const std::string& text, int64_t gpus_per_node) {
  auto r = ParseFailureRateImpl(text, gpus_per_node);
  // Errors from the number and duration parsers name only their piece; add the whole value.
  if (!r.ok() && r.status().message().find(text) == std::string::npos) {
    return RateError(text, r.status().message());
  }
  return r;
}

double JobMtbfSeconds(const FailureRate& rate, int64_t nodes) {
  const double per_hour = rate.per_node_hour * static_cast<double>(nodes);
  return per_hour > 0 ? kHour / per_hour : INFINITY;
}

double YoungInterval(double c, double m) { return std::sqrt(2.0 * c * m); }

double DalyInterval(double c, double m) {
  if (c >= 2.0 * m) return m;
  const double x = c / (2.0 * m);
  return std::sqrt(2.0 * c * m) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - c;
}

double DalyExpectedWallTime(double work, double tau, double c, double r, double m) {
  if (!std::isfinite(m)) return work + c * std::floor(work / tau);
  return m * std::exp(r / m) * std::expm1((tau + c) / m) * work / tau;
}

Result<double> CheckpointCostFromModel(const ModelSpec& model, const std::string& bandwidth,
                                       std::string* description) {
  std::string text = bandwidth;
  for (const char* suffix : {"B/s", "/s"}) {
    const std::string s(suffix);
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      text.resize(text.size() - s.size());
      break;
    }
  }
  TENAX_ASSIGN_OR_RETURN(const double bytes_per_s, ParseCount(text, "--checkpoint-bandwidth"));
  if (!(bytes_per_s > 0)) return InvalidArgument("--checkpoint-bandwidth must be > 0");
  const ParamCounts c = CountParams(model);
  const double bytes = 12.0 * static_cast<double>(c.total);
  const double seconds = bytes / bytes_per_s;
  if (description != nullptr) {
    *description = fmt::format(
        "{}: {} parameters{} x 12 B (fp32 weights, AdamW m and v) = {} per checkpoint at {}/s: "
        "{} stall",
        model.name, FormatCount(static_cast<double>(c.total)),
        model.moe.enabled() ? fmt::format(" (every expert; {} active per token)",
                                          FormatCount(static_cast<double>(c.active)))
                            : "",
        FormatBytes(bytes), FormatBytes(bytes_per_s), FormatDuration(seconds));
  }
  return seconds;
}

}  // namespace tenax::plan
