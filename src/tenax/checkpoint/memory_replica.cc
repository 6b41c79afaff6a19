// A replica file: one line of JSON header ({"format": "tenax-replica", "step", "owner",
// "files": [{"name", "bytes", "crc32"}]}), a newline, then the files' bytes back to back.
#include "tenax/checkpoint/memory_replica.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "tenax/core/crc32.h"
#include "tenax/core/log.h"

namespace tenax::ckpt {
namespace {

constexpr const char* kReplicaFormat = "tenax-replica";
constexpr int kKeepSteps = 2;

std::string HolderDir(const std::string& root, int holder) {
  return JoinPath(root, fmt::format("holder-{:05d}", holder));
}

// "owner-RRRRR-step_XXXXXXXX.replica" (ReplicaPath's file name) -> (owner, step).
struct ReplicaName {
  int owner;
  int64_t step;
};
std::optional<ReplicaName> ParseReplicaName(const std::string& name) {
  constexpr size_t kPrefix = 6;  // "owner-"
  constexpr size_t kSuffix = 8;  // ".replica"
  const size_t dash = name.find('-', kPrefix);
  if (name.rfind("owner-", 0) != 0 || dash == std::string::npos || dash == kPrefix ||
      name.size() <= dash + 1 + kSuffix ||
      name.compare(name.size() - kSuffix, kSuffix, ".replica") != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(kPrefix, dash - kPrefix);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  std::optional<int64_t> step =
      ParseStepDirName(name.substr(dash + 1, name.size() - dash - 1 - kSuffix));
  if (!step) return std::nullopt;
  return ReplicaName{std::atoi(digits.c_str()), *step};
}

std::string Encode(int64_t step, int owner, const NamedFiles& files) {
  nlohmann::json list = nlohmann::json::array();
  size_t total = 0;
  for (const auto& [name, bytes] : files) {
    list.push_back({{"name", name}, {"bytes", bytes.size()}, {"crc32", CrcHex(Crc32(bytes))}});
    total += bytes.size();
  }
  std::string out =
      nlohmann::json{{"format", kReplicaFormat}, {"step", step}, {"owner", owner}, {"files", list}}
          .dump() +
      "\n";
  out.reserve(out.size() + total);
  for (const auto& f : files) out += f.second;
  return out;
}

}  // namespace

MemoryReplica::MemoryReplica(FileSystem& fs, std::string root, int rank, int world_size)
    : fs_(fs), root_(std::move(root)), rank_(rank), world_size_(std::max(world_size, 1)) {}

std::string MemoryReplica::ReplicaPath(int holder, int owner, int64_t step) const {
  return JoinPath(HolderDir(root_, holder),
                  fmt::format("owner-{:05d}-{}.replica", owner, StepDirName(step)));
}

Status MemoryReplica::Put(int64_t step, const NamedFiles& files) {
  const std::string blob = Encode(step, rank_, files);
  for (int holder : {rank_, peer()}) {
    TENAX_RETURN_IF_ERROR(fs_.CreateDirs(HolderDir(root_, holder)));
    TENAX_RETURN_IF_ERROR(fs_.WriteFileAtomic(ReplicaPath(holder, rank_, step), blob));
    if (peer() == rank_) break;  // a world of one: one copy
  }
  // Drop this rank's older copies beyond the newest kKeepSteps.
  for (int holder : {rank_, peer()}) {
    TENAX_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.ListDir(HolderDir(root_, holder)));
    std::vector<int64_t> steps;
    for (const auto& n : names) {
      const std::optional<ReplicaName> r = ParseReplicaName(n);
      if (r && r->owner == rank_) steps.push_back(r->step);
    }
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + kKeepSteps < steps.size(); ++i) {
      TENAX_RETURN_IF_ERROR(fs_.RemoveAll(ReplicaPath(holder, rank_, steps[i])));
    }
  }
  return Status::Ok();
}

Result<NamedFiles> MemoryReplica::ReadCopy(const std::string& path, int64_t step, int owner) {
  TENAX_ASSIGN_OR_RETURN(std::string blob, fs_.ReadFile(path));
  const size_t nl = blob.find('\n');
  if (nl == std::string::npos) return DataError(path + ": no replica header");
  nlohmann::json h = nlohmann::json::parse(blob.substr(0, nl), nullptr, false);
  if (h.is_discarded() || h.value("format", std::string()) != kReplicaFormat ||
      h.value("step", int64_t{-1}) != step || h.value("owner", -1) != owner) {
    return DataError(fmt::format("{}: not rank {}'s replica of step {}", path, owner, step));
  }
  NamedFiles files;
  size_t offset = nl + 1;
  for (const auto& f : h.value("files", nlohmann::json::array())) {
    const std::string name = f.value("name", std::string());
    const size_t n = f.value("bytes", size_t{0});
    if (offset + n > blob.size()) return DataError(path + ": truncated at " + name);
    std::string bytes = blob.substr(offset, n);
    offset += n;
    if (CrcHex(Crc32(bytes)) != f.value("crc32", std::string())) {
      return DataError(path + ": checksum mismatch in " + name);
    }
    files.emplace_back(name, std::move(bytes));
  }
  if (offset != blob.size()) return DataError(path + ": trailing bytes");
  return files;
}

