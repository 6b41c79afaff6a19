// The Trainer class behind Train() (trainer.h), shared by the two files that implement it:
// trainer_setup.cc (Setup: data, layout and process groups, model and optimizer, checkpoints and
// the resume, loaders) and trainer.cc (Run: steps, loss spikes, evaluation, saves, Finish).
// Internal: include it only from those two.
#pragma once

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "tenax/checkpoint/store.h"
#include "tenax/config/batch.h"
#include "tenax/config/config.h"
#include "tenax/config/resume_changes.h"
#include "tenax/core/format.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/run_lock.h"
#include "tenax/data/hf_tokenizer_files.h"
#include "tenax/data/loader.h"
#include "tenax/data/source.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/live_group.h"
#include "tenax/parallel/mesh.h"
#include "tenax/protocol/agent_channel.h"
#include "tenax/protocol/fault_injection.h"
#include "tenax/protocol/flight_recorder.h"
#include "tenax/protocol/heartbeat.h"
#include "tenax/train/adamw.h"
#include "tenax/train/checkpoint_interval.h"
#include "tenax/train/device.h"
#include "tenax/train/evaluate.h"
#include "tenax/train/loss_spike.h"
#include "tenax/train/lr_schedule.h"
#include "tenax/train/parallel_model.h"
#include "tenax/train/profiler.h"
#include "tenax/train/reporter.h"
#include "tenax/train/sdc_check.h"
#include "tenax/train/step_model.h"
#include "tenax/train/train_checkpoint.h"
#include "tenax/train/trainer.h"

namespace tenax::train {

// trainer.h's PrepareBeforeAssignment: a standby's data source, and the config it was opened for
// (ConfigToToml; the trainer uses it only for the very same config).
struct Prepared {
  std::string config_toml;
  data::DataSplits data;
};

}  // namespace tenax::train

namespace tenax::train::trainer_internal {

using Clock = std::chrono::steady_clock;
using protocol::FailureKind;
inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What the loop does with a step whose loss is a spike (training.on_loss_spike).
enum class SpikeAction { kNone, kWarn, kSkip, kRestart, kStop };

// One rank's training run. Setup builds, in this order (each needs the previous): data (debug
// presets take their vocabulary from it), the layout and process groups, the model under the
// layout and its optimizer, checkpointing and the resume, the loaders at the resumed position.
// Then Run: Step, Evaluate and Save per step, Finish. Every rank calls the same methods in the
// same order (collectives inside). Not thread-safe; owns every thread it starts.
class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> Create(const Config& config,
                                                 const protocol::RankContext& context,
                                                 const parallel::DistEnv& env,
                                                 const protocol::ExitReporter& reporter,
                                                 std::shared_ptr<Prepared> prepared = nullptr);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  ~Trainer();

  Result<TrainSummary> Run();
  // What the failure that Setup or Run returned was (kCrash unless a site said more).
  FailureKind failure_kind() const { return failure_kind_; }
  bool failure_secondary() const { return failure_secondary_; }

 private:
  Trainer(const Config& config, const protocol::RankContext& context, const parallel::DistEnv& env,
          const protocol::ExitReporter& reporter, std::shared_ptr<Prepared> prepared)
      : config_(config),
        ctx_(context),
        env_(env),
        reporter_(reporter),
        t_(config_.training),
        prepared_(std::move(prepared)) {}

  Status Setup();
  Status SetupData();
  Status SetupRunFolder();
  Status SetupGroups();
  Status SetupModel();
  Status SetupCheckpoints();
  Status ReconcileResume();
  Status SetupLoaders();

