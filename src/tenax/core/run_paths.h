// The layout of a run folder, written down once. A run folder is job.dump_folder/job.name; what
// trainer, launcher, report and planner read or write in it is named here and nowhere else:
//
//   config.toml        the effective config (rank 0 at start)
//   metrics.jsonl      one line per step and evaluation (rank 0)
//   tb/                TensorBoard events (rank 0)
//   loss_spikes.json   every loss spike the trainer saw (rank 0)
//   sdc.json           every silent data corruption a replay found (rank 0; train/sdc_check.h)
//   goodput.json       the launcher's account of every second
//   report.html        the run report, its charts as SVG in report/
//   flight/            flight records and heartbeats of a rank run without a launcher
//   profile/           rank<R>-steps<A>-<B>.json (Chrome trace) and .txt (where the time
//                      went) of the steps metrics.profile_step names (train/profiler.h)
//   checkpoints/       step_XXXXXXXX/ folders (checkpoint.folder: relative to the run folder
//                      unless absolute)
//   .tenax.lock        the owner's lock, .tenax.owner who holds it (core/run_lock.h)
//
// Torch-free and pure (no filesystem access). Not a goal: files outside the run folder (an
// absolute checkpoint.folder is honoured, nothing else moves).
#pragma once

#include <string>

namespace tenax {

class RunPaths {
 public:
  static constexpr const char* kDefaultCheckpointFolder = "checkpoints";

  // `root` is the run folder; `checkpoint_folder` is checkpoint.folder as configured.
  explicit RunPaths(std::string root,
                    const std::string& checkpoint_folder = kDefaultCheckpointFolder);
  // The run folder of a job: dump_folder/name.
  static RunPaths Of(const std::string& dump_folder, const std::string& name,
                     const std::string& checkpoint_folder);

  const std::string& root() const { return root_; }
  const std::string& checkpoints() const { return checkpoints_; }
  std::string config() const;
  std::string metrics() const;
  std::string tensorboard() const;
  std::string loss_spikes() const;
  std::string sdc() const;
  std::string goodput() const;
  std::string report_html() const;
  std::string flight() const;
  std::string profile() const;
  // profile/rank<R>-steps<A>-<B>.json and .txt.
  std::string profile_trace(int rank, int64_t first, int64_t last) const;
  std::string profile_table(int rank, int64_t first, int64_t last) const;
  std::string lock() const;
  std::string owner() const;

  // The charts' folder beside a report page (report.html -> report/), wherever the page is.
  static std::string ReportChartsBeside(const std::string& html_path);

 private:
  std::string root_;
  std::string checkpoints_;
};

}  // namespace tenax
