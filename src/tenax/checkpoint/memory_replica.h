// In-memory redundancy for checkpoints: after each snapshot a rank keeps its checkpoint files in
// RAM twice, its own copy and a copy held for it by its peer rank (rank + 1) % world, so a rank
// whose files on storage are missing or damaged gets them back from RAM instead of rolling the
// whole job back to an older checkpoint (docs/checkpoint_format.md, "Memory replicas").
//
// Processes are restarted after a failure, so process memory is lost; the copies live in a
// tmpfs folder (/dev/shm), which survives a process restart. Layout under `root`:
//   holder-HHHHH/owner-RRRRR-step_XXXXXXXX.replica   rank R's files, held in rank H's RAM
// On a real cluster each holder-H folder is on rank H's node, so a copy survives the loss of
// the owner's node; the peer copy then has to cross the network (a dedicated point-to-point
// group used only by the writer thread). Here all ranks share one node and one tmpfs, so "send
// to the peer" is a write into holder-(R+1)'s folder; the API does not change.
//
// Trust: a replica is only ever used for a committed checkpoint whose manifest lists the same
// sizes and CRC-32s, so a copy from an uncommitted or different save is never restored.
// Restore from RAM: Gather collects every file of a committed checkpoint from the copies in
// `root` (all owners, any holder), so a restart on the same node(s) loads the checkpoint without
// reading its data files from storage (only the small manifest and COMMITTED marker are read);
// when some file has no matching copy, the caller falls back to storage (RepairStorage, then the
// normal restore).
// Non-goals: more than one peer copy; fetching copies held on other nodes (Gather sees this
// node's tmpfs only, so across nodes it succeeds only when every file has a copy here).
// Thread safety: an instance is not thread-safe; ranks use distinct instances concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tenax/checkpoint/manifest.h"
#include "tenax/checkpoint/store.h"
#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::ckpt {

using NamedFiles = std::vector<std::pair<std::string, std::string>>;

class MemoryReplica {
 public:
  // `fs` must outlive the replica; `root` is a tmpfs folder shared by the node's ranks.
  MemoryReplica(FileSystem& fs, std::string root, int rank, int world_size);
  MemoryReplica(const MemoryReplica&) = delete;
  MemoryReplica& operator=(const MemoryReplica&) = delete;

  int rank() const { return rank_; }
  int peer() const { return (rank_ + 1) % world_size_; }  // holds this rank's second copy

  // Keeps `files` (this rank's part of checkpoint `step`) as its own copy and its peer's copy,
  // atomically each, then drops this rank's copies older than the newest two steps (the newest
  // may belong to a save that never commits).
  Status Put(int64_t step, const NamedFiles& files);
  // This rank's files of `step` whose sizes and CRC-32s match `manifest` (which must be for
  // `step`): from its own copy, else from the peer's. NotFound when neither copy matches.
  Result<NamedFiles> Get(int64_t step, const Manifest& manifest);
  // Rewrites this rank's files of committed checkpoint `step` that are missing or damaged on
  // storage from a RAM copy (only when it matches the committed manifest). Returns the names it
  // rewrote (empty when storage was fine). Call on every rank before resuming.
  Result<std::vector<std::string>> RepairStorage(CheckpointStore& store, int64_t step);

  // Every file `manifest` lists (the committed checkpoint `step`, all ranks' files), from the
  // copies under `root` whose sizes and CRC-32s match it. NotFound (naming the first file
  // without a usable copy) when some file has none.
  Result<std::map<std::string, std::string>> Gather(int64_t step, const Manifest& manifest);

  // Removes the copies this rank holds (its holder folder), and `root` once it is empty. For
  // the end of a run, after every rank stopped writing copies.
  Status DropHeld();

  // The copy of `owner`'s files for `step` held by `holder`.
  std::string ReplicaPath(int holder, int owner, int64_t step) const;

 private:
  Result<NamedFiles> ReadCopy(const std::string& path, int64_t step, int owner);

  // Constant after construction.
  FileSystem& fs_;
  const std::string root_;
  const int rank_;
  const int world_size_;
};

// The committed manifest of `step` in `store` (COMMITTED marker checked against it); the data
// files are not read.
Result<Manifest> ReadCommittedManifest(FileSystem& fs, CheckpointStore& store, int64_t step);

}  // namespace tenax::ckpt