  // Live recovery (resilience.mode = "live", trainer_live.cc): the layout it needs, this rank's
  // group of the first epoch (a replacement's comes in LiveJoin), the step run again after a lost
  // member until it completes, the recovery from a failed collective, the replacement's healing,
  // and the state that travels to a rank that lacks it.
  Status CheckLiveLayout(const parallel::GroupOptions& go);
  Status SetupLiveWorld(const parallel::GroupOptions& go);
  // `step` past the run's last: only the quorum rounds (what a lost member left owed, settled).
  Status LiveStep(int64_t step);
  // The step's quorum round: true when it switched to a newer epoch. `owed`: this rank's
  // live_owed_ in, the members' largest out.
  Result<bool> LiveQuorum(int64_t* owed);
  // Live: the evaluation and save after `step` (BetweenSteps) as a phase across replicas. A member
  // lost in them leaves the others to recover at once (not a restart); they owe the step's
  // evaluation and save (live_owed_), which every member then does again at the next quorum
  // round (LiveStep), where the lead logs no evaluation twice and saves no committed checkpoint
  // again.
  Status LiveBetweenSteps(int64_t step);
  // The data-parallel indices whose samples this rank runs: its own, and live the missing
  // replicas' dealt to it (protocol::SlotsRunBy).
  std::vector<int> DataSlots();
  Status LiveRecover(int64_t step, const std::string& what);
  Status LiveJoin();
  // A replacement, before it waits for its epoch: the forward and backward of one row of zeros
  // (an eighth of a sequence), its reductions across replicas in groups of its own
  // (LiveGroup::FormAlone; those inside a replica of several ranks with its other new ranks),
  // then every gradient dropped, so that the memory its first real step uses is already the
  // process's and that step is not the job's slowest (first-touch page faults: about 0.15 s a
  // join at half a core for the 29M shape). Only where that step's state is all overwritten by
  // the transfer and one row is a step: a dense model, no pipeline stages. Says what it did, or
  // why not.
  Status LiveWarmUp();
  Status LiveSync(const protocol::LiveMembership& next, bool has_state);
  // The first membership record of this generation after epoch `after` that is `wanted`.
  Result<protocol::LiveMembership> WaitForLiveRecord(
      int after, const std::function<bool(const protocol::LiveMembership&)>& wanted);
  Status LiveSyncState(const protocol::LiveMembership& next, bool has_state);
  bool live() const { return live_ != nullptr; }
  // Whether step's line goes to metrics.jsonl (metrics.log_interval, and the last step).
  bool LogsStep(int64_t step) const {
    return step % config_.metrics.log_interval == 0 || step == last_step_;
  }
  // HSDP live (several ranks per replica): the groups across replicas are the world's and this
  // shard index's (LiveReplicas: live_ itself when every rank is a replica); a replica's ranks
  // take every decision together through their shard group, which is never re-formed: they
  // attempt the record the replica's first rank read (AgreeInReplica), and a phase of collectives
  // across replicas counts only if it went through on every rank of the replica
  // (LiveAcrossReplicas: `phase` returns "" or why it failed; on a failure anywhere in the
  // replica, the groups across replicas are left and LiveStepAbandoned is thrown).
  parallel::LiveGroup& LiveReplicas() { return live_replicas_ ? *live_replicas_ : *live_; }
  protocol::LiveMembership LiveReplicaView(const protocol::LiveMembership& m) const;
  int LiveRankOf(int replica) const;  // that replica's rank at this rank's position
  Status LiveForm(const protocol::LiveMembership& m);
  void LiveLeave();
  bool LiveFormed() const;
  void LiveAcrossReplicas(const std::function<std::string()>& phase);
  bool ReplicaAgrees(bool ok);
  Result<protocol::LiveMembership> AgreeInReplica(const protocol::LiveMembership& m);

  // Silent-data-corruption checks (resilience.sdc_check_interval, trainer_sdc.cc and
  // sdc_check.h): the layout they need, whether `step` is checked, one replay of the rank
  // `distance` places before this one in the ring, and the comparison after the own step (a
  // mismatch ends the run here, naming the faulty rank, before the update).
  Status CheckSdcLayout(const parallel::GroupOptions& go);
  bool SdcDue(int64_t step) const;
  Result<ComputeDigest> SdcReplay(int64_t step, int distance);
  Status SdcVerify(int64_t step, const ComputeDigest& own, const ComputeDigest& replay1);
  void SdcLogCost(int64_t step, double step_s);
  // Who replays whom: rings of ranks, each replaying the step of the rank before it, and the rank
  // of each member of the world group in its order (live: the epoch's members, the rings one per
  // place in a replica over the live replicas; otherwise every rank, the rings one per TP/PP
  // position over the data-parallel index).
  struct SdcRings {
    std::vector<std::vector<int>> rings;
    std::vector<int> ranks;
  };
  SdcRings SdcRingsNow() const;
  // With a tolerance: logs how far apart the agreeing pairs of this check were, when that is a
  // new high for the process (a warning when it comes within 4x of the tolerance).
  void SdcNoteAgreement(int64_t step, const std::vector<std::vector<int>>& rings,
                        const std::vector<ComputeDigest>& own,
                        const std::vector<ComputeDigest>& replay,
                        const std::vector<int>& mismatched);

