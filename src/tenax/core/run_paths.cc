#include "tenax/core/run_paths.h"

#include "tenax/core/fs.h"

namespace tenax {

RunPaths::RunPaths(std::string root, const std::string& checkpoint_folder)
    : root_(std::move(root)) {
  const std::string& f = checkpoint_folder.empty() ? kDefaultCheckpointFolder : checkpoint_folder;
  checkpoints_ = f[0] == '/' ? f : JoinPath(root_, f);
}

RunPaths RunPaths::Of(const std::string& dump_folder, const std::string& name,
                      const std::string& checkpoint_folder) {
  return RunPaths(JoinPath(dump_folder, name), checkpoint_folder);
}

std::string RunPaths::config() const { return JoinPath(root_, "config.toml"); }
std::string RunPaths::metrics() const { return JoinPath(root_, "metrics.jsonl"); }
std::string RunPaths::tensorboard() const { return JoinPath(root_, "tb"); }
std::string RunPaths::loss_spikes() const { return JoinPath(root_, "loss_spikes.json"); }
std::string RunPaths::sdc() const { return JoinPath(root_, "sdc.json"); }
std::string RunPaths::goodput() const { return JoinPath(root_, "goodput.json"); }
std::string RunPaths::report_html() const { return JoinPath(root_, "report.html"); }
std::string RunPaths::flight() const { return JoinPath(root_, "flight"); }
std::string RunPaths::profile() const { return JoinPath(root_, "profile"); }
std::string RunPaths::profile_trace(int rank, int64_t first, int64_t last) const {
  return JoinPath(profile(), "rank" + std::to_string(rank) + "-steps" + std::to_string(first) +
                                 "-" + std::to_string(last) + ".json");
}
std::string RunPaths::profile_table(int rank, int64_t first, int64_t last) const {
  return JoinPath(profile(), "rank" + std::to_string(rank) + "-steps" + std::to_string(first) +
                                 "-" + std::to_string(last) + ".txt");
}
std::string RunPaths::lock() const { return JoinPath(root_, ".tenax.lock"); }
std::string RunPaths::owner() const { return JoinPath(root_, ".tenax.owner"); }

std::string RunPaths::ReportChartsBeside(const std::string& html_path) {
  const std::string dir = ParentDir(html_path);
  return JoinPath(dir.empty() ? "." : dir, "report");
}

}  // namespace tenax
