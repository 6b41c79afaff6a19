// `tenax plan`: parse the flags into a workload, a hardware profile and constraints, search, and
// print; or --validate / --calibrate. No modelling here (see cost_model.h, memory_model.h).
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <sstream>

#include "tenax/config/config.h"
#include "tenax/core/fs.h"
#include "tenax/plan/calibrate.h"
#include "tenax/plan/commands.h"
#include "tenax/plan/failure.h"
#include "tenax/plan/from_run.h"
#include "tenax/plan/report.h"
#include "tenax/plan/search.h"
#include "tenax/plan/support.h"
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
    *arch = kGptArchitecture;
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
  TENAX_ASSIGN_OR_RETURN(sw.cp_attention, ParseCpAttention(f.cp_attention));
  TENAX_ASSIGN_OR_RETURN(sw.complex_rotary, YesNo(f.complex_rotary, "--complex-rotary"));
  return sw;
}

// The batch a tenax config trains on `gpus` GPUs: local_batch_size x grad_accum_steps x seq_len
// per data-parallel rank, times the data-parallel degree its [parallelism] gives at that world
// size (data_parallel_shard = -1 takes what tp x pp x replicas leave).
Result<int64_t> ConfigBatchTokens(const std::string& path, int64_t gpus, int64_t seq_len,
                                  std::string* note) {
  auto config = LoadConfig(path, {});
  if (!config.ok()) return config.status().WithContext("--model " + path);
  const TrainingOptions& t = config->training;
  const ParallelismOptions& p = config->parallelism;
  const int64_t fixed = p.data_parallel_replicate * p.tensor_parallel * p.pipeline_parallel;
  int64_t dp = 0;
  if (p.data_parallel_shard == -1) {
    if (gpus % fixed != 0) {
      return InvalidArgument(fmt::format(
          "--model {}: its [parallelism] (replicate {} x tp {} x pp {} = {}) does not divide "
          "--gpus {}; give --global-batch-tokens",
          path, p.data_parallel_replicate, p.tensor_parallel, p.pipeline_parallel, fixed, gpus));
    }
    dp = gpus / (p.tensor_parallel * p.pipeline_parallel);
  } else {
    dp = p.data_parallel_replicate * p.data_parallel_shard;
    if (dp * p.tensor_parallel * p.pipeline_parallel != gpus) {
      return InvalidArgument(
          fmt::format("--model {}: its [parallelism] uses {} GPUs, not --gpus {}; give "
                      "--global-batch-tokens",
                      path, dp * p.tensor_parallel * p.pipeline_parallel, gpus));
    }
  }
  const int64_t tokens = t.local_batch_size * t.grad_accum_steps * seq_len * dp;
  *note = fmt::format(
      "batch from {}: local_batch_size {} x grad_accum_steps {} x seq_len {} x {} data-parallel "
      "ranks (its [parallelism] on {} GPUs) = {} tokens",
      path, t.local_batch_size, t.grad_accum_steps, seq_len, dp, gpus, tokens);
  return tokens;
}

Status FromRun(const PlanFlags& f) {
  TENAX_ASSIGN_OR_RETURN(RunCosts costs, ReadRunCosts(f.from_run));
  std::optional<FailureRate> rate;
  if (!f.failure_rate.empty()) {
    TENAX_ASSIGN_OR_RETURN(rate, ParseFailureRate(f.failure_rate, costs.ranks));
  }
  TENAX_ASSIGN_OR_RETURN(RunPrediction p, PredictRun(costs, rate, /*runs=*/2000, /*seed=*/1));
  if (f.json) {
    std::printf("%s\n", FromRunJson(costs, p).dump(2).c_str());
  } else {
    std::printf("%s", FromRunText(costs, p).c_str());
  }
  return Status::Ok();
}

}  // namespace

