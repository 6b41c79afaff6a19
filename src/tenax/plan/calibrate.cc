#include "tenax/plan/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "tenax/plan/search.h"

namespace tenax::plan {
namespace {

constexpr double kLowerBound = 0.02, kUpperBound = 1.0;
// Coordinate descent zig-zags when efficiencies trade off (a slower GEMM looks like slower
// attention); sweeps stop early once a sweep no longer improves the error.
constexpr int kMaxSweeps = 40;
constexpr int kLineSearchSteps = 40;

double* Parameter(Efficiency* e, const std::string& name) {
  static const std::map<std::string, double Efficiency::*> kParams = {
      {"matmul", &Efficiency::matmul},
      {"attention", &Efficiency::attention},
      {"memory_bound", &Efficiency::memory_bound},
      {"fp8_matmul", &Efficiency::fp8_matmul},
      {"collective_nvlink", &Efficiency::collective_nvlink},
      {"allreduce_nvlink", &Efficiency::allreduce_nvlink},
      {"collective_network", &Efficiency::collective_network},
      {"comm_interference", &Efficiency::comm_interference}};
  auto it = kParams.find(name);
  return it == kParams.end() ? nullptr : &(e->*(it->second));
}

double RmsLogError(const std::vector<Measurement>& ms, const std::vector<double>& predicted) {
  double sum = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    const double e = std::log(predicted[i] / ms[i].tokens_per_s_per_gpu);
    sum += e * e;
  }
  return std::sqrt(sum / static_cast<double>(ms.size()));
}

Result<std::vector<double>> PredictAll(const std::vector<Measurement>& ms,
                                       const HardwareProfile& hw) {
  std::vector<double> out;
  for (const auto& m : ms) {
    TENAX_ASSIGN_OR_RETURN(double v, PredictTokensPerSecond(m, hw));
    out.push_back(v);
  }
  return out;
}

}  // namespace

Result<double> PredictTokensPerSecond(const Measurement& m, const HardwareProfile& hw) {
  SearchOptions o;
  o.gpus = m.gpus;
  o.fix = m.layout;
  o.top_k = 1;
  TENAX_ASSIGN_OR_RETURN(SearchResult r, SearchLayouts(m.workload, hw, o));
  if (r.best.empty()) {
    return InvalidArgument(
        fmt::format("measurement '{}': no layout the constraints allow fits on {} ({} evaluated)",
                    m.name, hw.name, r.evaluated));
  }
  return r.best.front().time.tokens_per_s_per_gpu;
}

Result<CalibrationResult> Calibrate(const std::vector<Measurement>& ms, const HardwareProfile& base,
                                    const std::vector<std::string>& parameters) {
  if (parameters.empty()) return InvalidArgument("--fit: name at least one efficiency");
  if (ms.size() < parameters.size()) {
    return InvalidArgument(
        fmt::format("fitting {} efficiencies needs at least as many measurements; got {}",
                    parameters.size(), ms.size()));
  }
  CalibrationResult r;
  r.fitted = base;
  r.parameters = parameters;
  for (const auto& p : parameters) {
    if (!Parameter(&r.fitted.eff, p)) {
      return InvalidArgument(
          fmt::format("--fit {}: unknown; fit any of matmul, attention, memory_bound, fp8_matmul, "
                      "collective_nvlink, allreduce_nvlink, collective_network, "
                      "comm_interference",
                      p));
    }
  }
  TENAX_ASSIGN_OR_RETURN(std::vector<double> before, PredictAll(ms, base));
  r.rms_log_error_before = RmsLogError(ms, before);

  Status failure;
  auto objective = [&](const HardwareProfile& hw) -> double {
    auto p = PredictAll(ms, hw);
    if (!p.ok()) {
      failure = p.status();
      return INFINITY;
    }
    return RmsLogError(ms, *p);
  };
  // Coordinate descent; each line search is a golden-section search in log space, where
  // efficiencies spread evenly (0.1 and 0.2 are as far apart as 0.4 and 0.8).
  const double phi = (std::sqrt(5.0) - 1.0) / 2.0;
  double previous = INFINITY;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    for (const auto& name : parameters) {
      // The attention and NVLink all-reduce figures are multipliers that may exceed 1.
      const double upper = name == "attention" || name == "allreduce_nvlink" ? 2.0 : kUpperBound;
      double a = std::log(kLowerBound), b = std::log(upper);
      HardwareProfile trial = r.fitted;
      double* x = Parameter(&trial.eff, name);
      auto f = [&](double log_v) {
        *x = std::exp(log_v);
        return objective(trial);
      };
      double c = b - phi * (b - a), d = a + phi * (b - a);
      double fc = f(c), fd = f(d);
      for (int i = 0; i < kLineSearchSteps; ++i) {
        if (fc < fd) {
          b = d;
          d = c;
          fd = fc;
          c = b - phi * (b - a);
          fc = f(c);
        } else {
          a = c;
          c = d;
          fc = fd;
          d = a + phi * (b - a);
          fd = f(d);
        }
      }
      *Parameter(&r.fitted.eff, name) = std::exp((a + b) / 2.0);
    }
    const double now = objective(r.fitted);
    if (!(now < previous - 1e-9)) break;
    previous = now;
  }
  if (!failure.ok()) return failure;
  TENAX_ASSIGN_OR_RETURN(std::vector<double> after, PredictAll(ms, r.fitted));
  r.rms_log_error_after = RmsLogError(ms, after);
  for (size_t i = 0; i < ms.size(); ++i) {
    r.rows.push_back({ms[i].name, ms[i].tokens_per_s_per_gpu, before[i], after[i]});
  }
  return r;
}

std::string CalibratedProfileToml(const CalibrationResult& r, const std::string& base_ref,
                                  const std::string& new_name, const std::string& command) {
  std::string out = fmt::format("# Written by: {}\n# Fitted {} from {} measurement(s):\n", command,
                                fmt::join(r.parameters, ", "), r.rows.size());
  for (const auto& row : r.rows) {
    out += fmt::format(
        "#   {}: measured {:.1f} tokens/s/GPU, before {:.1f} ({:+.1f}%), after "
        "{:.1f} ({:+.1f}%)\n",
        row.name, row.measured, row.before, 100.0 * (row.before / row.measured - 1), row.after,
        100.0 * (row.after / row.measured - 1));
  }
  out += fmt::format("# RMS log error: before {:.2f}%, after {:.2f}%.\n",
                     100.0 * r.rms_log_error_before, 100.0 * r.rms_log_error_after);
  out += fmt::format(
      "inherits = \"{}\"\nname = \"{}\"\ndescription = \"{} calibrated by tenax "
      "plan --calibrate\"\n\n[efficiency]\n",
      base_ref, new_name, r.fitted.name);
  HardwareProfile copy = r.fitted;
  for (const auto& p : r.parameters) {
    out += fmt::format("{} = {:.4f}\n", p, *Parameter(&copy.eff, p));
  }
  return out;
}

}  // namespace tenax::plan
