// `tenax plan`: parse the flags into a workload, a hardware profile and constraints, search, and
// print; or --validate / --calibrate. No modelling here (see cost_model.h, memory_model.h).
#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "tenax/core/fs.h"
#include "tenax/plan/calibrate.h"
#include "tenax/plan/commands.h"
#include "tenax/plan/report.h"
#include "tenax/plan/search.h"
#include "tenax/plan/units.h"
#include "tenax/plan/validate.h"

namespace tenax::plan {
namespace {

Status Validate() {
  TENAX_ASSIGN_OR_RETURN(std::vector<ValidationRow> rows, RunValidation({}));
  std::printf("%s", ValidationMarkdown(rows).c_str());
  int failed = 0;
  for (const auto& r : rows) failed += r.checked && !r.pass;
  if (failed > 0) return Internal(fmt::format("{} validation check(s) failed", failed));
  return Status::Ok();
}

Status CalibrateCommand(const PlanFlags& f) {
  TENAX_ASSIGN_OR_RETURN(HardwareProfile base, LoadHardwareProfile(f.gpu));
  std::vector<Measurement> all;
  for (const auto& path : f.calibrate) {
    TENAX_ASSIGN_OR_RETURN(std::vector<Measurement> ms, LoadMeasurements(path));
    all.insert(all.end(), ms.begin(), ms.end());
  }
  std::vector<std::string> params;
  std::stringstream ss(f.fit);
  for (std::string p; std::getline(ss, p, ',');) {
    if (!p.empty()) params.push_back(p);
  }
  TENAX_ASSIGN_OR_RETURN(CalibrationResult r, Calibrate(all, base, params));
  std::string command = "tenax plan";
  for (const auto& c : f.calibrate) command += " --calibrate " + c;
  command += " --gpu " + f.gpu + " --fit " + f.fit;
  const std::string toml = CalibratedProfileToml(r, f.gpu, base.name + "-calibrated", command);
  if (f.out.empty()) {
    std::printf("%s", toml.c_str());
  } else {
    TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(f.out, toml));
    std::printf("%s", toml.c_str());
    std::printf("# wrote %s; use it with --gpu %s\n", f.out.c_str(), f.out.c_str());
  }
  return Status::Ok();
}

}  // namespace

Status RunPlan(const PlanFlags& f) {
  if (f.validate) return Validate();
  if (!f.calibrate.empty()) return CalibrateCommand(f);
  if (f.model.empty() || f.gpus <= 0 || f.global_batch_tokens.empty()) {
    return InvalidArgument(
        "tenax plan needs --model, --gpus and --global-batch-tokens (or --validate, or "
        "--calibrate); e.g. tenax plan --model llama3-405b --gpus 16384 --gpu h100-sxm "
        "--seq-len 8192 --global-batch-tokens 16Mi");
  }
  int64_t config_seq = 0;
  TENAX_ASSIGN_OR_RETURN(ModelSpec spec, LoadPlanModel(f.model, &config_seq));
  const int64_t seq_len = f.seq_len > 0 ? f.seq_len : config_seq;
  if (seq_len <= 0) return InvalidArgument("--seq-len is required with a preset model");
  TENAX_ASSIGN_OR_RETURN(int64_t batch,
                         ParsePositiveInt(f.global_batch_tokens, "--global-batch-tokens"));
  TENAX_ASSIGN_OR_RETURN(Kernels kernels, ParseKernels(f.kernels));
  TENAX_ASSIGN_OR_RETURN(Workload w, MakeWorkload(spec, seq_len, batch, kernels));
  TENAX_ASSIGN_OR_RETURN(HardwareProfile hw, LoadHardwareProfile(f.gpu));

  SearchOptions o;
  o.gpus = f.gpus;
  o.top_k = f.top;
  if (!f.fix.empty()) {
    TENAX_ASSIGN_OR_RETURN(o.fix, ParseLayoutConstraints(f.fix));
  }
  TENAX_ASSIGN_OR_RETURN(SearchResult result, SearchLayouts(w, hw, o));

  PlanReport report;
  report.workload = &w;
  report.hardware = &hw;
  report.gpus = f.gpus;
  report.search = &result;
  report.price_per_gpu_hour = f.price_per_gpu_hour;
  if (!f.tokens.empty()) {
    TENAX_ASSIGN_OR_RETURN(report.tokens, ParseCount(f.tokens, "--tokens"));
  }
  if (!f.failure_rate.empty()) {
    if (!report.tokens) {
      return InvalidArgument("--failure-rate needs --tokens (the training run to put it on)");
    }
    FailureCosts fc;
    TENAX_ASSIGN_OR_RETURN(fc.rate, ParseFailureRate(f.failure_rate, hw.gpus_per_node));
    fc.gpus_per_node = hw.gpus_per_node;
    TENAX_ASSIGN_OR_RETURN(fc.checkpoint_cost,
                           ParseDuration(f.checkpoint_cost, "--checkpoint-cost"));
    TENAX_ASSIGN_OR_RETURN(fc.restart_cost, ParseDuration(f.restart_cost, "--restart-cost"));
    report.failures = fc;
  }
  // --explain shows the best layout, or, when none fits, the one needing the least memory and
  // how far over it is.
  std::string explain;
  if (f.explain && !result.best.empty()) {
    explain = ExplainText(w, hw, result.best.front());
  } else if (f.explain && !result.leanest_not_fitting.empty()) {
    explain = "does not fit: " + ExplainText(w, hw, result.leanest_not_fitting.front());
  }
  if (f.json) {
    nlohmann::json j = PlanJson(report);
    if (!explain.empty()) j["explain"] = explain;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", PlanText(report).c_str());
    if (!explain.empty()) std::printf("\n%s", explain.c_str());
  }
  if (result.best.empty()) {
    return InvalidArgument(
        fmt::format("no layout of {} on {} x {} fits in memory", w.model.name, f.gpus, hw.name));
  }
  return Status::Ok();
}

}  // namespace tenax::plan
