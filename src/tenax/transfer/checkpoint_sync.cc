// The folder half of checkpoint_sync.h: Reconcile, the replica pushes and setting unaccepted
// commits aside. The invariant Reconcile keeps is the store's: a COMMITTED marker is written
// only after every file it vouches for is in the folder with the manifest's size and CRC-32.
#include "tenax/transfer/checkpoint_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "tenax/checkpoint/memory_replica.h"  // ReadCommittedManifest
#include "tenax/checkpoint/store.h"
#include "tenax/core/crc32.h"
#include "tenax/core/log.h"

namespace tenax::transfer {
namespace {

constexpr const char* kUnacceptedSuffix = ".unaccepted";

bool Matches(const std::string& bytes, const ckpt::FileEntry& entry) {
  return bytes.size() == entry.bytes && Crc32(bytes) == entry.crc32;
}

std::string Mismatch(const std::string& bytes, const ckpt::FileEntry& entry) {
  if (bytes.size() != entry.bytes) {
    return fmt::format("{} bytes, the manifest says {}", bytes.size(), entry.bytes);
  }
  return fmt::format("CRC-32 {}, the manifest says {}", ckpt::CrcHex(Crc32(bytes)),
                     ckpt::CrcHex(entry.crc32));
}

// Renames `dir` to dir + suffix (+ ".1", ".2", ... when taken); returns the new name.
Result<std::string> MoveAside(FileSystem& fs, const std::string& dir, const std::string& suffix) {
  std::string target = dir + suffix;
  for (int i = 1; fs.Exists(target); ++i) target = dir + suffix + "." + std::to_string(i);
  TENAX_RETURN_IF_ERROR(fs.Rename(dir, target));
  return target;
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

}  // namespace

int ReconcileReport::fetched() const {
  return static_cast<int>(std::count_if(files.begin(), files.end(),
                                        [](const FileOrigin& f) { return f.source != "local"; }));
}

std::string ReconcileReport::Summary(const std::string& folder) const {
  std::map<std::string, int> by_source;
  int replaced = 0;
  for (const auto& f : files) {
    ++by_source[f.source];
    replaced += f.replaced ? 1 : 0;
  }
  std::vector<std::string> parts;
  for (const auto& [source, n] : by_source) {
    parts.push_back(source == "local" ? fmt::format("{} local", n)
                                      : fmt::format("{} from {}", n, source));
  }
  std::string s = fmt::format("checkpoint step {} in {}: {}", step, folder, Join(parts, ", "));
  if (replaced > 0) s += fmt::format(" ({} damaged ones replaced)", replaced);
  if (!set_aside.empty()) s += "; a different commit moved aside to " + set_aside;
  s += committed ? "; committed" : "; was already committed";
  return s;
}

Result<ReconcileReport> Reconcile(FileSystem& fs, const std::string& folder,
                                  const ckpt::Manifest& manifest,
                                  const std::vector<FilePeer>& peers, const std::string& secret,
                                  const ReconcileOptions& options) {
  const int64_t step = manifest.step;
  if (step < 0)
    return InvalidArgument(fmt::format("reconcile: checkpoint step {} is negative", step));
  for (const auto& [name, entry] : manifest.files) {
    Status st = ckpt::ValidateDataFileName(name);
    if (!st.ok()) return st.WithContext(fmt::format("reconcile of checkpoint step {}", step));
  }
  ckpt::CheckpointStore store(fs, folder);
  const std::string dir = store.StepDir(step);
  ReconcileReport report;
  report.step = step;

  // A folder committed with this manifest needs only its missing files; one committed with
  // another (a fenced rank's commit, or another job's) goes aside, its files still usable.
  bool committed_same = false;
  if (fs.Exists(JoinPath(dir, ckpt::kCommitFile))) {
    Result<ckpt::Manifest> local = ckpt::ReadCommittedManifest(fs, store, step);
    if (local.ok() && local->ToJson() == manifest.ToJson()) {
      committed_same = true;
    } else {
      TENAX_ASSIGN_OR_RETURN(report.set_aside, MoveAside(fs, dir, kUnacceptedSuffix));
      log::Warn(
          "{} was committed with another manifest than the job's commit of step {} ({}); "
          "moved it aside to {}",
          dir, step, local.ok() ? "different files or layout" : local.status().message(),
          report.set_aside);
    }
  }

  bool made_dirs = false;
  const auto write = [&](const std::string& name, const std::string& bytes) -> Status {
    if (!made_dirs) {
      const bool new_root = !fs.Exists(folder);
      TENAX_RETURN_IF_ERROR(fs.CreateDirs(dir));
      // A new checkpoint folder is an entry in its parent, which must be durable too.
      if (new_root) TENAX_RETURN_IF_ERROR(fs.SyncDir(ParentDir(folder)));
      made_dirs = true;
    }
    return fs.WriteFileAtomic(JoinPath(dir, name), bytes);
  };

  std::map<std::string, std::string> unreachable;  // peer endpoint -> why, for this call
  std::vector<std::string> failures;
  bool any_unreachable = false;
  for (const auto& [name, entry] : manifest.files) {
    FileOrigin origin{name, "", false};
    Result<std::string> have = fs.ReadFile(JoinPath(dir, name));
    if (have.ok() && Matches(*have, entry)) {
      origin.source = "local";
      report.files.push_back(origin);
      continue;
    }
    // A file that cannot be read (an I/O error) counts as damaged: replacing it may still work.
    const bool present = have.ok() || have.status().code() != StatusCode::kNotFound;
    origin.replaced = present;
    std::vector<std::string> tries;
    if (present) {
      tries.push_back("this folder: " +
                      (have.ok() ? Mismatch(*have, entry) : have.status().message()));
    }
    std::optional<std::string> got;
    // Sources on this node first: no network, and the set-aside folder usually has most files.
    std::vector<std::pair<std::string, std::string>> local_sources;
    if (!report.set_aside.empty()) {
      local_sources.emplace_back("set-aside " + report.set_aside, JoinPath(report.set_aside, name));
    }
    if (!options.local_replica_root.empty()) {
      local_sources.emplace_back("local replica",
                                 ReplicaPath(options.local_replica_root, step, name));
    }
    for (const auto& [source, path] : local_sources) {
      Result<std::string> bytes = fs.ReadFile(path);
      if (!bytes.ok()) {
        tries.push_back(source + ": " + bytes.status().message());
      } else if (!Matches(*bytes, entry)) {
        tries.push_back(source + ": " + Mismatch(*bytes, entry));
      } else {
        got = std::move(bytes).value();
        origin.source = source;
        break;
      }
    }
    for (size_t i = 0; !got && i < peers.size(); ++i) {
      const FilePeer& peer = peers[i];
      if (auto it = unreachable.find(peer.endpoint); it != unreachable.end()) {
        tries.push_back(peer.label() + ": not asked (unreachable earlier: " + it->second + ")");
        continue;
      }
      // The peer's folder copy first; if that one does not match, the copy in its RAM may.
      for (PeerSource from : {PeerSource::kAny, PeerSource::kReplica}) {
        Result<FetchedFile> fetched =
            FetchCheckpointFile(peer, secret, step, name, options.transfer, from);
        if (!fetched.ok()) {
          // Asking for the replica after a mismatch: a 404 there adds nothing worth reporting.
          if (from == PeerSource::kAny || fetched.status().code() != StatusCode::kNotFound) {
            tries.push_back(fetched.status().message());
          }
          if (fetched.status().code() == StatusCode::kUnavailable) {
            unreachable[peer.endpoint] = fetched.status().message();
            any_unreachable = true;
          }
          break;
        }
        if (Matches(fetched->bytes, entry)) {
          origin.source = peer.label() + " (" + fetched->source + ")";
          got = std::move(fetched->bytes);
          break;
        }
        tries.push_back(fmt::format("{} ({}): {}", peer.label(), fetched->source,
                                    Mismatch(fetched->bytes, entry)));
        if (fetched->source != "folder") break;  // the replica was what did not match
      }
    }
    if (!got) {
      if (tries.empty()) tries.push_back("no source to try (no peers given)");
      failures.push_back(fmt::format("{} [{}]", name, Join(tries, "; ")));
      continue;
    }
    Status st = write(name, *got);
    if (!st.ok()) return st.WithContext(fmt::format("reconcile of checkpoint step {}", step));
    report.files.push_back(origin);
  }
  if (!failures.empty()) {
    const std::string msg = fmt::format(
        "cannot complete checkpoint step {} in {}: {} of {} files could not be obtained: {}", step,
        folder, failures.size(), manifest.files.size(), Join(failures, "; "));
    return any_unreachable ? Unavailable(msg) : NotFound(msg);
  }
  if (committed_same) return report;

  Status st = store.CommitManifest(manifest);
  if (!st.ok()) {
    // Another agent sharing this folder may have committed the same manifest meanwhile.
    Result<ckpt::Manifest> now = ckpt::ReadCommittedManifest(fs, store, step);
    if (!now.ok() || now->ToJson() != manifest.ToJson()) {
      return st.WithContext(fmt::format("reconcile of checkpoint step {}", step));
    }
    return report;
  }
  report.committed = true;
  return report;
}

// --- replicas --------------------------------------------------------------------------------

Result<PushReport> PushReplicas(FileSystem& fs, const std::string& folder,
                                const ckpt::Manifest& manifest, const FilePeer& peer,
                                const std::string& secret, const PushOptions& options) {
  PushReport report;
  report.step = manifest.step;
  const std::set<std::string> only(options.only.begin(), options.only.end());
  const std::string dir = JoinPath(folder, ckpt::StepDirName(manifest.step));
  for (const auto& [name, entry] : manifest.files) {
    if (!only.empty() && only.count(name) == 0) continue;
    if (options.cancelled && options.cancelled()) {
      return Unavailable(fmt::format("push of checkpoint step {} to {} cancelled after {} files",
                                     manifest.step, peer.label(), report.pushed.size()));
    }
    Result<std::string> bytes = fs.ReadFile(JoinPath(dir, name));
    if (!bytes.ok()) {
      if (bytes.status().code() == StatusCode::kNotFound) continue;  // another node's file
      return bytes.status();
    }
    if (!Matches(*bytes, entry)) {
      log::Warn("not pushing {} as a replica: {}", JoinPath(dir, name), Mismatch(*bytes, entry));
      report.skipped_damaged.push_back(name);
      continue;
    }
    TENAX_RETURN_IF_ERROR(
        PushReplicaFile(peer, secret, manifest.step, name, *bytes, options.transfer));
    report.pushed.push_back(name);
    report.bytes += bytes->size();
  }
  return report;
}

ReplicaPusher::ReplicaPusher(FileSystem& fs, std::string folder, std::string secret,
                             PushOptions options, DoneFn on_done)
    : fs_(fs),
      folder_(std::move(folder)),
      secret_(std::move(secret)),
      options_(std::move(options)),
      on_done_(std::move(on_done)),
      thread_([this] { Run(); }) {}

ReplicaPusher::~ReplicaPusher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    pending_.reset();
  }
  cv_.notify_all();
  thread_.join();
}

