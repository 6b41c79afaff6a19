#include "tenax/report/run_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tenax/checkpoint/manifest.h"
#include "tenax/config/config.h"
#include "tenax/core/fs.h"
#include "tenax/core/run_paths.h"

namespace tenax::report {
namespace {

namespace fs = std::filesystem;

double Number(const nlohmann::json& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}
int64_t Integer(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

// Parses metrics.jsonl text (whole lines only; a torn last line is skipped).
void ParseMetrics(const std::string& text, std::vector<StepPoint>* steps,
                  std::vector<EvalPoint>* evals) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step")) continue;
    if (j.contains("loss")) {
      StepPoint p;
      p.step = Integer(j, "step");
      // NaN is written as null: kept as NaN so that the chart shows the gap.
      p.loss = Number(j, "loss", std::nan(""));
      p.lr = Number(j, "lr");
      p.grad_norm = Number(j, "grad_norm", std::nan(""));
      p.tokens_per_s = Number(j, "tokens_per_s");
      p.flops_per_s = Number(j, "flops_per_s");
      if (j.contains("mfu") && j["mfu"].is_number()) p.mfu = j["mfu"].get<double>();
      p.mem_peak_bytes = Integer(j, "mem_peak_bytes");
      p.mem_peak_reserved_bytes = Integer(j, "mem_peak_reserved_bytes");
      p.step_time_s = Number(j, "step_time_s");
      p.tokens = Integer(j, "tokens");
      p.time = Number(j, "time");
      steps->push_back(p);
    } else if (j.contains("val_loss")) {
      EvalPoint e;
      e.step = Integer(j, "step");
      e.val_loss = Number(j, "val_loss", std::nan(""));
      e.tokens = Integer(j, "val_tokens");
      e.time = Number(j, "time");
      evals->push_back(e);
    }
  }
}

// The run folder's layout with the checkpoint folder its config.toml names; the default one
// when the config cannot be read.
RunPaths PathsOf(const std::string& run_dir, const std::string& config_toml) {
  if (!config_toml.empty()) {
    auto c = ParseConfig(config_toml, {}, RunPaths(run_dir).config());
    if (c.ok()) return RunPaths(run_dir, c->checkpoint.folder);
  }
  return RunPaths(run_dir);
}

// The last `bytes` of a file, starting at a line boundary.
std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(bytes) ? size - bytes : 0;
  in.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (from > 0) {
    const size_t nl = text.find('\n');
    text = nl == std::string::npos ? "" : text.substr(nl + 1);
  }
  return text;
}

}  // namespace

std::vector<CheckpointInfo> ListCheckpoints(const std::string& folder) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const auto step = ckpt::ParseStepDirName(entry.path().filename().string());
    if (!step) continue;
    struct stat st {};
    const std::string marker = (entry.path() / ckpt::kCommitFile).string();
    if (::stat(marker.c_str(), &st) != 0) continue;  // not committed (yet)
    out.push_back({*step, static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

Result<RunData> LoadRunData(const std::string& run_dir, const std::string& goodput_path) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) {
    return NotFound(run_dir +
                    " is not a run folder (give job.dump_folder/job.name, e.g. "
                    "runs/demo)");
  }
  RunData d;
  d.run_dir = run_dir;
  FileSystem& files = LocalFs();
  const RunPaths paths(run_dir);
  const std::string metrics = paths.metrics();
  if (files.Exists(metrics)) {
    TENAX_ASSIGN_OR_RETURN(std::string text, files.ReadFile(metrics));
    ParseMetrics(text, &d.steps, &d.evals);
  }
  // A restarted run truncates metrics.jsonl to its checkpoint, so steps ascend; sorting keeps a
  // hand-edited file drawable.
  std::stable_sort(d.steps.begin(), d.steps.end(),
                   [](const StepPoint& a, const StepPoint& b) { return a.step < b.step; });
  const std::string goodput = goodput_path.empty() ? paths.goodput() : goodput_path;
  if (files.Exists(goodput)) {
    TENAX_ASSIGN_OR_RETURN(std::string text, files.ReadFile(goodput));
    d.goodput = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!d.goodput.is_object()) {
      return DataError(goodput +
                       " is not a goodput report (not a JSON object); remove it or "
                       "pass the right file");
    }
  }
  TENAX_ASSIGN_OR_RETURN(std::optional<nlohmann::json> spikes, ReadLossSpikes(run_dir));
  if (spikes) {
    d.loss_spikes = std::move(*spikes);
  } else if (d.goodput.is_object() && d.goodput.contains("loss_spikes")) {
    d.loss_spikes = d.goodput["loss_spikes"];
  }
  TENAX_ASSIGN_OR_RETURN(std::optional<nlohmann::json> sdc, ReadSdcDetections(run_dir));
  if (sdc) {
    d.sdc = std::move(*sdc);
  } else if (d.goodput.is_object() && d.goodput.contains("sdc")) {
    d.sdc = d.goodput["sdc"];
  }
  if (files.Exists(paths.config())) {
    TENAX_ASSIGN_OR_RETURN(d.config_toml, files.ReadFile(paths.config()));
  }
  d.checkpoint_dir = PathsOf(run_dir, d.config_toml).checkpoints();
  d.checkpoints = ListCheckpoints(d.checkpoint_dir);
  return d;
}