Result<NamedFiles> MemoryReplica::Get(int64_t step, const Manifest& manifest) {
  if (manifest.step != step) {
    return InvalidArgument(fmt::format("manifest is for step {}, not {}", manifest.step, step));
  }
  std::string why;
  for (int holder : {rank_, peer()}) {
    const std::string path = ReplicaPath(holder, rank_, step);
    if (!fs_.Exists(path)) {
      why += fmt::format("; {} does not exist", path);
      continue;
    }
    Result<NamedFiles> files = ReadCopy(path, step, rank_);
    if (!files.ok()) {
      why += "; " + files.status().message();
      continue;
    }
    // Only bytes the committed manifest vouches for.
    bool match = true;
    for (const auto& [name, bytes] : *files) {
      auto it = manifest.files.find(name);
      if (it == manifest.files.end() || it->second.bytes != bytes.size() ||
          it->second.crc32 != Crc32(bytes)) {
        why += fmt::format("; {}: {} differs from the committed checkpoint", path, name);
        match = false;
        break;
      }
    }
    if (match) return files;
  }
  return NotFound(
      fmt::format("no usable memory replica of rank {}'s files for step {}{}", rank_, step, why));
}

Result<std::map<std::string, std::string>> MemoryReplica::Gather(int64_t step,
                                                                 const Manifest& manifest) {
  if (manifest.step != step) {
    return InvalidArgument(fmt::format("manifest is for step {}, not {}", manifest.step, step));
  }
  std::map<std::string, std::string> out;
  Result<std::vector<std::string>> holders = fs_.ListDir(root_);
  if (!holders.ok()) return NotFound(root_ + " holds no memory replicas");
  for (const std::string& holder : *holders) {
    if (holder.rfind("holder-", 0) != 0) continue;
    Result<std::vector<std::string>> names = fs_.ListDir(JoinPath(root_, holder));
    if (!names.ok()) continue;
    for (const std::string& name : *names) {
      const std::optional<ReplicaName> r = ParseReplicaName(name);
      if (!r || r->step != step) continue;
      Result<NamedFiles> files = ReadCopy(JoinPath(JoinPath(root_, holder), name), step, r->owner);
      if (!files.ok()) continue;  // a damaged copy: another holder may have a good one
      for (auto& [file, bytes] : *files) {
        auto it = manifest.files.find(file);
        if (out.count(file) > 0 || it == manifest.files.end() || it->second.bytes != bytes.size() ||
            it->second.crc32 != Crc32(bytes)) {
          continue;  // only bytes the committed manifest vouches for
        }
        out.emplace(file, std::move(bytes));
      }
    }
  }
  for (const auto& [file, entry] : manifest.files) {
    if (out.count(file) == 0) {
      return NotFound(
          fmt::format("no memory replica of {} of checkpoint step {} in {}", file, step, root_));
    }
  }
  return out;
}

Status MemoryReplica::DropHeld() {
  TENAX_RETURN_IF_ERROR(fs_.RemoveAll(HolderDir(root_, rank_)));
  std::error_code ec;
  std::filesystem::remove(root_, ec);  // only succeeds once the last holder folder is gone
  return Status::Ok();
}

Result<std::vector<std::string>> MemoryReplica::RepairStorage(CheckpointStore& store,
                                                              int64_t step) {
  TENAX_ASSIGN_OR_RETURN(Manifest manifest, ReadCommittedManifest(fs_, store, step));
  const std::string dir = store.StepDir(step);
  // Which of this rank's files does storage lack? Known from the replica's names, so check those.
  std::vector<std::string> bad;
  Result<NamedFiles> files = Get(step, manifest);
  if (!files.ok()) return files.status();
  for (const auto& [name, bytes] : *files) {
    Result<std::string> disk = fs_.ReadFile(JoinPath(dir, name));
    if (!disk.ok() || *disk != bytes) bad.push_back(name);
  }
  for (const auto& [name, bytes] : *files) {
    if (std::find(bad.begin(), bad.end(), name) == bad.end()) continue;
    log::Warn("restoring {} from the memory replica: missing or damaged on storage",
              JoinPath(dir, name));
    TENAX_RETURN_IF_ERROR(fs_.WriteFileAtomic(JoinPath(dir, name), bytes));
  }
  return bad;
}

Result<Manifest> ReadCommittedManifest(FileSystem& fs, CheckpointStore& store, int64_t step) {
  const std::string dir = store.StepDir(step);
  TENAX_ASSIGN_OR_RETURN(std::string marker, fs.ReadFile(JoinPath(dir, kCommitFile)));
  TENAX_ASSIGN_OR_RETURN(uint32_t crc, ParseCommitMarker(marker, JoinPath(dir, kCommitFile)));
  const std::string path = JoinPath(dir, kManifestFile);
  TENAX_ASSIGN_OR_RETURN(std::string text, fs.ReadFile(path));
  if (Crc32(text) != crc) return DataError(path + " does not match " + kCommitFile);
  TENAX_ASSIGN_OR_RETURN(Manifest m, Manifest::Parse(text, path));
  if (m.step != step) return DataError(fmt::format("{} says step {}, not {}", path, m.step, step));
  return m;
}

}  // namespace tenax::ckpt
