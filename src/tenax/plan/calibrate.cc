#include "tenax/plan/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tenax/config/config.h"
#include "tenax/core/fs.h"
#include "tenax/plan/search.h"

namespace tenax::plan {
namespace {

// Steps whose timing includes warm-up (allocator growth, cuDNN autotuning) are skipped.
constexpr size_t kWarmupSteps = 2;
constexpr double kLowerBound = 0.02, kUpperBound = 1.0;
constexpr int kSweeps = 6;
constexpr int kLineSearchSteps = 40;

double* Parameter(Efficiency* e, const std::string& name) {
  static const std::map<std::string, double Efficiency::*> kParams = {
      {"matmul", &Efficiency::matmul},
      {"attention", &Efficiency::attention},
      {"memory_bound", &Efficiency::memory_bound},
      {"fp8_matmul", &Efficiency::fp8_matmul},
      {"collective_nvlink", &Efficiency::collective_nvlink},
      {"collective_network", &Efficiency::collective_network},
      {"dp_overlap", &Efficiency::dp_overlap}};
  auto it = kParams.find(name);
  return it == kParams.end() ? nullptr : &(e->*(it->second));
}

Result<std::vector<Measurement>> LoadRunFolder(const std::string& dir) {
  auto config = LoadConfig(JoinPath(dir, "config.toml"), {});
  if (!config.ok()) return config.status().WithContext("calibrating from run folder " + dir);
  const TrainingOptions& t = config->training;
  if (t.mixed_precision == "fp32" || t.device == "cpu") {
    return InvalidArgument(fmt::format(
        "{} trained in fp32 or on the CPU (training.mixed_precision = {}, device = {}); the "
        "planner models bf16 GPU training, so calibrate from a bf16 run on the GPU",
        dir, t.mixed_precision, t.device));
  }
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(JoinPath(dir, "metrics.jsonl")));
  std::vector<double> speeds;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("loss")) continue;
    if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number()) {
      speeds.push_back(j["tokens_per_s"].get<double>());
    }
  }
  if (speeds.size() <= kWarmupSteps) {
    return InvalidArgument(fmt::format(
        "{}/metrics.jsonl has {} timed steps; calibration needs more than {} (the first are "
        "warm-up): train longer",
        dir, speeds.size(), kWarmupSteps));
  }
  speeds.erase(speeds.begin(), speeds.begin() + kWarmupSteps);
  std::sort(speeds.begin(), speeds.end());
  Measurement m;
  m.name = dir;
  TENAX_ASSIGN_OR_RETURN(ModelSpec spec, ResolveModelSpec(config->model, 256));
  TENAX_ASSIGN_OR_RETURN(m.workload, MakeWorkload(spec, t.seq_len,
                                                  t.local_batch_size * t.seq_len * t.grad_accum_steps,
                                                  Kernels::kEager));
  m.gpus = 1;  // tenax's trainer runs on one device
  m.layout.tp = m.layout.cp = m.layout.pp = m.layout.dp = int64_t{1};
  m.layout.micro_batch = t.local_batch_size;
  m.layout.recompute = Recompute::kNone;
  m.layout.fp8 = false;
  m.tokens_per_s_per_gpu = speeds[speeds.size() / 2];  // median: robust to eval/checkpoint steps
  return std::vector<Measurement>{m};
}

Result<Measurement> ParseMeasurement(const nlohmann::json& j, const std::string& where) {
  auto field = [&](const char* key) -> Result<const nlohmann::json*> {
    if (!j.contains(key)) return InvalidArgument(fmt::format("{}: missing \"{}\"", where, key));
    return &j[key];
  };
  auto integer = [&](const char* key) -> Result<int64_t> {
    TENAX_ASSIGN_OR_RETURN(const nlohmann::json* v, field(key));
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return InvalidArgument(fmt::format("{}: \"{}\" must be an integer >= 1", where, key));
    }
    return v->get<int64_t>();
  };
  auto string = [&](const char* key) -> Result<std::string> {
    TENAX_ASSIGN_OR_RETURN(const nlohmann::json* v, field(key));
    if (!v->is_string()) return InvalidArgument(fmt::format("{}: \"{}\" must be a string", where, key));
    return v->get<std::string>();
  };
  Measurement m;
  TENAX_ASSIGN_OR_RETURN(m.name, string("name"));
  TENAX_ASSIGN_OR_RETURN(std::string model, string("model"));
  TENAX_ASSIGN_OR_RETURN(m.gpus, integer("gpus"));
  TENAX_ASSIGN_OR_RETURN(int64_t seq_len, integer("seq_len"));
  TENAX_ASSIGN_OR_RETURN(int64_t batch, integer("global_batch_tokens"));
  TENAX_ASSIGN_OR_RETURN(std::string layout, string("layout"));
  Kernels kernels = Kernels::kEager;
  if (j.contains("kernels")) {
    TENAX_ASSIGN_OR_RETURN(std::string k, string("kernels"));
    auto parsed = ParseKernels(k);
    if (!parsed.ok()) return parsed.status().WithContext(where);
    kernels = *parsed;
  }
  int64_t config_seq = 0;
  auto spec = LoadPlanModel(model, &config_seq);
  if (!spec.ok()) return spec.status().WithContext(where);
  auto w = MakeWorkload(*spec, seq_len, batch, kernels);
  if (!w.ok()) return w.status().WithContext(where);
  m.workload = *w;
  auto fix = ParseLayoutConstraints(layout);
  if (!fix.ok()) return fix.status().WithContext(where);
  m.layout = *fix;
  const bool has_tokens = j.contains("tokens_per_s_per_gpu"), has_tflops = j.contains("tflops_per_gpu");
  if (has_tokens == has_tflops) {
    return InvalidArgument(fmt::format(
        "{}: give exactly one of \"tokens_per_s_per_gpu\" and \"tflops_per_gpu\"", where));
  }
  const nlohmann::json& v = has_tokens ? j["tokens_per_s_per_gpu"] : j["tflops_per_gpu"];
  if (!v.is_number() || v.get<double>() <= 0) {
    return InvalidArgument(fmt::format("{}: the measured speed must be a number > 0", where));
  }
  m.tokens_per_s_per_gpu =
      has_tokens ? v.get<double>() : v.get<double>() * 1e12 / m.workload.flops_per_token;
  return m;
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

