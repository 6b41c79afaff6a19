// Reading measurements for calibrate.h: a tenax run folder (what ran, from config.toml; how
// fast, from metrics.jsonl; how many processes, from the parallelism degrees or a checkpoint's
// manifest) or a JSON-lines file of measured runs.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tenax/config/batch.h"
#include "tenax/config/config.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/plan/calibrate.h"

namespace tenax::plan {
namespace {

// Steps whose timing includes warm-up (allocator growth, cuDNN autotuning) are skipped.
constexpr size_t kWarmupSteps = 2;

// Processes the run used. Explicit degrees multiply out; data_parallel_shard = -1 ("the rest")
// is resolved from the newest checkpoint manifest's world_size (docs/checkpoint_format.md).
int64_t RunWorldSize(const std::string& dir, const Config& c) {
  const ParallelismOptions& p = c.parallelism;
  const int64_t fixed = p.data_parallel_replicate * p.tensor_parallel * p.pipeline_parallel;
  if (p.data_parallel_shard > 0) return fixed * p.data_parallel_shard;
  const std::string folder = RunPaths(dir, c.checkpoint.folder).checkpoints();
  auto names = LocalFs().ListDir(folder);
  if (names.ok()) {
    for (auto it = names->rbegin(); it != names->rend(); ++it) {
      if (it->rfind("step_", 0) != 0) continue;
      auto text = LocalFs().ReadFile(JoinPath(JoinPath(folder, *it), "manifest.json"));
      if (!text.ok()) continue;
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (!j.is_discarded() && j.contains("world_size") && j["world_size"].is_number_integer()) {
        return j["world_size"].get<int64_t>();
      }
    }
  }
  log::Warn(
      "{}: data_parallel_shard = -1 and no checkpoint manifest records the world size; "
      "assuming one process per replica / stage / tensor rank ({} GPU(s))",
      dir, fixed);
  return fixed;
}

Result<std::vector<Measurement>> LoadRunFolder(const std::string& dir) {
  auto config = LoadConfig(RunPaths(dir).config(), {});
  if (!config.ok()) return config.status().WithContext("calibrating from run folder " + dir);
  const TrainingOptions& t = config->training;
  const ParallelismOptions& par = config->parallelism;
  if (t.mixed_precision == "fp32" || t.device == "cpu") {
    return InvalidArgument(fmt::format(
        "{} trained in fp32 or on the CPU (training.mixed_precision = {}, device = {}); the "
        "planner models bf16 GPU training, so calibrate from a bf16 run on the GPU",
        dir, t.mixed_precision, t.device));
  }
  // tenax's activation_checkpoint = "selective" recomputes every second block: the planner's
  // `alternate` policy.
  Recompute recompute = Recompute::kNone;
  if (par.activation_checkpoint == "full") {
    recompute = Recompute::kFull;
  } else if (par.activation_checkpoint == "selective") {
    recompute = Recompute::kAlternate;
  } else if (par.activation_checkpoint != "none") {
    return InvalidArgument(fmt::format(
        "{}: parallelism.activation_checkpoint = \"{}\" is not one the planner models (none, "
        "selective, full)",
        dir, par.activation_checkpoint));
  }
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(RunPaths(dir).metrics()));
  std::vector<double> speeds;
  bool any_mfu = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("loss")) continue;
    if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number()) {
      speeds.push_back(j["tokens_per_s"].get<double>());
    }
    any_mfu = any_mfu || (j.contains("mfu") && j["mfu"].is_number());
  }
  if (speeds.size() <= kWarmupSteps) {
    return InvalidArgument(fmt::format(
        "{}/metrics.jsonl has {} timed steps; calibration needs more than {} (the first are "
        "warm-up): train longer",
        dir, speeds.size(), kWarmupSteps));
  }
  if (!any_mfu) {
    // The trainer reports MFU only on a GPU whose peak it knows: without it this was a CPU run
    // (training.device = "auto" on a machine without CUDA) or an unknown GPU.
    return InvalidArgument(fmt::format(
        "{}/metrics.jsonl has no MFU figures: the run was not on a GPU tenax knows (a CPU run?); "
        "calibrate from a bf16 run on the GPU the profile describes",
        dir));
  }
  speeds.erase(speeds.begin(), speeds.begin() + kWarmupSteps);
  std::sort(speeds.begin(), speeds.end());

  Measurement m;
  m.name = dir;
  m.gpus = RunWorldSize(dir, *config);
  const int64_t tp = par.tensor_parallel, pp = par.pipeline_parallel;
  const int64_t dp = m.gpus / (tp * pp);
  // tenax's local_batch_size is per data-parallel rank and accumulation step; a pipeline splits it
  // into parallelism.microbatches.
  const int64_t pipeline_split = pp > 1 ? par.microbatches : 1;
  TENAX_ASSIGN_OR_RETURN(ModelSpec spec, ResolveModelSpec(config->model, 256));
  // The global batch as the trainer resolved it (training.global_batch_size derives accumulation).
  TENAX_ASSIGN_OR_RETURN(const BatchShape batch, ResolveBatch(t, dp));
  TENAX_ASSIGN_OR_RETURN(m.workload,
                         MakeWorkload(spec, t.seq_len, batch.global * t.seq_len, Kernels::kEager));
  m.layout.tp = tp;
  m.layout.cp = int64_t{1};
  m.layout.pp = pp;
  m.layout.vpp = par.virtual_stages;
  m.layout.dp_replicate = par.data_parallel_replicate;
  m.layout.dp_shard = dp / par.data_parallel_replicate;
  m.layout.micro_batch = t.local_batch_size / pipeline_split;
  m.layout.recompute = recompute;
  m.layout.fp8 = false;
  // metrics.jsonl's tokens_per_s is the whole job's; the median is robust to steps that also
  // evaluated or checkpointed.
  m.tokens_per_s_per_gpu = speeds[speeds.size() / 2] / static_cast<double>(m.gpus);
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
    if (!v->is_string())
      return InvalidArgument(fmt::format("{}: \"{}\" must be a string", where, key));
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
  const bool has_tokens = j.contains("tokens_per_s_per_gpu"),
             has_tflops = j.contains("tflops_per_gpu");
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

}  // namespace

Result<std::vector<Measurement>> LoadMeasurements(const std::string& path) {
  if (LocalFs().Exists(RunPaths(path).metrics())) return LoadRunFolder(path);
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

}  // namespace tenax::plan
