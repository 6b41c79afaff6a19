// Checkpoint files across nodes without shared storage. On several nodes each node's ranks write
// their own files of a step into the node's own checkpoint folder, and node 0's rank 0 commits
// the step (manifest.json + COMMITTED, CheckpointStore::CommitManifest) once the node agents
// recorded the commit in etcd. So a committed step is spread over the nodes; resuming needs every
// file of it in every node's folder. This module moves those files between the node agents:
//
//   CheckpointFileServer   each agent serves its node's checkpoint files (and the replicas it
//                          holds for other nodes) and accepts replicas into a RAM folder
//   FetchCheckpointFile    one file of a step from a peer's server
//   PushReplicaFile        one file of a step into a peer's RAM replica store
//   Reconcile              makes this node's folder hold the whole committed step (fetching what
//                          it lacks from the peers, every byte checked against the manifest) and
//                          commits it there
//   PushReplicas / ReplicaPusher
//                          after a commit, copies this node's files of the step into a peer's RAM,
//                          so a node whose disk is gone can be rebuilt from another node's memory
//   SetAsideUnacceptedCommits
//                          moves aside committed steps the job never accepted (not recorded in
//                          etcd: newer than the newest commit, or committed by a fenced rank)
//   SetAsideDroppedCommits moves aside committed steps the job dropped (lost with a node)
//
// Wire protocol (HTTP/1.1, one request per connection). Every request carries the job's secret in
// the X-Tenax-Job-Secret header (the secret the first agent put in etcd); a request without it, or
// with another one, is answered 403 and nothing is served or stored. Steps are decimal numbers,
// file names are checkpoint data file names (ckpt::ValidateDataFileName: no '/', no leading '.'),
// percent-encoded in the path:
//   GET /v1/steps/<step>/files/<name>     200 with the bytes (X-Tenax-Source: folder | replica),
//                                         404 when the node has neither; "?from=replica" skips
//                                         the folder
//   PUT /v1/steps/<step>/replicas/<name>  X-Tenax-Crc32: the body's CRC-32 (8 hex digits);
//                                         200 stored, 400 bad name or CRC, 409 a newer step held
// Trust comes from the manifest, not from the sender: a fetched file is used only when its size
// and CRC-32 match the committed manifest, so a stale, damaged or foreign file is never restored.
// The secret keeps nodes outside the job (and other jobs) from reading model state or filling a
// node's RAM; it travels in clear text, like the transfers themselves (a private network is
// assumed; etcd itself is reached over TLS).
//
// Errors are Status values naming the peer and the file: Unavailable when a peer could not be
// reached or stopped answering (connect, or a read or write past the timeout), InvalidArgument
// when it refused (wrong secret, bad name, a stale replica), NotFound when it has no such file,
// IoError when it failed to store a replica, DataError for bytes that do not match a manifest.
//
// Without cpp-httplib (Debian's libcpp-httplib-dev) the server and the transfers return
// InvalidArgument saying how to enable them; Reconcile of a folder that needs nothing and
// SetAsideUnacceptedCommits still work.
//
// Non-goals: files larger than memory (each file is held in memory whole, as CheckpointStore
// does); TLS between agents; parallel fetches (Reconcile fetches one file at a time).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tenax/checkpoint/manifest.h"
#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::transfer {

// True when this build can serve and transfer checkpoint files (cpp-httplib was found).
bool CheckpointTransferAvailable();

inline constexpr const char* kJobSecretHeader = "X-Tenax-Job-Secret";

// Another node's CheckpointFileServer.
struct FilePeer {
  std::string name;      // for messages, e.g. "node 1 (agent b-4711)"; empty: the endpoint
  std::string endpoint;  // "HOST:PORT" (a name or an IPv4 address)

  std::string label() const { return name.empty() ? endpoint : name; }
};

struct TransferOptions {
  // Bounds the TCP connect to a peer.
  std::chrono::milliseconds connect_timeout{2000};
  // Bounds each read and each write on the connection (not the whole transfer: a large file
  // that keeps flowing is never cut off); a peer that stops answering fails after this long.
  std::chrono::milliseconds io_timeout{30000};
};

// Where the server keeps a replica: <replica_root>/step_XXXXXXXX/<name>.
std::string ReplicaPath(const std::string& replica_root, int64_t step, const std::string& name);

struct FileServerOptions {
  std::string address = "127.0.0.1";  // the address to bind (the agent's --rdzv-address)
  int port = 0;                       // 0: any free port (read it back with port())
  std::string checkpoint_folder;      // this node's checkpoint folder (need not exist yet)
  std::string replica_root;  // RAM folder for replicas, e.g. /dev/shm/tenax-replicas-<job>-<agent>
  std::string secret;        // the job's secret; requests must present it
  std::chrono::milliseconds io_timeout{30000};  // each read / write on a client connection
  int threads = 4;                              // requests served at once
};

