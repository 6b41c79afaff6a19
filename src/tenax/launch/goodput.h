// Goodput accounting for `tenax launch`: splits the launch's wall time into productive training,
// checkpoint stalls, lost work (steps that a restart redid), failure detection, restart (from a
// failure's detection until the next generation is ready to train) and idle/other time (the first
// start-up, evaluation, shut-down), and records every failure and straggler. Fed from the
// supervision loop (generation boundaries, failures) and from the lead rank's heartbeats
// (cumulative step and checkpoint seconds, the step a generation resumed from).
// Written as goodput.json (schema: docs/launcher_protocol.md) and printed as a summary table.
// Thread safety: none; the supervision loop owns it. Times are seconds since the launch started.
// Non-goals: per-rank splits (the lead rank's view stands for the job).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tenax/core/heartbeat.h"

namespace tenax::launch {

struct FailureRecord {
  double time_s = 0;  // when the launcher detected it
  int generation = 0;
  int rank = -1;      // -1: undetermined (a hang with every rank at the same step)
  int slot = -1;
  std::string host;
  std::string kind;   // crash | crash-in-checkpoint | hang | nonfinite | checkpoint-write |
                      // io-error | corrupt-checkpoint | straggler | setup
  std::string cause;
  int exit_code = 0;
  int64_t step = -1;          // the newest step the job had finished
  double detection_s = 0;     // from the failure to the launcher acting on it
  double recovery_s = -1;     // from detection to the next generation ready to train; -1: never
  int64_t resumed_from = -1;  // the step the next generation resumed from
  int replacement_slot = -1;  // the slot that took the failed rank
};

class Goodput {
 public:
  void GenerationStarted(int generation, double now);
  // The lead rank's newest beat of the running generation; `now` in launch seconds and
  // `wall_now` the system clock, to place the beat's own timestamp on the launch clock.
  void LeadBeat(const Beat& beat, double now, double wall_now);
  void GenerationEnded(double now, int exit_code);
  void AddFailure(FailureRecord failure);
  void AddStraggler(nlohmann::json straggler) { stragglers_.push_back(std::move(straggler)); }
  // The trainer's loss-spike record (<run folder>/loss_spikes.json "spikes"), for the report.
  void SetLossSpikes(nlohmann::json spikes) { loss_spikes_ = std::move(spikes); }
  void SetReplacement(int slot) {
    if (!failures_.empty()) failures_.back().replacement_slot = slot;
  }

  int restarts() const { return generations_.empty() ? 0 : int(generations_.size()) - 1; }
  size_t failure_count() const { return failures_.size(); }
  int64_t step() const;
  double tokens_per_s() const { return tokens_per_s_; }
  const std::string& run_dir() const { return run_dir_; }

  // The time split and records so far; `wall` is the launch's elapsed time.
  nlohmann::json Report(double wall, int exit_code) const;
  // Human-readable table of Report.
  static std::string Summary(const nlohmann::json& report);

 private:
  struct Generation {
    int generation = 0;
    double start_s = 0, ready_s = -1, end_s = -1;
    int64_t resume_step = -1, last_step = -1;
    double last_step_at = -1;
    double steps_s = 0, checkpoint_s = 0;
    int exit_code = 0;
  };
  std::vector<Generation> generations_;
  std::vector<FailureRecord> failures_;
  nlohmann::json stragglers_ = nlohmann::json::array();
  nlohmann::json loss_spikes_ = nlohmann::json::array();
  double tokens_per_s_ = 0;
  std::string run_dir_;
};

}  // namespace tenax::launch
