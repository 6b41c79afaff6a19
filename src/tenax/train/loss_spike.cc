#include "tenax/train/loss_spike.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tenax/core/check.h"
#include "tenax/core/fs.h"
#include "tenax/core/run_paths.h"

namespace tenax::train {
namespace {

constexpr size_t kMinHistory = 8;

}  // namespace

LossSpikeDetector::LossSpikeDetector(double factor, int64_t window)
    : factor_(factor), window_(static_cast<size_t>(window)) {
  TENAX_CHECK(factor == 0 || factor > 1);
  TENAX_CHECK(window >= 1);
}

std::optional<double> LossSpikeDetector::Check(double loss) const {
  if (!enabled() || !std::isfinite(loss)) return std::nullopt;
  if (history_.size() < std::min(kMinHistory, window_)) return std::nullopt;
  std::vector<double> sorted(history_.begin(), history_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  if (loss > factor_ * median) return median;
  return std::nullopt;
}

void LossSpikeDetector::Add(double loss) {
  if (!enabled() || !std::isfinite(loss)) return;
  history_.push_back(loss);
  while (history_.size() > window_) history_.pop_front();
}

void LossSpikeDetector::Restore(const std::vector<double>& losses) {
  history_.clear();
  for (double l : losses) Add(l);
}

std::string LossSpikesPath(const std::string& run_dir) { return RunPaths(run_dir).loss_spikes(); }

Result<std::vector<LossSpikeRecord>> ReadLossSpikes(const std::string& run_dir) {
  std::vector<LossSpikeRecord> out;
  const std::string path = LossSpikesPath(run_dir);
  if (!LocalFs().Exists(path)) return out;
  TENAX_ASSIGN_OR_RETURN(std::string text, LocalFs().ReadFile(path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("spikes") || !j["spikes"].is_array()) {
    return DataError(path +
                     " is not a loss-spike record ({\"spikes\": [...]}); delete it to "
                     "start the record afresh");
  }
  try {
    for (const auto& s : j["spikes"]) {
      out.push_back({s.at("step").get<int64_t>(), s.at("loss").get<double>(),
                     s.at("median").get<double>(), s.at("action").get<std::string>(),
                     s.value("generation", 0)});
    }
  } catch (const nlohmann::json::exception& e) {
    return DataError(path + ": " + e.what() + "; delete it to start the record afresh");
  }
  return out;
}

Status AppendLossSpike(const std::string& run_dir, const LossSpikeRecord& record) {
  TENAX_ASSIGN_OR_RETURN(std::vector<LossSpikeRecord> all, ReadLossSpikes(run_dir));
  for (const LossSpikeRecord& r : all) {
    // A step run again in the same generation (live recovery after a failure in it) finds its
    // own spike again: one record.
    if (r.step == record.step && r.generation == record.generation) return Status::Ok();
  }
  all.push_back(record);
  nlohmann::json spikes = nlohmann::json::array();
  for (const auto& r : all) {
    spikes.push_back({{"step", r.step},
                      {"loss", r.loss},
                      {"median", r.median},
                      {"action", r.action},
                      {"generation", r.generation}});
  }
  return LocalFs().WriteFileAtomic(LossSpikesPath(run_dir),
                                   nlohmann::json{{"spikes", spikes}}.dump(2) + "\n");
}

}  // namespace tenax::train