// Serves a node's checkpoint files to the job's other agents and holds their replicas in RAM.
//
// GET a file of a step: from <checkpoint_folder>/step_XXXXXXXX/<name> if it is there (committed
// or not: the reader checks it against the manifest), else from the replica store. PUT a replica:
// written atomically to <replica_root>/step_XXXXXXXX/<name> after its CRC-32 header is checked.
// The store keeps the newest two steps: the first file of a newer step drops every step older
// than the one held before it (after the new file is written), and a file of an older step than
// the newest held is refused (409: a stale push). So between the first and the last file of a
// newer step the store holds part of it and all of the one before; a node lost in that window is
// restored from that older commit (the node agent drops a commit no live node can complete, and
// the job resumes from the one before). Replicas outlive the server (a new server on the same
// root serves them); DropReplicasNewerThan removes them, and whoever owns the root removes it
// (the node agent: an OwnedFolder that goes with the agent).
//
// Thread safety: requests are served on the server's own threads (FileServerOptions::threads);
// replica writes and drops are serialised by a mutex, reads need none (files are replaced by
// rename, never rewritten in place). All public methods may be called from any thread. The
// destructor stops accepting connections and waits for the requests in flight (each bounded by
// io_timeout per read or write). Like every cpp-httplib server, it sets SIGPIPE to be ignored
// in the process (tenax launch ignores it anyway).
class CheckpointFileServer {
 public:
  // Binds the address and port (failing with a message naming them), creates the replica root,
  // and starts serving: once Start returns, peers can connect. The secret must not be empty.
  static Result<std::unique_ptr<CheckpointFileServer>> Start(FileServerOptions options);
  ~CheckpointFileServer();
  CheckpointFileServer(const CheckpointFileServer&) = delete;
  CheckpointFileServer& operator=(const CheckpointFileServer&) = delete;

  int port() const;
  // "ADDRESS:PORT" as bound, for FilePeer::endpoint (an agent bound to 0.0.0.0 publishes its
  // host's address instead).
  std::string endpoint() const;
  // The newest step of which the replica store holds files (nullopt: none).
  std::optional<int64_t> replica_step() const;
  // Removes the replicas of every step newer than `step` (-1: all), e.g. once the job resumed
  // from an older step than the one held, so that the store accepts that step's replicas again.
  Status DropReplicasNewerThan(int64_t step);
  // Requests answered 403 (wrong or missing secret) so far.
  int64_t refused() const;

 private:
  struct Impl;
  explicit CheckpointFileServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct FetchedFile {
  std::string bytes;
  std::string source;  // where the peer found it: "folder" or "replica"
};

// Where a peer may look for a file: its checkpoint folder, else its replicas (kAny); or its
// replicas only (kReplica: its folder's copy was already found not to match).
enum class PeerSource { kAny, kReplica };

// Fetches file `name` of `step` from `peer`. Blocks until done or failed (see TransferOptions).
// The bytes are not checked against anything: callers compare them with their manifest.
Result<FetchedFile> FetchCheckpointFile(const FilePeer& peer, const std::string& secret,
                                        int64_t step, const std::string& name,
                                        const TransferOptions& options = {},
                                        PeerSource from = PeerSource::kAny);
// Stores `bytes` as `peer`'s replica of file `name` of `step`. Blocks until the peer confirmed
// that the file is written (or failed).
Status PushReplicaFile(const FilePeer& peer, const std::string& secret, int64_t step,
                       const std::string& name, std::string_view bytes,
                       const TransferOptions& options = {});

struct FileOrigin {
  std::string name;
  // "local", "set-aside <folder>", "local replica", or "<peer label> (folder|replica)".
  std::string source;
  bool replaced = false;  // the folder had this file with other bytes (damaged); now replaced
};

struct ReconcileReport {
  int64_t step = 0;
  std::vector<FileOrigin> files;  // every file of the manifest, in name order
  bool committed = false;         // this call wrote manifest.json + COMMITTED
  // A folder committed for this step with another manifest, moved aside (empty: none).
  std::string set_aside;

