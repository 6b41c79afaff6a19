// `tenax plan`: parse the flags into a workload, a hardware profile and constraints, search, and
// print; or --validate / --calibrate. No modelling here (see cost_model.h, memory_model.h).
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <sstream>

#include "tenax/core/fs.h"
#include "tenax/plan/calibrate.h"
#include "tenax/plan/commands.h"
#include "tenax/plan/failure.h"
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

Result<bool> YesNo(const std::string& value, const char* flag) {
  if (value == "yes" || value == "true" || value == "on") return true;
  if (value == "no" || value == "false" || value == "off") return false;
  return InvalidArgument(fmt::format("{} = '{}': expected yes or no", flag, value));
}

// The model's shape and building blocks from --model and the shape / architecture flags.
Status BuildModel(const PlanFlags& f, ModelSpec* spec, Architecture* arch, std::string* name,
                  int64_t* config_seq) {
  ShapeOverrides o;
  auto set = [](int64_t v, std::optional<int64_t>* out) {
    if (v != 0) *out = v;
  };
  set(f.layers, &o.layers);
  set(f.hidden, &o.hidden);
  set(f.heads, &o.heads);
  set(f.kv_heads, &o.kv_heads);
  set(f.ffn, &o.ffn);
  set(f.vocab, &o.vocab);
  *config_seq = 0;
  std::optional<ModelSpec> base;
  if (!f.model.empty()) {
    TENAX_ASSIGN_OR_RETURN(ModelSpec m, LoadPlanModel(f.model, config_seq));
    base = m;
  }
  TENAX_ASSIGN_OR_RETURN(*spec, ApplyShape(base ? &*base : nullptr, o));
  if (f.arch == "gpt") {
    *arch = Architecture{false, true, true, true};
    spec->tie_embeddings = true;
  } else if (!f.arch.empty() && f.arch != "llama") {
    return InvalidArgument("--arch = '" + f.arch + "': expected llama or gpt");
  }
  if (!f.mlp.empty()) {
    if (f.mlp != "swiglu" && f.mlp != "gelu") {
      return InvalidArgument("--mlp = '" + f.mlp + "': expected swiglu or gelu");
    }
    arch->gated_mlp = f.mlp == "swiglu";
  }
  if (!f.norm.empty()) {
    if (f.norm != "rmsnorm" && f.norm != "layernorm") {
      return InvalidArgument("--norm = '" + f.norm + "': expected rmsnorm or layernorm");
    }
    arch->layer_norm = f.norm == "layernorm";
  }
  if (!f.biases.empty()) {
    TENAX_ASSIGN_OR_RETURN(arch->biases, YesNo(f.biases, "--biases"));
  }
  if (!f.learned_positions.empty()) {
    TENAX_ASSIGN_OR_RETURN(arch->learned_positions,
                           YesNo(f.learned_positions, "--learned-positions"));
  }
  if (!f.tie_embeddings.empty()) {
    TENAX_ASSIGN_OR_RETURN(spec->tie_embeddings, YesNo(f.tie_embeddings, "--tie-embeddings"));
  }
  *name = ShapeName(*spec, *arch, base.has_value() && !o.any());
  return Status::Ok();
}

Result<Software> BuildSoftware(const PlanFlags& f) {
  Software sw;
  TENAX_ASSIGN_OR_RETURN(sw.kernels, ParseKernels(f.kernels));
  TENAX_ASSIGN_OR_RETURN(sw.attention, ParseAttention(f.attention));
  sw.dropout = f.dropout;
  TENAX_ASSIGN_OR_RETURN(sw.sequence_parallel, YesNo(f.sequence_parallel, "--sequence-parallel"));
  TENAX_ASSIGN_OR_RETURN(sw.tp_overlap, ParseTpOverlap(f.tp_overlap));
  TENAX_ASSIGN_OR_RETURN(sw.dp_overlap, YesNo(f.dp_overlap, "--dp-overlap"));
  TENAX_ASSIGN_OR_RETURN(sw.pp_overlap, YesNo(f.pp_overlap, "--pp-overlap"));
  return sw;
}

}  // namespace