  Status Step(int64_t step);
  Status StepOnce(int64_t step);
  // Step's parts (trainer.cc says the order): the injected faults (tenax launch --inject) due at
  // a step's start, before its gradient collectives (slow, hang: `compute_s` is the compute so
  // far) and on its loss (nan, spike); every micro-batch's forward and backward (their mean
  // loss); the mean of a loss over ranks (collective); the end of a step whose loss or gradient
  // norm is not finite.
  void InjectAtStepBegin(int64_t step);
  void InjectBeforeGradientReduce(int64_t step, double compute_s);
  double InjectIntoLoss(int64_t step, double loss);
  Result<double> ForwardBackwardMicroBatches();
  // The micro-batches of the data-parallel slots' `parts` (rows of each slot's micro-batches) at
  // the current data position: forward and backward; their losses summed, each weighted by the
  // part's share of its micro-batch. Neither the cursor nor anything else moves.
  Result<double> RunMicroBatches(const std::vector<protocol::SlotPart>& parts);
  // What this rank trains on in a step: DataSlots' slots, except that live the missing ranks'
  // samples are spread over every member where a micro-batch may be cut (protocol::PartsRunBy).
  std::vector<protocol::SlotPart> DataParts() { return DataPartsOf(env_.rank); }
  // The samples `rank` runs in this step (live: its replica's share of the epoch's; `rank` at
  // this rank's position in its replica).
  std::vector<protocol::SlotPart> DataPartsOf(int rank);
  // How many slots' worth of samples `parts` hold; and `parts` said for the log.
  double SlotsIn(const std::vector<protocol::SlotPart>& parts) const;
  std::string DescribeParts(const std::vector<protocol::SlotPart>& parts) const;
  // Live, a step run again after a recovery: whether this rank's own gradients kept through the
  // failure (live_kept_) stand for part of `parts`, the samples it runs now (on every rank of an
  // HSDP replica alike: they vote). If not, they are dropped.
  bool LiveResumesKept(const std::vector<protocol::SlotPart>& parts);
  double MeanOverRanks(double loss);
  Status FailNonFinite(int64_t step, double loss, double grad_norm);
  // What follows a step's update when due: the evaluation, then the checkpoint. `again`: a live
  // group's second attempt after a member was lost in them (nothing is logged or saved twice).
  Status BetweenSteps(int64_t step, bool again = false);
  Status Evaluate(int64_t step, bool again = false);
  Status Save(int64_t step, bool again = false);
  Status Finish();
  // metrics.profile_step: the window's first step starts the profiler, its last (or the run's
  // last) stops it and writes this rank's trace and table. Profiling never fails a run: an
  // error is logged and training goes on.
  void ProfileBefore(int64_t step);
  void ProfileAfter(int64_t step);
  // The `finish` beat: this rank's work is done and durable (tests may hang it here: exit-hang).
  void Finished(int64_t step);
  // Decides about a spike at `step` (logs it, records it); kNone when the loss is no spike.
  Result<SpikeAction> CheckSpike(int64_t step, double loss);
  Status Fail(FailureKind kind, Status st, bool secondary = false) {
    failure_kind_ = kind;
    failure_secondary_ = secondary;
    return st;
  }
  // When every rank fails on the same mean loss (NaN, spike), which rank's own loss caused it:
  // with `nonfinite`, the first whose local loss is not finite (-1: none, e.g. only the gradient
  // norm overflowed); otherwise the largest. Collective; -1 for a single process.
  int OriginOf(double local_loss, bool nonfinite);

  // Constant after construction.
  const Config config_;
  const protocol::RankContext ctx_;
  const parallel::DistEnv env_;
  const protocol::ExitReporter& reporter_;
  const TrainingOptions& t_;
  const Clock::time_point t_start_ = Clock::now();
  std::shared_ptr<Prepared> prepared_;  // a standby's (PrepareBeforeAssignment), used once

