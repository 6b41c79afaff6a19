// What a training checkpoint holds and how it is restored (docs/checkpoint_format.md):
//   model weights        model.safetensors (one process / DDP) or, with FSDP, one
//                        model-rankRRRRR-of-NNNNN.safetensors per shard holding 1-D slices
//   optimizer state      optimizer.safetensors or optimizer-rank*.safetensors, likewise:
//                        exp_avg.<param> / exp_avg_sq.<param>
//   train_state.json     step, optimizer step, the global sample cursor and the batch it
//                        advances by, tokens seen, CPU RNG state, the resolved model shape, the
//                        tokenizer, the config and the parallel layout
// Restoring all of it makes the resumed trajectory identical to an uninterrupted one, and any
// layout reads any other's checkpoint (shards are reassembled by name, then re-split).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/checkpoint/async_writer.h"
#include "tenax/checkpoint/memory_replica.h"
#include "tenax/checkpoint/store.h"
#include "tenax/config/batch.h"
#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/model/llama.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/parallel/communicator.h"
#include "tenax/protocol/fault_injection.h"
#include "tenax/train/adamw.h"
#include "tenax/train/checkpoint_interval.h"
#include "tenax/train/parallel_model.h"

namespace tenax::train {

struct TrainProgress {
  int64_t step = 0;  // optimizer steps completed
  // The global sample cursor: training windows consumed by all data-parallel ranks together
  // (data/loader.h). It does not depend on the layout, so any number of ranks continues from it.
  int64_t data_position = 0;
  int64_t tokens_seen = 0;
  // The batch the steps so far were made with (config/batch.h): saved, and restored so that a
  // resumed run can keep (or knowingly change) it. global == 0: a checkpoint that predates the
  // record and whose config and layout do not tell either.
  BatchShape batch;
  // The loss-spike detector's window, oldest first (train/loss_spike.h); empty when it is off.
  std::vector<double> loss_history;
  // Restored only: the config (TOML) the checkpoint was written with, to name what a resumed run
  // changes (config/resume_changes.h). Empty for a weights-only checkpoint.
  std::string saved_config;
};

// What is being saved or restored. `parallel` and `world` are null for a single process.
struct TrainTarget {
  model::Llama& model;  // the full model (single process) or the shape reference (distributed)
  AdamW& optimizer;
  // Distributed: this rank's part of the model; every rank of the first data-parallel replica
  // writes its own pieces (model-/optimizer-rankRRRRR-of-NNNNN.safetensors, NNNNN = world size).
  ParallelModel* parallel = nullptr;
  parallel::Communicator* world = nullptr;
  nlohmann::json layout = nlohmann::json::object();  // recorded in the manifest
  // The tokenizer of the training data (null ids where it has none); none when the ids are not
  // text (synthetic, token files). Recorded in train_state.json so export-hf and generate find it.
  std::optional<TokenizerRecord> tokenizer;
  // Mixture of experts: the state whose sigmoid-router biases are saved in train_state.json
  // ("moe_expert_bias", one row per layer) and restored; null for dense models.
  model::MoeState* moe = nullptr;
};

// A save is two steps, so synchronous and asynchronous saves share one file format:
//   SnapshotTrainCheckpoint   copies this rank's state into host memory (serialized files); the
//                             only part that blocks training when saving asynchronously
//   WriteTrainCheckpoint      the synchronous multi-rank commit protocol (barriers), or
//   ckpt::AsyncCheckpointWriter::Submit(snapshot)   the same files written in the background
//
// Collective when distributed (before_save, the TP gathers): every rank calls it. `attempt`
// identifies the run attempt for the asynchronous marker protocol (async_writer.h).
Result<ckpt::CheckpointSnapshot> SnapshotTrainCheckpoint(const TrainProgress& progress,
                                                         TrainTarget& target,
                                                         const std::string& config_toml,
                                                         const std::string& attempt = {});
// Collective when `world` is set: rank 0 prepares, every rank writes its files, rank 0 commits
// once all wrote (docs/checkpoint_format.md, "Several processes"). `faults` (tests of recovery,
// may be null) strike after the files and after the commit.
// On several nodes a commit must be allowed by the node agent first (only a rank of the current
// generation may commit; protocol/agent_channel.h): `fence(step, manifest)`, called on rank 0
// with the manifest gathered from every rank's own files (each node may have its own folder).
using CommitFence = std::function<Status(int64_t step, const nlohmann::json& manifest)>;
Status WriteTrainCheckpoint(ckpt::CheckpointStore& store, const ckpt::CheckpointSnapshot& snap,
                            parallel::Communicator* world,
                            protocol::FaultInjector* faults = nullptr,
                            const CommitFence& fence = nullptr);

// SnapshotTrainCheckpoint + WriteTrainCheckpoint: collective when distributed; every rank calls
// it; rank 0 prepares and commits.
Status SaveTrainCheckpoint(ckpt::CheckpointStore& store, const TrainProgress& progress,
                           TrainTarget& target, const std::string& config_toml);

// Loads `step` from `store` into the target, whatever layout wrote it. A weights-only checkpoint
// (import-hf) starts a fresh optimizer and data stream at step 0.
Result<TrainProgress> RestoreTrainCheckpoint(ckpt::CheckpointStore& store, int64_t step,
                                             TrainTarget& target);
// The same from a checkpoint already read (e.g. from memory replicas).
Result<TrainProgress> RestoreTrainCheckpoint(const model::ModelCheckpoint& ckpt,
                                             TrainTarget& target);

// The trainer's checkpointing in one place: when to save (fixed or "auto" interval), how (sync,
// or async with the marker protocol), memory replicas, pruning. Every method that may save is
// collective when distributed: all ranks call it at the same steps.
// Thread safety: the trainer's thread only (the async writer has its own thread inside).
class TrainCheckpointer {
 public:
  struct Setup {
    CheckpointOptions options;  // the [checkpoint] section
    int64_t total_steps = 1;    // training.steps
    std::string folder;         // the checkpoint folder (CheckpointStore's)
    // tmpfs folder for memory replicas (TENAX_RAM_FOLDER or /dev/shm/tenax-<job>-<crc>); empty
    // disables them.
    std::string replica_root;
    int rank = 0;
    int world_size = 1;
    std::string attempt;        // identifies this launch generation (async_writer.h)
    ObservedFailures observed;  // what the launcher saw so far (protocol::RankContext)
    protocol::FaultInjector* faults = nullptr;  // --inject checkpoint faults; may be null
    CommitFence fence;  // several nodes: the node agent allows each commit; null: none
  };
  // `store` is the trainer's (main-thread) store of `setup.folder`; `world` null for one process.
  TrainCheckpointer(Setup setup, ckpt::CheckpointStore& store, parallel::Communicator* world);
  ~TrainCheckpointer();  // an async save still waiting for other ranks is abandoned (see
                         // AsyncCheckpointWriter); call Finish() to keep it
  TrainCheckpointer(const TrainCheckpointer&) = delete;
  TrainCheckpointer& operator=(const TrainCheckpointer&) = delete;