Status RunPlan(const PlanFlags& f) {
  if (f.validate) return Validate();
  if (!f.calibrate.empty()) return CalibrateCommand(f);
  const bool shape = f.layers || f.hidden || f.heads || f.kv_heads || f.ffn || f.vocab;
  if ((f.model.empty() && !shape) || f.gpus <= 0 || f.global_batch_tokens.empty()) {
    return InvalidArgument(
        "tenax plan needs --model (or a shape: --layers --hidden --heads --ffn --vocab), --gpus "
        "and --global-batch-tokens (or --validate, or --calibrate); e.g. tenax plan --model "
        "llama3-405b --gpus 16384 --gpu h100-sxm --seq-len 8192 --global-batch-tokens 16Mi");
  }
  ModelSpec spec;
  Architecture arch;
  std::string shape_name;
  int64_t config_seq = 0;
  TENAX_RETURN_IF_ERROR(BuildModel(f, &spec, &arch, &shape_name, &config_seq));
  const int64_t seq_len = f.seq_len > 0 ? f.seq_len : config_seq;
  if (seq_len <= 0) return InvalidArgument("--seq-len is required with a preset model or a shape");
  TENAX_ASSIGN_OR_RETURN(int64_t batch,
                         ParsePositiveInt(f.global_batch_tokens, "--global-batch-tokens"));
  TENAX_ASSIGN_OR_RETURN(Software sw, BuildSoftware(f));
  TENAX_ASSIGN_OR_RETURN(Workload w, MakeWorkload(spec, arch, sw, seq_len, batch));
  w.shape_name = shape_name;
  TENAX_ASSIGN_OR_RETURN(HardwareProfile hw, LoadHardwareProfile(f.gpu));
  if (sw.attention != AttentionKind::kMaterialized &&
      !hw.attention.count(AttentionName(sw.attention))) {
    return InvalidArgument(fmt::format(
        "--attention {}: {} has no [attention.{}] table (measured throughput of that kernel); "
        "use --attention flash2, or add the table to the profile",
        AttentionName(sw.attention), hw.source, AttentionName(sw.attention)));
  }

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
    FailureCosts fc;
    TENAX_ASSIGN_OR_RETURN(fc.rate, ParseFailureRate(f.failure_rate, hw.gpus_per_node));
    fc.gpus_per_node = hw.gpus_per_node;
    if (!f.checkpoint_bandwidth.empty()) {  // the model's checkpoint size (MoE: every expert)
      TENAX_ASSIGN_OR_RETURN(fc.checkpoint_cost,
                             CheckpointCostFromModel(spec, f.checkpoint_bandwidth, nullptr));
    } else {
      TENAX_ASSIGN_OR_RETURN(fc.checkpoint_cost,
                             ParseDuration(f.checkpoint_cost, "--checkpoint-cost"));
    }
    TENAX_ASSIGN_OR_RETURN(fc.restart_cost, ParseDuration(f.restart_cost, "--restart-cost"));
    report.failures = fc;
  }
  // --explain shows the best layout, or, when none fits, the one needing the least memory and
  // how far over it is.
  std::string explain;
  if (f.explain && !result.best.empty()) {
    explain = ExplainText(w, hw, result.best.front());
    if (const std::string moe = ExpertChoiceText(report); !moe.empty()) explain += "\n" + moe;
  } else if (f.explain && !result.leanest_not_fitting.empty()) {
    explain = "does not fit: " + ExplainText(w, hw, result.leanest_not_fitting.front());
  }
  if (f.json) {
    WritePlanJson(report, explain, stdout);
  } else {
    std::printf("%s", PlanText(report).c_str());
    if (!explain.empty()) std::printf("\n%s", explain.c_str());
  }
  if (result.best.empty()) {
    return InvalidArgument(
        fmt::format("no layout of {} on {} x {} fits in memory", w.shape_name, f.gpus, hw.name));
  }
  return Status::Ok();
}

}  // namespace tenax::plan