Result<std::vector<Measurement>> LoadMeasurements(const std::string& path) {
  if (LocalFs().Exists(JoinPath(path, "metrics.jsonl"))) return LoadRunFolder(path);
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(path));
  std::vector<Measurement> out;
  std::istringstream lines(text);
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, line_no);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return InvalidArgument(where + ": not a JSON object on one line");
    }
    TENAX_ASSIGN_OR_RETURN(Measurement m, ParseMeasurement(j, where));
    out.push_back(std::move(m));
  }
  if (out.empty()) return InvalidArgument(path + ": no measurements");
  return out;
}

Result<double> PredictTokensPerSecond(const Measurement& m, const HardwareProfile& hw) {
  SearchOptions o;
  o.gpus = m.gpus;
  o.fix = m.layout;
  o.top_k = 1;
  TENAX_ASSIGN_OR_RETURN(SearchResult r, SearchLayouts(m.workload, hw, o));
  if (r.best.empty()) {
    return InvalidArgument(fmt::format(
        "measurement '{}': no layout the constraints allow fits on {} ({} evaluated)", m.name,
        hw.name, r.evaluated));
  }
  return r.best.front().time.tokens_per_s_per_gpu;
}

Result<CalibrationResult> Calibrate(const std::vector<Measurement>& ms, const HardwareProfile& base,
                                    const std::vector<std::string>& parameters) {
  if (parameters.empty()) return InvalidArgument("--fit: name at least one efficiency");
  if (ms.size() < parameters.size()) {
    return InvalidArgument(fmt::format(
        "fitting {} efficiencies needs at least as many measurements; got {}", parameters.size(),
        ms.size()));
  }
  CalibrationResult r;
  r.fitted = base;
  r.parameters = parameters;
  for (const auto& p : parameters) {
    if (!Parameter(&r.fitted.eff, p)) {
      return InvalidArgument(fmt::format(
          "--fit {}: unknown; fit any of matmul, attention, memory_bound, fp8_matmul, "
          "collective_nvlink, collective_network, dp_overlap",
          p));
    }
  }
  TENAX_ASSIGN_OR_RETURN(std::vector<double> before, PredictAll(ms, base));
  r.rms_log_error_before = RmsLogError(ms, before);

  Status failure;
  auto objective = [&](const HardwareProfile& hw) {
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
  for (int sweep = 0; sweep < kSweeps; ++sweep) {
    for (const auto& name : parameters) {
      double a = std::log(kLowerBound), b = std::log(kUpperBound);
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
    out += fmt::format("#   {}: measured {:.1f} tokens/s/GPU, before {:.1f} ({:+.1f}%), after "
                       "{:.1f} ({:+.1f}%)\n",
                       row.name, row.measured, row.before, 100.0 * (row.before / row.measured - 1),
                       row.after, 100.0 * (row.after / row.measured - 1));
  }
  out += fmt::format("# RMS log error: before {:.2f}%, after {:.2f}%.\n",
                     100.0 * r.rms_log_error_before, 100.0 * r.rms_log_error_after);
  out += fmt::format("inherits = \"{}\"\nname = \"{}\"\ndescription = \"{} calibrated by tenax "
                     "plan --calibrate\"\n\n[efficiency]\n",
                     base_ref, new_name, r.fitted.name);
  HardwareProfile copy = r.fitted;
  for (const auto& p : r.parameters) {
    out += fmt::format("{} = {:.4f}\n", p, *Parameter(&copy.eff, p));
  }
  return out;
}

}  // namespace tenax::plan