nlohmann::json ReadLiveTraining(const std::string& run_dir) {
  std::vector<StepPoint> steps;
  std::vector<EvalPoint> evals;
  // A few hundred lines: enough for the history and the newest values.
  ParseMetrics(Tail(RunPaths(run_dir).metrics(), 96 * 1024), &steps, &evals);
  nlohmann::json out = nlohmann::json::object();
  if (steps.empty()) return out;
  const StepPoint& s = steps.back();
  out["step"] = s.step;
  out["loss"] = s.loss;
  out["lr"] = s.lr;
  out["grad_norm"] = s.grad_norm;
  out["tokens"] = s.tokens;
  out["tokens_per_s"] = s.tokens_per_s;
  out["flops_per_s"] = s.flops_per_s;
  if (s.mfu) out["mfu"] = *s.mfu;
  out["mem_peak_bytes"] = s.mem_peak_bytes;
  out["time_unix"] = s.time;
  if (!evals.empty()) {
    out["val_loss"] = evals.back().val_loss;
    out["val_step"] = evals.back().step;
  }
  nlohmann::json history = nlohmann::json::array();
  const size_t first = steps.size() > 300 ? steps.size() - 300 : 0;
  for (size_t i = first; i < steps.size(); ++i) {
    if (std::isfinite(steps[i].loss)) history.push_back({steps[i].step, steps[i].loss});
  }
  out["history"] = history;
  auto text = LocalFs().ReadFile(RunPaths(run_dir).config());
  const std::vector<CheckpointInfo> ckpts =
      ListCheckpoints(PathsOf(run_dir, text.ok() ? *text : "").checkpoints());
  if (!ckpts.empty()) {
    out["last_checkpoint_step"] = ckpts.back().step;
    out["last_checkpoint_unix"] = ckpts.back().committed_unix;
  }
  return out;
}

namespace {

// The list under `key` of the JSON object in `path`: none when the file is absent.
Result<std::optional<nlohmann::json>> ReadRecordList(const std::string& path,
                                                     const std::string& key) {
  if (!LocalFs().Exists(path)) return std::optional<nlohmann::json>();
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(path));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains(key) && j[key].is_array()) {
    return std::optional<nlohmann::json>(j[key]);
  }
  return std::optional<nlohmann::json>(nlohmann::json::array());
}

}  // namespace

Result<std::optional<nlohmann::json>> ReadLossSpikes(const std::string& run_dir) {
  return ReadRecordList(RunPaths(run_dir).loss_spikes(), "spikes");
}

Result<std::optional<nlohmann::json>> ReadSdcDetections(const std::string& run_dir) {
  return ReadRecordList(RunPaths(run_dir).sdc(), "detections");
}

}  // namespace tenax::report
