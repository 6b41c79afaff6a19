// CheckpointStore: saves, verifies, loads and prunes checkpoints in one folder with a commit
// protocol (docs/checkpoint_format.md). A checkpoint is trusted only once its COMMITTED marker,
// written last, exists and matches manifest.json, whose CRC-32s match every data file; so a
// crash at any point leaves either no committed checkpoint for that step or a complete one, and
// saving never touches another step's folder.
// Non-goals: what the files contain (the trainer's adapter writes safetensors and
// train_state.json); asynchronous saving (a caller may run Save on its own thread); streaming
// files larger than memory.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tenax/checkpoint/manifest.h"
#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::ckpt {

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string dir;    // the step folder
  Manifest manifest;  // parsed manifest.json
  nlohmann::json manifest_json;
  std::map<std::string, std::string> files;  // every file the manifest lists, verified
};

// Thread safety: an instance is not thread-safe; use one per thread. Several processes may use
// the same folder under the multi-rank protocol below.
//
// Multi-rank protocol (one checkpoint written by N processes into one step folder):
//   1. one rank:   Prepare(step)          removes a crashed attempt's leftovers for this step
//   2. barrier
//   3. every rank: WriteFiles(step, own)  concurrently; each rank writes distinct file names
//   4. barrier    (every rank's WriteFiles returned OK)
//   5. one rank:   Commit(step, ..., all expected file names)
// Save() is the single-process form of the same sequence. Prepare must not run while another
// rank writes the same step (it deletes the folder), which is why it comes before the barrier.
class CheckpointStore {
 public:
  // `fs` must outlive the store. `folder` is created on the first save.
  CheckpointStore(FileSystem& fs, std::string folder);
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  const std::string& folder() const { return folder_; }
  // <folder>/step_XXXXXXXX
  std::string StepDir(int64_t step) const;

  // Prepare + WriteFiles + Commit with world_size 1 and expected files = the names in `files`.
  // Fails without writing anything if `step` is already committed.
  Status Save(int64_t step, const std::vector<std::pair<std::string, std::string>>& files,
              const nlohmann::json& layout, const nlohmann::json& extra);

  // Errors if `step` is committed (a good checkpoint is never overwritten); otherwise removes any
  // uncommitted folder for `step` (a crashed attempt) and creates an empty one.
  Status Prepare(int64_t step);
  // Writes `files` (name -> bytes) atomically into the step folder (creating it if needed).
  // Safe to call concurrently from several processes for distinct file names.
  Status WriteFiles(int64_t step, const std::vector<std::pair<std::string, std::string>>& files);
  // Reads back every expected file to record its size and CRC-32, then writes manifest.json,
  // then COMMITTED, then syncs the folders. Files in the folder but not in `expected_files` are
  // not part of the checkpoint. `layout` and `extra` must be JSON objects (null, which is what
  // `{}` becomes for a json parameter, counts as empty).
  Status Commit(int64_t step, const nlohmann::json& layout, const nlohmann::json& extra,
                const std::vector<std::string>& expected_files, int64_t world_size = 1);
  // Commits `manifest` as it is (its sizes and CRCs came from wherever the files were written:
  // on several nodes with their own folders, from every rank) without reading the files: writes
  // manifest.json, then COMMITTED, then syncs. The files need not all be in this folder.
  Status CommitManifest(const Manifest& manifest);
  // Builds the manifest entries of `names` in `step`'s folder by reading them back.
  Result<std::map<std::string, FileEntry>> ReadEntries(int64_t step,
                                                       const std::vector<std::string>& names);

  // Committed steps (COMMITTED marker present, not verified), ascending. A missing folder is an
  // empty list.
  Result<std::vector<int64_t>> ListCommitted();
  // Full check: marker matches manifest.json; every listed file present with the right size and
  // CRC-32. Reads each file once (one at a time). DataError messages name the exact file.
  Status Verify(int64_t step);
  // Verify + every listed file's bytes, checked as they are read.
  Result<LoadedCheckpoint> Load(int64_t step);
  // The newest committed step that verifies; logs a warning for each newer one skipped and why.
  // NotFound when there is none.
  Result<int64_t> LatestGood();
  // Deletes the oldest committed checkpoints beyond the newest `keep_latest` (0 keeps all), and
  // uncommitted folders older than the newest committed step (newer ones may be a save in
  // progress on another rank). Never deletes the newest checkpoint that verifies, even when
  // newer damaged ones would otherwise push it out.
  Status Prune(int64_t keep_latest);
  // Moves every committed checkpoint newer than `step` aside (step_N.damaged when it fails
  // verification, step_N.superseded otherwise), so a run resumed from `step` can write those
  // step numbers again without destroying anything. Returns the folders it moved.
  Result<std::vector<std::string>> SetAsideNewerThan(int64_t step);

 private:
  // Verifies `step`; with `out` set, also keeps the files and manifest.
  Status VerifyImpl(int64_t step, LoadedCheckpoint* out);
  bool IsCommitted(int64_t step);
  // Step folders in `folder_` (committed or not), ascending.
  Result<std::vector<int64_t>> ListStepDirs();
  // Renames the folder out of the step_ namespace before deleting it, so a crash mid-delete
  // never leaves a committed-looking checkpoint with missing files.
  Status RemoveStepDir(int64_t step);

  // Constant after construction.
  FileSystem& fs_;
  const std::string folder_;
  // Steps committed by this instance: Commit read every byte back moments earlier, so Prune can
  // trust them without re-reading a possibly huge checkpoint.
  std::set<int64_t> committed_here_;
};

// Resolves a user-given resume path to (checkpoint folder, step): a step folder
// (".../step_00000100", must be committed) or a checkpoint folder (its LatestGood). Errors say
// what was wrong with the path and what to pass instead.
Result<std::pair<std::string, int64_t>> ResolveCheckpointPath(FileSystem& fs,
                                                              const std::string& path);

}  // namespace tenax::ckpt