  int fetched() const;  // files not already good in the folder
  // One line for the log: "step 100 in /ckpt: 4 local, 2 from node 1 (folder); committed".
  std::string Summary(const std::string& folder) const;
};

struct ReconcileOptions {
  TransferOptions transfer;
  // This node's own replica store (FileServerOptions::replica_root): tried before the peers,
  // without a network round trip. Empty: not used.
  std::string local_replica_root;
};

// Makes `folder`'s step `manifest.step` complete and committed. Every file the manifest lists
// must end up in the step folder with the manifest's size and CRC-32: a file already there and
// matching is kept (not rewritten); a missing or different one is taken from the first source
// that has matching bytes: this node's replica store, then each peer in turn (its folder's copy,
// and when that does not match, its replica; a peer that could not be reached is not asked
// again in this call). Fetched bytes are checked before they are
// written, atomically, into the step folder. Then the manifest is committed with
// CheckpointStore::CommitManifest, unless the folder is already committed with this same
// manifest. A folder committed for this step with a different manifest (a fenced rank's commit)
// is first moved aside to step_XXXXXXXX.unaccepted (never deleted) and its matching files used.
// A folder that is already complete and committed is only read: nothing is written.
//
// Crash safety: files are written before the commit marker, each atomically, so a crash leaves
// the step uncommitted (or committed and complete); running Reconcile again finishes the job,
// fetching only what is still missing. Safe to run concurrently on one shared folder (same
// manifest): the files and the commit are the same bytes, written by rename.
//
// Errors: InvalidArgument for a bad manifest (a negative step, a bad file name); when some files
// could not be obtained, NotFound (every source answered, none had matching bytes) or
// Unavailable (some peer could not be reached), naming every such file and, for each, every
// source tried and what it answered; files already fetched stay (a retry needs fewer). Blocks for
// the transfers; a peer that does not answer costs one connect_timeout (or io_timeout, when it
// accepts the connection and then hangs) once per call, as it is not asked again.
Result<ReconcileReport> Reconcile(FileSystem& fs, const std::string& folder,
                                  const ckpt::Manifest& manifest,
                                  const std::vector<FilePeer>& peers, const std::string& secret,
                                  const ReconcileOptions& options = {});

struct PushReport {
  int64_t step = 0;
  std::vector<std::string> pushed;  // files now held by the peer
  // Listed in the manifest and present here, but with other bytes: not pushed (a replica must
  // match the commit).
  std::vector<std::string> skipped_damaged;
  uint64_t bytes = 0;  // total bytes pushed
};

struct PushOptions {
  TransferOptions transfer;
  // Push only these files (e.g. the ones this node's ranks wrote); empty: every file of the
  // manifest present in the folder.
  std::vector<std::string> only;
  // Checked before each file: true abandons the push (Unavailable "cancelled").
  std::function<bool()> cancelled;
};

// Pushes the files of committed step `manifest.step` that are in `folder` (and match the
// manifest) to `peer`'s replica store, one after another. Files absent here are skipped (another
// node wrote them). Blocks until done; errors name the peer and the file that failed, and stop
// the push there.
Result<PushReport> PushReplicas(FileSystem& fs, const std::string& folder,
                                const ckpt::Manifest& manifest, const FilePeer& peer,
                                const std::string& secret, const PushOptions& options = {});

// PushReplicas on a background thread, so the agent hands a commit over and goes on. A push in
// flight is finished, then the newest step submitted meanwhile is pushed: a submitted step
// replaces one still waiting, and an older submission than the one waiting is ignored. Finishing
// is what keeps a whole replica in the peer's memory when commits come faster than pushes (a
// newer step cancelling the one in flight would leave none, and a node lost then takes its files
// with it); the peer's store keeps the newest two steps, so the one just finished stays usable
// while the next is on its way.
//
// Thread safety: Submit may be called from any thread. `on_done` runs on the pusher's thread,
// once per push started (with its report or error), and must not destroy the pusher. The
// destructor drops the waiting push, cancels the one in flight after its current file, and
// joins the thread.
class ReplicaPusher {
 public:
  using DoneFn = std::function<void(int64_t step, const Result<PushReport>& result)>;

  // `fs` must outlive the pusher. options.cancelled, if set, is consulted as well.
  ReplicaPusher(FileSystem& fs, std::string folder, std::string secret, PushOptions options = {},
                DoneFn on_done = nullptr);
  ~ReplicaPusher();
  ReplicaPusher(const ReplicaPusher&) = delete;
  ReplicaPusher& operator=(const ReplicaPusher&) = delete;

  // Non-blocking: push `manifest`'s step to `peer` as soon as the thread is free.
  void Submit(ckpt::Manifest manifest, FilePeer peer);

 private:
  struct Job {
    ckpt::Manifest manifest;
    FilePeer peer;
  };
  void Run();

  // Constant after construction.
  FileSystem& fs_;
  const std::string folder_;
  const std::string secret_;
  const PushOptions options_;
  const DoneFn on_done_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> pending_;  // guarded by mu_
  bool stop_ = false;           // guarded by mu_

  std::thread thread_;  // last: starts after every member above is initialised
};

// Moves aside every committed step in `folder` from `min_step` on whose (step, manifest CRC)
// pair is not in `accepted` (step -> ckpt::ManifestCrc of the commit the job recorded): a commit
// newer than the job's newest, or one written by a rank of an old generation. Each goes to
// step_XXXXXXXX.unaccepted (.1, .2, ... if taken), never deleted, out of the step_ namespace so
// that no restore picks it and the step can be committed again. Steps below `min_step` are left
// alone (pass the oldest step the job still has a record of, so that older checkpoints whose
// records were dropped stay usable); uncommitted folders are left to CheckpointStore::Prepare.
// Returns the folders it moved. Only reads the COMMITTED markers (not the data files).
Result<std::vector<std::string>> SetAsideUnacceptedCommits(
    FileSystem& fs, const std::string& folder, const std::map<int64_t, uint32_t>& accepted,
    int64_t min_step = 0);

// Moves aside (as above) every committed step in `folder` whose (step, manifest CRC) pair is in
// `dropped`: commits the job recorded and later dropped because no live node held all of them.
// A step of that number with another manifest (another job's) is left alone.
Result<std::vector<std::string>> SetAsideDroppedCommits(FileSystem& fs, const std::string& folder,
                                                        const std::map<int64_t, uint32_t>& dropped);

}  // namespace tenax::transfer