void ReplicaPusher::Submit(ckpt::Manifest manifest, FilePeer peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_ && pending_->manifest.step > manifest.step) return;
    pending_ = Job{std::move(manifest), std::move(peer)};
  }
  cv_.notify_all();
}

void ReplicaPusher::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || pending_.has_value(); });
      if (stop_) return;
      job = std::move(*pending_);
      pending_.reset();
    }
    const int64_t step = job.manifest.step;
    PushOptions options = options_;
    options.cancelled = [this] {
      if (options_.cancelled && options_.cancelled()) return true;
      std::lock_guard<std::mutex> lock(mu_);
      return stop_;  // not a newer step: this one is finished first (see the class comment)
    };
    Result<PushReport> result =
        PushReplicas(fs_, folder_, job.manifest, job.peer, secret_, options);
    if (on_done_) on_done_(step, result);
  }
}

// --- unaccepted commits ----------------------------------------------------------------------

namespace {

// The manifest CRC in step `s`'s COMMITTED marker (nullopt: unreadable).
std::optional<uint32_t> CommittedCrc(FileSystem& fs, const ckpt::CheckpointStore& store,
                                     int64_t s) {
  const std::string marker_path = JoinPath(store.StepDir(s), ckpt::kCommitFile);
  Result<std::string> marker = fs.ReadFile(marker_path);
  if (!marker.ok()) return std::nullopt;
  Result<uint32_t> parsed = ckpt::ParseCommitMarker(*marker, marker_path);
  if (!parsed.ok()) return std::nullopt;
  return *parsed;
}

// Moves aside every committed step of `folder` for which `why(step, crc)` gives a reason (logged),
// and returns where each went. `crc()` reads the step's manifest CRC from its COMMITTED marker
// (nullopt: unreadable), only when `why` asks.
template <typename Why>
Result<std::vector<std::string>> SetAsideCommits(FileSystem& fs, const std::string& folder,
                                                 Why why) {
  ckpt::CheckpointStore store(fs, folder);
  TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> committed, store.ListCommitted());
  std::vector<std::string> moved;
  for (int64_t s : committed) {
    const char* reason = why(s, [&] { return CommittedCrc(fs, store, s); });
    if (reason == nullptr) continue;
    TENAX_ASSIGN_OR_RETURN(std::string target, MoveAside(fs, store.StepDir(s), kUnacceptedSuffix));
    log::Warn("moved {} aside to {}: {}", store.StepDir(s), target, reason);
    moved.push_back(std::move(target));
  }
  return moved;
}

}  // namespace

Result<std::vector<std::string>> SetAsideUnacceptedCommits(
    FileSystem& fs, const std::string& folder, const std::map<int64_t, uint32_t>& accepted,
    int64_t min_step) {
  return SetAsideCommits(fs, folder, [&](int64_t s, const auto& crc) -> const char* {
    if (s < min_step) return nullptr;
    const auto it = accepted.find(s);
    if (it == accepted.end()) return "the job has no record of committing this step";
    if (crc() == it->second) return nullptr;
    return "the job committed this step with another manifest";
  });
}

Result<std::vector<std::string>> SetAsideDroppedCommits(
    FileSystem& fs, const std::string& folder, const std::map<int64_t, uint32_t>& dropped) {
  return SetAsideCommits(fs, folder, [&](int64_t s, const auto& crc) -> const char* {
    const auto it = dropped.find(s);
    if (it == dropped.end() || crc() != it->second) return nullptr;
    return "the job dropped this commit (no live node held all of it)";
  });
}

}  // namespace tenax::transfer
