// Progress heartbeats from ranks to the launcher. A rank overwrites <heartbeat folder>/rank-R
// with one JSON object (temp file + rename, no fsync: losing a beat on a machine crash is
// harmless, a torn one is not) when it is ready to train, after every step and around every
// checkpoint, and once more when its work is done (the `finish` phase, before the teardown). The
// launcher reads the files to tell a hang (no rank progresses) from a slow step,
// to find stragglers (per-step compute time, without the time blocked in collectives) and to
// split the wall time for goodput.json (cumulative step and checkpoint seconds, the step a
// generation resumed from). Without a heartbeat folder, beats are no-ops.
// Non-goals: a network transport (one node shares a folder; other nodes keep their own).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tenax/protocol/protocol.h"

namespace tenax::protocol {

struct Beat {
  int64_t step = 0;
  double wall_s = 0;  // the rank's clock (seconds since the epoch)
  // kReady (set up, about to train), kTrain (a step finished), kCheckpoint (writing one),
  // kNonFinite / kLossSpike (about to exit with that diagnosis), kEval (evaluating after `step`),
  // kFinish (done: the last step trained and the final checkpoint committed; the process only
  // has to tear down and exit 0).
  Phase phase = Phase::kTrain;
  // Progress between steps: bumped for every evaluation batch (beats rate-limited), so the
  // launcher sees a long evaluation advance and does not take it for a hang.
  int64_t work = 0;
  // The step an asynchronous checkpoint save is writing in the background, -1 when none (so a
  // rank that dies while its writer thread writes counts as a crash in a checkpoint).
  int64_t writing_checkpoint = -1;
  int generation = 0;  // the writer's launch generation
  int pid = 0;
  std::string host;
  int64_t resume_step = 0;  // the step this process started training after
  int set_aside = 0;        // damaged or newer checkpoints moved aside at resume (rank 0)
  std::string run_dir;      // the run folder (job.dump_folder/job.name)
  double steps_s = 0;       // cumulative seconds inside training steps, this process
  double checkpoint_s = 0;  // cumulative seconds writing checkpoints, this process
  double step_s = 0;        // the last step
  double compute_s = 0;     // the last step without the time blocked in collectives
  double tokens_per_s = 0;  // the last step, global tokens
  std::vector<std::pair<int64_t, double>> recent;  // (step, compute_s) of the last few steps
  // Live recovery (protocol/live_membership.h): the membership epoch this rank trains in (-1:
  // not live, or between epochs), and for a replacement the state it received from a live rank.
  int live_epoch = -1;
  int64_t healed_bytes = 0;
  double healed_s = 0;   // the transfer's seconds
  int healed_from = -1;  // the rank whose state it received
  // The step whose state it received: it trains the next one. Not `step`, which a beat rewritten
  // with the new epoch (Refresh) still holds from before the healing.
  int64_t healed_step = -1;
};
std::optional<Beat> ReadHeartbeat(const std::string& dir, int rank);

// Writes the beats of one rank. Not thread-safe; one per rank process.
class HeartbeatWriter {
 public:
  // `dir` empty: beats off.
  HeartbeatWriter(std::string dir, int rank, int generation);
  HeartbeatWriter(const HeartbeatWriter&) = delete;
  HeartbeatWriter& operator=(const HeartbeatWriter&) = delete;

  // `run_dir`: the run folder, where the launcher writes goodput.json by default.
  void Ready(int64_t resume_step, int set_aside, const std::string& run_dir);
  void StepDone(int64_t step, double step_s, double compute_s, double tokens_per_s);
  void CheckpointBegin(int64_t step);
  // One evaluation batch done after `step` (a beat at most every 0.2 s).
  void EvalProgress(int64_t step);
  void CheckpointDone(int64_t step, double seconds);
  void NonFinite(int64_t step);
  void LossSpike(int64_t step);
  // The rank's work is over and durable; written right before it tears down and exits.
  void Finished(int64_t step);
  // Records the step an async save writes in the background (-1: none); sent with the next beat.
  void SetWritingCheckpoint(int64_t step) { beat_.writing_checkpoint = step; }
  // Live recovery: the epoch trained in (-1: none), and a replacement's healing; sent with the
  // next beat.
  void SetLiveEpoch(int epoch) { beat_.live_epoch = epoch; }
  void SetHealed(int from_rank, int64_t bytes, double seconds, int64_t step) {
    beat_.healed_from = from_rank;
    beat_.healed_bytes = bytes;
    beat_.healed_s = seconds;
    beat_.healed_step = step;
  }
  // Rewrites the last beat (same step and phase) with the current fields.
  void Refresh();

 private:
  void Write(int64_t step, Phase phase);

  int64_t last_step_ = 0;
  Phase last_phase_ = Phase::kReady;
  double last_write_s_ = 0;  // MonotonicNow() of the last beat

  int rank_;
  std::string dir_;  // empty: beats off
  Beat beat_;
  std::deque<std::pair<int64_t, double>> recent_;
};

}  // namespace tenax::protocol
