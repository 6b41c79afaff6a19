// Commit protocol and checkpoint-folder housekeeping. The invariant every function keeps: a
// COMMITTED marker is written only after everything it vouches for is durable, and nothing
// removes or rewrites a committed folder except Prune (which first renames it out of the step_
// namespace).
#include "tenax/checkpoint/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "tenax/core/crc32.h"
#include "tenax/core/log.h"

namespace tenax::ckpt {
namespace {

constexpr const char* kDeletingSuffix = ".deleting";

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// `{}` passed for a `const json&` parameter is null, not an empty object; accept both.
bool IsObjectOrNull(const nlohmann::json& j) { return j.is_object() || j.is_null(); }
nlohmann::json ObjectOrEmpty(const nlohmann::json& j) {
  return j.is_null() ? nlohmann::json::object() : j;
}

Status ValidateNames(const std::vector<std::string>& names) {
  std::set<std::string> seen;
  for (const auto& name : names) {
    TENAX_RETURN_IF_ERROR(ValidateDataFileName(name));
    if (!seen.insert(name).second) {
      return InvalidArgument("checkpoint file '" + name + "' is listed twice");
    }
  }
  return Status::Ok();
}

std::vector<std::string> NamesOf(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(f.first);
  return names;
}

}  // namespace

CheckpointStore::CheckpointStore(FileSystem& fs, std::string folder)
    : fs_(fs), folder_(StripTrailingSlashes(std::move(folder))) {}

std::string CheckpointStore::StepDir(int64_t step) const {
  return JoinPath(folder_, StepDirName(step));
}

bool CheckpointStore::IsCommitted(int64_t step) {
  return fs_.Exists(JoinPath(StepDir(step), kCommitFile));
}

Status CheckpointStore::Save(int64_t step,
                             const std::vector<std::pair<std::string, std::string>>& files,
                             const nlohmann::json& layout, const nlohmann::json& extra) {
  const std::vector<std::string> names = NamesOf(files);
  // Validate before Prepare so a call that cannot succeed does not delete a crashed attempt.
  TENAX_RETURN_IF_ERROR(ValidateNames(names));
  if (!IsObjectOrNull(layout) || !IsObjectOrNull(extra)) {
    return InvalidArgument("checkpoint layout and extra must be JSON objects");
  }
  TENAX_RETURN_IF_ERROR(Prepare(step));
  TENAX_RETURN_IF_ERROR(WriteFiles(step, files));
  return Commit(step, layout, extra, names, /*world_size=*/1);
}

Status CheckpointStore::Prepare(int64_t step) {
  if (step < 0) return InvalidArgument(fmt::format("checkpoint step {} is negative", step));
  const std::string dir = StepDir(step);
  if (IsCommitted(step)) {
    return InvalidArgument(fmt::format(
        "{} already holds a committed checkpoint; refusing to overwrite it (delete that folder "
        "yourself if you really mean to replace it)",
        dir));
  }
  if (fs_.Exists(dir)) {
    log::Warn("removing {}: an uncommitted checkpoint left by an interrupted save", dir);
    TENAX_RETURN_IF_ERROR(fs_.RemoveAll(dir));
  }
  const bool new_root = !fs_.Exists(folder_);
  TENAX_RETURN_IF_ERROR(fs_.CreateDirs(dir));
  // A new checkpoint folder is itself an entry in its parent, which must be durable too.
  if (new_root) TENAX_RETURN_IF_ERROR(fs_.SyncDir(ParentDir(folder_)));
  return Status::Ok();
}

Status CheckpointStore::WriteFiles(int64_t step,
                                   const std::vector<std::pair<std::string, std::string>>& files) {
  TENAX_RETURN_IF_ERROR(ValidateNames(NamesOf(files)));
  const std::string dir = StepDir(step);
  if (IsCommitted(step)) {
    return InvalidArgument(dir + " is already committed; its files cannot be rewritten");
  }
  // CreateDirs tolerates a folder another rank created concurrently.
  TENAX_RETURN_IF_ERROR(fs_.CreateDirs(dir));
  for (const auto& [name, bytes] : files) {
    Status st = fs_.WriteFileAtomic(JoinPath(dir, name), bytes);
    if (!st.ok()) return st.WithContext(fmt::format("saving checkpoint step {}", step));
  }
  return Status::Ok();
}

Status CheckpointStore::Commit(int64_t step, const nlohmann::json& layout,
                               const nlohmann::json& extra,
                               const std::vector<std::string>& expected_files, int64_t world_size) {
  if (!IsObjectOrNull(layout) || !IsObjectOrNull(extra) || world_size < 1) {
    return InvalidArgument("Commit needs JSON objects for layout and extra and world_size >= 1");
  }
  TENAX_RETURN_IF_ERROR(ValidateNames(expected_files));
  const std::string dir = StepDir(step);
  if (IsCommitted(step)) return InvalidArgument(dir + " is already committed");

  Manifest m;
  m.step = step;
  m.created_unix = static_cast<int64_t>(std::time(nullptr));
  m.world_size = world_size;
  m.layout = ObjectOrEmpty(layout);
  m.extra = ObjectOrEmpty(extra);
  // Checksums come from reading the files back, not from the bytes the caller handed over: the
  // manifest then vouches for what is on disk, and with several ranks this process never saw the
  // other ranks' bytes anyway.
  TENAX_ASSIGN_OR_RETURN(m.files, ReadEntries(step, expected_files));
  return CommitManifest(m);
}

Result<std::map<std::string, FileEntry>> CheckpointStore::ReadEntries(
    int64_t step, const std::vector<std::string>& names) {
  TENAX_RETURN_IF_ERROR(ValidateNames(names));
  const std::string dir = StepDir(step);
  std::map<std::string, FileEntry> entries;
  for (const auto& name : names) {
    const std::string path = JoinPath(dir, name);
    Result<std::string> bytes = fs_.ReadFile(path);
    if (!bytes.ok()) {
      if (bytes.status().code() != StatusCode::kNotFound) return bytes.status();
      return NotFound(
          fmt::format("cannot commit checkpoint step {}: {} is missing (did "
                      "WriteFiles succeed on every rank before Commit?)",
                      step, path));
    }
    entries[name] = FileEntry{bytes->size(), Crc32(*bytes)};
  }
  return entries;
}

Status CheckpointStore::CommitManifest(const Manifest& m) {
  const int64_t step = m.step;
  const std::string dir = StepDir(step);
  if (IsCommitted(step)) return InvalidArgument(dir + " is already committed");
  TENAX_RETURN_IF_ERROR(fs_.CreateDirs(dir));
  const std::string manifest_text = m.Serialize();
  // Order matters: the marker must reach disk after the manifest it vouches for, which
  // WriteFileAtomic's fsync before rename guarantees.
  TENAX_RETURN_IF_ERROR(fs_.WriteFileAtomic(JoinPath(dir, kManifestFile), manifest_text));
  TENAX_RETURN_IF_ERROR(
      fs_.WriteFileAtomic(JoinPath(dir, kCommitFile), CommitMarkerText(Crc32(manifest_text))));
  TENAX_RETURN_IF_ERROR(fs_.SyncDir(dir));
  TENAX_RETURN_IF_ERROR(fs_.SyncDir(folder_));  // the step folder's own entry
  committed_here_.insert(step);
  return Status::Ok();
}

Result<std::vector<int64_t>> CheckpointStore::ListStepDirs() {
  Result<std::vector<std::string>> names = fs_.ListDir(folder_);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return std::vector<int64_t>{};
    return names.status();
  }
  std::vector<int64_t> steps;
  for (const auto& name : *names) {
    if (auto step = ParseStepDirName(name)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::vector<int64_t>> CheckpointStore::ListCommitted() {
  TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListStepDirs());
  std::vector<int64_t> committed;
  for (int64_t s : steps) {
    if (IsCommitted(s)) committed.push_back(s);
  }
  return committed;
}

Status CheckpointStore::Verify(int64_t step) { return VerifyImpl(step, nullptr); }

Result<LoadedCheckpoint> CheckpointStore::Load(int64_t step) {
  LoadedCheckpoint out;
  TENAX_RETURN_IF_ERROR(VerifyImpl(step, &out));
  return out;
}

Status CheckpointStore::VerifyImpl(int64_t step, LoadedCheckpoint* out) {
  const std::string dir = StepDir(step);
  if (!fs_.Exists(dir)) {
    return NotFound(fmt::format("no checkpoint for step {}: {} does not exist", step, dir));
  }
  const std::string marker_path = JoinPath(dir, kCommitFile);
  Result<std::string> marker = fs_.ReadFile(marker_path);
  if (!marker.ok()) {
    if (marker.status().code() != StatusCode::kNotFound) return marker.status();
    return NotFound(
        fmt::format("{} is not a committed checkpoint (no {} marker: its save was "
                    "interrupted); resume from an earlier step",
                    dir, kCommitFile));
  }
  TENAX_ASSIGN_OR_RETURN(uint32_t manifest_crc, ParseCommitMarker(*marker, marker_path));

  const std::string manifest_path = JoinPath(dir, kManifestFile);
  Result<std::string> manifest_text = fs_.ReadFile(manifest_path);
  if (!manifest_text.ok()) {
    if (manifest_text.status().code() != StatusCode::kNotFound) return manifest_text.status();
    return DataError(fmt::format("{} is missing although {} exists{}", manifest_path, kCommitFile,
                                 kDamagedHint));
  }
  const uint32_t got_crc = Crc32(*manifest_text);
  if (got_crc != manifest_crc) {
    return DataError(fmt::format("checksum mismatch in {}: {} expects {}, got {}{}", manifest_path,
                                 kCommitFile, CrcHex(manifest_crc), CrcHex(got_crc), kDamagedHint));
  }
  TENAX_ASSIGN_OR_RETURN(Manifest m, Manifest::Parse(*manifest_text, manifest_path));
  if (m.step != step) {
    return DataError(fmt::format("{} says step {} but its folder is for step {}{}", manifest_path,
                                 m.step, step, kDamagedHint));
  }

  for (const auto& [name, entry] : m.files) {
    const std::string path = JoinPath(dir, name);
    Result<std::string> bytes = fs_.ReadFile(path);
    if (!bytes.ok()) {
      if (bytes.status().code() != StatusCode::kNotFound) return bytes.status();
      return DataError(fmt::format("missing file {}: listed in {} but absent{}", path,
                                   kManifestFile, kDamagedHint));
    }
    if (bytes->size() != entry.bytes) {
      return DataError(fmt::format("size mismatch in {}: expected {} bytes, got {}{}", path,
                                   entry.bytes, bytes->size(), kDamagedHint));
    }
    const uint32_t crc = Crc32(*bytes);
    if (crc != entry.crc32) {
      return DataError(fmt::format("checksum mismatch in {}: expected {}, got {}{}", path,
                                   CrcHex(entry.crc32), CrcHex(crc), kDamagedHint));
    }
    if (out != nullptr) out->files[name] = std::move(bytes).value();
  }
  if (out != nullptr) {
    out->step = step;
    out->dir = dir;
    out->manifest_json = m.ToJson();
    out->manifest = std::move(m);
  }
  return Status::Ok();
}

Result<int64_t> CheckpointStore::LatestGood() {
  TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> committed, ListCommitted());
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    Status st = Verify(*it);
    if (st.ok()) return *it;
    log::Warn("skipping checkpoint step {}: {}", *it, st.message());
  }
  if (committed.empty()) return NotFound("no committed checkpoint in " + folder_);
  // Not NotFound: a caller treating NotFound as "fresh run" must not silently discard a run
  // whose every checkpoint is damaged.
  return DataError(
      fmt::format("none of the {} committed checkpoints in {} verifies (see the "
                  "warnings above); restore them or start a new run folder",
                  committed.size(), folder_));
}