  // Before resuming (collective): repairs this rank's files of the newest committed checkpoint
  // from a memory replica when they are missing or damaged. Never fails the run: without a
  // usable replica storage is used as it is.
  void RepairFromReplicas();
  // Before resuming (collective), with memory replicas on: restores the newest committed
  // checkpoint from the RAM copies (every file must have a copy matching the committed manifest,
  // on every rank) without reading its data from storage. nullopt: not possible (replicas off,
  // no committed checkpoint, a copy missing on some rank); then resume from storage as usual.
  Result<std::optional<TrainProgress>> RestoreFromMemory(TrainTarget& target);
  // After resuming, before the first save (collective): with async saves rank 0 removes
  // uncommitted step folders newer than `resume_step`, then a barrier. Starts the interval count.
  Status Start(int64_t resume_step);
  void RecordStepTime(double seconds);
  // Whether `step` is saved (`last`: the final step, always saved).
  bool Due(int64_t step, bool last) const;
  // Saves `progress.step` (collective). Sync: writes, commits and (rank 0) prunes before
  // returning. Async: blocks only for the snapshot, returns the previous async save's error if it
  // failed. Then updates the interval ("auto"; rank 0's is broadcast). Returns log lines for the
  // reporter (saves completed, interval changes).
  Result<std::vector<std::string>> Save(const TrainProgress& progress, TrainTarget& target,
                                        const std::string& config_toml, double process_elapsed_s);
  // Before the optimizer updates the state (every step): when the last save copied GPU state to
  // the host in the background, the device's compute stream waits for those copies here, so
  // they overlap the forward and backward in between. A no-op otherwise.
  void BeforeUpdate();
  // Waits for an async save in flight; its error, if any. Returns log lines like Save.
  Result<std::vector<std::string>> Finish();
  // At the end of a successful run (collective): frees the RAM the memory replicas hold.
  void DropReplicas();
  // The step an async save is writing in the background now; nullopt when none is in flight.
  std::optional<int64_t> in_flight();
  // Newest step this rank knows is committed (rank 0: verified); nullopt before the first.
  std::optional<int64_t> last_committed() const { return last_committed_; }
  // The interval policy; valid after Start.
  const CheckpointIntervalPolicy& policy() const { return *policy_; }

 private:
  std::vector<std::string> Drain();  // completed async saves -> log lines

  const Setup setup_;
  ckpt::CheckpointStore& store_;
  parallel::Communicator* const world_;
  std::optional<CheckpointIntervalPolicy> policy_;  // set by Start
  std::unique_ptr<ckpt::MemoryReplica> replica_;
  std::unique_ptr<ckpt::AsyncCheckpointWriter> writer_;  // null: synchronous saves
  std::optional<int64_t> last_committed_;
  int64_t submitted_ = -1;               // the newest step handed to the async writer
  std::function<void()> before_update_;  // the last snapshot's (ckpt::CheckpointSnapshot)
};

}  // namespace tenax::train