Status RunPlan(const PlanFlags& f) {
  if (f.validate) return Validate();
  if (!f.from_run.empty()) return FromRun(f);
  if (!f.calibrate.empty()) return CalibrateCommand(f);
  const bool shape = f.layers || f.hidden || f.heads || f.kv_heads || f.ffn || f.vocab;
  const bool from_config = !f.model.empty() && IsPlanConfigFile(f.model);
  if ((f.model.empty() && !shape) || f.gpus <= 0 ||
      (f.global_batch_tokens.empty() && !from_config)) {
    return InvalidArgument(
        "tenax plan needs --model (or a shape: --layers --hidden --heads --ffn --vocab), --gpus "
        "and --global-batch-tokens (unless --model is a config, which fixes the batch; or "
        "--validate, or --calibrate); e.g. tenax plan --model llama3-405b --gpus 16384 --gpu "
        "h100-sxm --seq-len 8192 --global-batch-tokens 16Mi");
  }
  ModelSpec spec;
  Architecture arch;
  std::string shape_name;
  int64_t config_seq = 0;
  TENAX_RETURN_IF_ERROR(BuildModel(f, &spec, &arch, &shape_name, &config_seq));
  const int64_t seq_len = f.seq_len > 0 ? f.seq_len : config_seq;
  if (seq_len <= 0) return InvalidArgument("--seq-len is required with a preset model or a shape");
  int64_t batch = 0;
  std::string batch_note;
  if (!f.global_batch_tokens.empty()) {
    TENAX_ASSIGN_OR_RETURN(batch, ParsePositiveInt(f.global_batch_tokens, "--global-batch-tokens"));
  } else {
    TENAX_ASSIGN_OR_RETURN(batch, ConfigBatchTokens(f.model, f.gpus, seq_len, &batch_note));
  }
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
  o.zero_bubble = true;  // zbv and dualpipev run in tenax train: rank them beside 1F1B
  if (!f.fix.empty()) {
    TENAX_ASSIGN_OR_RETURN(o.fix, ParseLayoutConstraints(f.fix));
  }
  // By default only what `tenax train` runs is ranked; the unrestricted search then shows what
  // is faster and what it needs. Software options tenax train lacks (fused kernels, another
  // attention, GPT layers) rule out every layout: then every layout is ranked, saying why.
  std::string all_reason;
  {
    Layout plain;  // one GPU, nothing but the workload's own features
    const TrainSupport ts = TenaxTrainSupport(w, plain);
    for (const auto& m : ts.missing) all_reason += (all_reason.empty() ? "" : "; ") + m;
  }
  const bool runnable_only = !f.all && all_reason.empty();
  std::optional<SearchResult> unrestricted;
  if (runnable_only) {
    o.accept = [&w](const Layout& l) { return TenaxTrainRuns(w, l); };
    o.reject_reason = "tenax train cannot run it yet (--all ranks it)";
    SearchOptions all = o;
    all.accept = nullptr;
    all.top_k = std::max(f.top, 64);  // enough to find the fastest per missing feature set
    TENAX_ASSIGN_OR_RETURN(unrestricted, SearchLayouts(w, hw, all));
  }
  TENAX_ASSIGN_OR_RETURN(SearchResult result, SearchLayouts(w, hw, o));
  bool ranked_runnable = runnable_only;
  if (runnable_only && result.best.empty() && !unrestricted->best.empty()) {
    // What was asked for (a --fix, or the memory) leaves nothing tenax train runs: show what
    // would fit, each with what tenax train lacks for it.
    all_reason = "any layout that fits these constraints";
    SearchOptions all = o;
    all.accept = nullptr;
    TENAX_ASSIGN_OR_RETURN(result, SearchLayouts(w, hw, all));
    ranked_runnable = false;
    unrestricted.reset();
  }

  PlanReport report;
  report.runnable_only = ranked_runnable;
  report.unrunnable = unrestricted ? &*unrestricted : nullptr;
  report.all_reason = f.all ? "" : all_reason;
  report.batch_note = batch_note;
  if (from_config) {
    report.config_arg = "--config " + f.model;
  } else {
    report.config_arg = "--config YOUR.toml";
    if (!f.model.empty()) report.model_sets.push_back("model.preset=" + f.model);
    auto shape_set = [&](int64_t flag, const char* key, int64_t value) {
      if (flag != 0) report.model_sets.push_back(fmt::format("model.{}={}", key, value));
    };
    shape_set(f.layers, "n_layers", spec.n_layers);
    shape_set(f.hidden, "dim", spec.dim);
    shape_set(f.heads, "n_heads", spec.n_heads);
    shape_set(f.heads || f.kv_heads, "n_kv_heads", spec.n_kv_heads);
    shape_set(f.ffn, "ffn_hidden_dim", spec.ffn_hidden_dim);
    shape_set(f.vocab, "vocab_size", spec.vocab_size);
  }
  report.workload = &w;
  report.hardware = &hw;
  report.gpus = f.gpus;
  report.search = &result;
  report.price_per_gpu_hour = f.price_per_gpu_hour;
  if (f.sdc_check_interval < 0) {
    return InvalidArgument(
        fmt::format("--sdc-check-interval {} is invalid: give the steps between checks (0: none)",
                    f.sdc_check_interval));
  }
  report.sdc_check_interval = f.sdc_check_interval;
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