Result<std::vector<std::string>> CheckpointStore::SetAsideNewerThan(int64_t step) {
  TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListStepDirs());
  std::vector<std::string> moved;
  for (int64_t s : steps) {
    if (s <= step || !IsCommitted(s)) continue;  // uncommitted leftovers are Prepare's job
    const std::string suffix = Verify(s).ok() ? ".superseded" : ".damaged";
    std::string target = StepDir(s) + suffix;
    for (int i = 1; fs_.Exists(target); ++i) target = StepDir(s) + suffix + "." + std::to_string(i);
    TENAX_RETURN_IF_ERROR(fs_.Rename(StepDir(s), target));
    committed_here_.erase(s);
    moved.push_back(target);
  }
  return moved;
}

Status CheckpointStore::RemoveStepDir(int64_t step) {
  const std::string dir = StepDir(step);
  const std::string doomed = dir + kDeletingSuffix;
  TENAX_RETURN_IF_ERROR(fs_.RemoveAll(doomed));  // a crashed earlier delete of the same step
  TENAX_RETURN_IF_ERROR(fs_.Rename(dir, doomed));
  return fs_.RemoveAll(doomed);
}

Status CheckpointStore::Prune(int64_t keep_latest) {
  if (keep_latest < 0) {
    return InvalidArgument(
        fmt::format("keep_latest must be >= 0 (0 keeps all), got {}", keep_latest));
  }
  TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListStepDirs());
  std::vector<int64_t> committed;
  for (int64_t s : steps) {
    if (IsCommitted(s)) committed.push_back(s);
  }
  if (committed.empty()) return Status::Ok();

  std::set<int64_t> keep;
  if (keep_latest == 0 || static_cast<size_t>(keep_latest) >= committed.size()) {
    keep.insert(committed.begin(), committed.end());
  } else {
    keep.insert(committed.end() - keep_latest, committed.end());
    for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
      if (committed_here_.count(*it) > 0 || Verify(*it).ok()) {
        if (keep.insert(*it).second) {
          log::Warn(
              "keeping checkpoint step {} beyond keep_latest={}: it is the newest one "
              "that verifies",
              *it, keep_latest);
        }
        break;
      }
    }
  }
  for (int64_t s : steps) {
    const bool is_committed = std::binary_search(committed.begin(), committed.end(), s);
    // Uncommitted folders newer than the newest commit may be a save still in progress.
    const bool drop = is_committed ? keep.count(s) == 0 : s < committed.back();
    if (drop) TENAX_RETURN_IF_ERROR(RemoveStepDir(s));
  }
  // Leftovers of a RemoveStepDir interrupted between its rename and its delete.
  TENAX_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.ListDir(folder_));
  for (const auto& name : names) {
    const size_t n = std::string_view(kDeletingSuffix).size();
    if (name.size() > n && name.compare(name.size() - n, n, kDeletingSuffix) == 0 &&
        ParseStepDirName(name.substr(0, name.size() - n))) {
      TENAX_RETURN_IF_ERROR(fs_.RemoveAll(JoinPath(folder_, name)));
    }
  }
  return Status::Ok();
}

Result<std::pair<std::string, int64_t>> ResolveCheckpointPath(FileSystem& fs,
                                                              const std::string& path) {
  const std::string p = StripTrailingSlashes(path);
  if (!fs.Exists(p)) {
    return NotFound(
        fmt::format("checkpoint path {} does not exist; pass a checkpoint folder or "
                    "one of its step_XXXXXXXX folders",
                    p));
  }
  const std::string base = std::filesystem::path(p).filename().string();
  if (std::optional<int64_t> step = ParseStepDirName(base)) {
    if (!fs.Exists(JoinPath(p, kCommitFile))) {
      return NotFound(
          fmt::format("{} is not a committed checkpoint (no {} marker: its save was "
                      "interrupted); pass an earlier step folder, or the checkpoint "
                      "folder to pick the newest good one",
                      p, kCommitFile));
    }
    return std::make_pair(ParentDir(p), *step);
  }
  CheckpointStore store(fs, p);
  Result<int64_t> latest = store.LatestGood();
  if (!latest.ok()) return latest.status().WithContext("resolving checkpoint path " + p);
  return std::make_pair(p, *latest);
}

}  // namespace tenax::ckpt