  // Set up once, in Setup's order. Destroyed in reverse: the process groups outlive everything
  // that issues collectives, the run lock outlives everything that writes the run folder.
  std::optional<RunLock> run_lock_;
  DeviceInfo device_;
  data::DataSplits data_;
  ModelSpec spec_;
  std::optional<parallel::Mesh> mesh_;
  BatchShape batch_;  // the step's batch; a resume may re-derive its accumulation
  FlopsPerToken flops_;
  std::string run_dir_, ckpt_dir_, config_toml_;
  // Live recovery only; they outlive their proxies below. live_: every rank (slot = rank);
  // live_replicas_ (several ranks per replica): this rank's position across replicas (slot =
  // replica). live_inside_: the replica's own group, all of its ranks (its votes).
  std::unique_ptr<parallel::LiveGroup> live_, live_replicas_;
  std::unique_ptr<parallel::Communicator> live_inside_;
  // Ranks per replica: the world over data_parallel_replicate, consecutive (replicate is the
  // outermost axis); a rank's position in its replica is rank % live_replica_ranks_.
  int live_replica_ranks_ = 1;
  std::unique_ptr<parallel::ProcessGroups> groups_;
  // shard_group_ spans data_parallel_shard x context (mesh.h's ShardGroupOf).
  std::unique_ptr<parallel::Communicator> shard_group_, replicate_group_, tp_group_, pp_group_;
  std::unique_ptr<parallel::Communicator> cp_group_;                   // context parallelism
  std::unique_ptr<parallel::Communicator> ep_group_, ep_shard_group_;  // expert_parallel > 1
  std::vector<const parallel::Communicator*> all_groups_;
  std::unique_ptr<protocol::FlightRecorder> flight_;
  std::unique_ptr<protocol::FlightRecorderWatchdog> watchdog_;
  std::unique_ptr<protocol::FaultInjector> faults_;
  std::unique_ptr<SdcMonitor> sdc_;      // checks on, or an injected sdc fault; null otherwise
  std::unique_ptr<model::Llama> model_;  // the full model, or the shape reference (distributed)
  std::unique_ptr<ParallelModel> parallel_model_;
  std::unique_ptr<SingleProcessModel> single_model_;
  StepModel* step_model_ = nullptr;  // one of the two above
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<TrainTarget> target_;
  std::unique_ptr<ckpt::CheckpointStore> store_;
  std::unique_ptr<TrainCheckpointer> checkpointer_;
  std::optional<data::BatchLoader> loader_;
  // Validation windows by data-parallel index: this rank's, and live the missing replicas' it
  // evaluates in their place (made when first needed).
  std::map<int, data::EvalLoader> val_loaders_;
  std::unique_ptr<Reporter> reporter_out_;  // the lead rank's terminal, metrics and TensorBoard
  std::unique_ptr<protocol::HeartbeatWriter> beats_;
  std::unique_ptr<StepProfiler> profiler_;  // inside the metrics.profile_step window only

  // Training state.
  TrainProgress progress_;
  int set_aside_ = 0;
  int64_t last_step_ = 0;
  int64_t tokens_per_step_ = 0;
  std::optional<LossSpikeDetector> spikes_;
  std::set<int64_t> rolled_back_;  // steps that made an earlier run roll back (loss spikes)
  double train_seconds_ = 0;
  int64_t steps_timed_ = 0;
  parallel::CommStats step_comm_;  // collectives issued inside training steps only
  FailureKind failure_kind_ = FailureKind::kSetup;
  bool failure_secondary_ = false;
  double local_loss_ = 0;  // this rank's loss of the current step, before the mean over ranks
  double live_share_ = 1;  // data-parallel ranks' worth of samples this rank ran (live: maybe more)
  bool live_has_state_ = true;  // live: this rank's state is a whole step's (ReplicaAgrees)
  int64_t live_touched_ = 0;    // live: LiveReplicas().receives_begun() as the phase began
  // live: this rank was behind the others when a member was lost, and the state it received was
  // past the step it ran: the others did that step's evaluation and save already, and the
  // quorum round it took after the sync is the next step's (LiveStep).
  bool live_step_received_ = false;
  // live: this rank's next quorum round was taken already, at the end of a step it had been
  // behind in (live_step_received_), so its next LiveStep starts without one.
  bool live_quorum_taken_ = false;
  // live: the step whose evaluation and save this rank began but did not get through (a member
  // was lost in them); -1: none.
  int64_t live_owed_ = -1;
  // live: what the gradients the step model kept through a failure across replicas
  // (StepModel::AbandonStep(true)) stand for: the state they were computed from (progress_.step;
  // -1: none kept), the samples they hold (parts of data-parallel slots) and their weighted
  // losses summed, and LiveReplicas().receives_begun() then (no state has come in since).
  struct LiveKept {
    int64_t from_step = -1;
    std::vector<protocol::SlotPart> parts;
    double loss_sum = 0;
    int64_t receives = 0;
  };
  LiveKept live_kept_;
  bool live_rerun_ = false;  // live: the step runs again after a recovery (LiveRecover)
  // live: the state this rank last received (LiveSyncState): from whom, its bytes, the transfer's
  // seconds and its step. A replacement's beat reports it once its whole replica has it
  // (LiveJoin).
  struct LiveHeal {
    int from = -1;
    int64_t bytes = 0;
    double seconds = 0;
    int64_t step = -1;
  };
  LiveHeal live_heal_;
  StepMetrics last_metrics_;  // the newest step's line, also the others' (live: LiveSyncState)
  int64_t sdc_checks_ = 0;    // checks passed by this process
  // The generation's first step (its second is checked, to measure the cost at once): the same on
  // a live replacement, which receives it with the state (LiveSyncState).
  int64_t sdc_first_step_ = -1;
  double sdc_replay_s_ = 0;          // the current check's replay
  double sdc_verify_s_ = 0;          // the current check's gathering and comparing of digests
  double sdc_widest_agreement_ = 0;  // the largest Disagreement of agreeing pairs so far
  TrainSummary summary_;
};

}  // namespace tenax::train::trainer_internal
