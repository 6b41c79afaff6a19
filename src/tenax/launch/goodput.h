// Goodput accounting for `tenax launch`: splits the run's wall time into productive training,
// checkpoint stalls, lost work (steps that a restart redid), failure detection, restart (from a
// failure's detection until the next generation is ready to train), down time (no launcher
// running: between a launch that ended or died and the next launch of the same run) and idle
// (the rest: first start-up, evaluation, shut-down), and records every failure, straggler and
// rank that hung or crashed in its teardown after finishing (`exit_faults`: nothing lost), and
// every live recovery (`live_recoveries`, resilience.mode = "live": the others trained on; no
// generation ended).
//
// A run may take several launches (a scheduler requeues it, or a killed launcher is started
// again): each launch is a *segment*. The launcher rewrites goodput.json about once a second
// while it runs, so a launcher that is killed leaves its segment behind; the next launch reads it
// back, records the loss of the launcher (kind launcher-lost, at the last time the dead one was
// alive) and counts the gap as down time. Lost work is counted across segments: a step redone
// after a relaunch is lost like one redone after a restart.
//
// Times inside are seconds since the run's first launch ("run seconds"); the methods take the
// current launch's clock (seconds since it started) and convert. Schema: docs/launcher_protocol.md.
// Thread safety: none; the supervision loop owns it.
// Non-goals: per-rank splits (the lead rank's view stands for the job).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/protocol/heartbeat.h"
#include "tenax/protocol/protocol.h"

namespace tenax::launch {

using protocol::Beat;

struct FailureRecord {
  double time_s = 0;   // when the launcher detected it
  int segment = 0;     // which launch of the run
  int generation = 0;  // within its launch
  int rank = -1;       // -1: undetermined
  int node = -1;       // several nodes: the node rank it happened on (-1: one node, or unknown)
  int slot = -1;
  std::string host;
  std::string kind;  // protocol::FailureKindName
  std::string cause;
  int exit_code = 0;
  int64_t step = -1;          // the newest step the job had finished
  double detection_s = 0;     // from the failure to the launcher acting on it
  double recovery_s = -1;     // from detection to the next generation ready to train; -1: never
  int64_t resumed_from = -1;  // the step the next generation resumed from
  int replacement_slot = -1;  // the slot that took the failed rank
  int scheduled = -1;         // the poisson schedule's failure it was (fault_schedule.h), or -1
};

class Goodput {
 public:
  // A new launch of the run starting at `start_unix`. `previous`: goodput.json of the earlier
  // launches (null or not an object: this is the first). A segment of `previous` that never
  // ended was a launcher that died: recorded as a launcher-lost failure.
  Goodput(double start_unix, const nlohmann::json* previous, std::string host, int pid);

  // `now`: seconds since this launch started.
  void GenerationStarted(int generation, double now);
  // The lead rank's newest beat of the running generation; `wall_now` is the system clock, to
  // place the beat's own timestamp on the launch clock.
  void LeadBeat(const Beat& beat, double now, double wall_now);
  void GenerationEnded(double now, int exit_code);
  void AddFailure(FailureRecord failure);       // failure.time_s on this launch's clock
  void AddStraggler(nlohmann::json straggler);  // its time_s on this launch's clock
  // A rank that hung or crashed in its teardown, after its work was done (no restart, nothing
  // lost): {time_s (this launch's clock), generation, rank, slot, host, step, kind, detail}.
  void AddExitFault(nlohmann::json fault);
  // A live recovery (its time_s and healed_at_s on this launch's clock); `index` from a previous
  // call: replaces that entry (the record grows as the replacement heals).
  int AddLiveRecovery(nlohmann::json recovery, int index = -1);
  // Takes entry `index` out again (a live recovery that became a restart's failure); the later
  // entries' indices move down by one.
  void DropLiveRecovery(int index);
  // Their times on the run's clock, which starts at run_start_unix().
  const nlohmann::json& live_recoveries() const { return live_recoveries_; }
  double run_start_unix() const { return run_start_unix_; }
  // The trainer's loss-spike record (<run folder>/loss_spikes.json "spikes"), for the report.
  void SetLossSpikes(nlohmann::json spikes) { loss_spikes_ = std::move(spikes); }
  // The trainer's silent-data-corruption record (<run folder>/sdc.json "detections").
  void SetSdc(nlohmann::json detections) { sdc_ = std::move(detections); }
  const nlohmann::json& sdc() const { return sdc_; }
  // The launch's poisson schedule (FaultSchedule::Report; its times on this launch's clock).
  void SetFaultSchedule(nlohmann::json schedule);
  void SetReplacement(int slot) {
    if (!failures_.empty()) failures_.back().replacement_slot = slot;
  }

  int restarts() const;  // generations after the first, in every launch
  size_t failure_count() const { return failures_.size(); }
  int64_t step() const;
  double tokens_per_s() const { return tokens_per_s_; }
  const std::string& run_dir() const { return run_dir_; }
  int segment() const { return segment_; }

  // The report so far. `now`: this launch's clock; `ended`: the launch is over (its segment is
  // closed; otherwise it counts as alive until now).
  nlohmann::json Report(double now, int exit_code, bool ended) const;
  // Human-readable table of Report.
  static std::string Summary(const nlohmann::json& report);

 private:
  struct Generation {
    int segment = 0, generation = 0;
    double start_s = 0, ready_s = -1, end_s = -1;  // run seconds
    int64_t resume_step = -1, last_step = -1;
    double last_step_at = -1;
    double steps_s = 0, checkpoint_s = 0;
    int exit_code = 0;
  };
  struct Segment {
    double start_unix = 0, end_unix = 0;  // end: when it ended, or when it was last alive
    bool ended = false;
    int exit_code = 0, pid = 0;
    std::string host;
  };
  void Load(const nlohmann::json& previous);
  double Run(double launch_s) const { return launch_s + offset_s_; }

  double run_start_unix_ = 0;
  double offset_s_ = 0;            // this launch's start in run seconds
  int segment_ = 0;                // this launch's index
  std::vector<Segment> segments_;  // earlier launches, then this one
  std::vector<Generation> generations_;
  std::vector<FailureRecord> failures_;
  nlohmann::json stragglers_ = nlohmann::json::array();
  nlohmann::json exit_faults_ = nlohmann::json::array();
  nlohmann::json live_recoveries_ = nlohmann::json::array();
  nlohmann::json loss_spikes_ = nlohmann::json::array();
  nlohmann::json sdc_ = nlohmann::json::array();
  nlohmann::json fault_schedule_;  // null: none
  double tokens_per_s_ = 0;
  std::string run_dir_;
};

// Closes the record `e` of a live recovery (its `step`: the last step the lost rank finished)
// with the beat of its replacement that says it healed, in `joined_epoch`, at `healed_at_s` (this
// launch's clock): healed_from, healed_bytes, transfer_s, joined_epoch, joined_at_step (the step
// whose state it received, healed_step: not the beat's `step`, which a beat rewritten with a new
// epoch keeps from before the healing) and steps_short_handed (steps the others trained without
// it).
void CloseHealedLiveRecovery(const protocol::Beat& healed, int joined_epoch, double healed_at_s,
                             nlohmann::json* e);

}  // namespace tenax::launch
