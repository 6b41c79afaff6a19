// A node agent's checkpoint files between nodes (node_agent.h; transfer/checkpoint_sync.h does the
// transfers): before this node's ranks resume, its checkpoint folder holds exactly the job's
// commits with the newest one complete (files fetched from the other nodes' folders and RAM
// replicas); after each commit, this node's files of it go to the next node's RAM, so that a node
// lost with its disk is rebuilt from there.
//
// The decisions are pure functions (which commits the job accepted or dropped, which files of a
// commit are this node's, which node keeps them, whether an injected fault drops the push),
// tested without an etcd or a peer; CheckpointMirror owns what serves and sends the files.
// Non-goals: deciding when a generation is current or who the agents are (the agent's view,
// passed in as values).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tenax/checkpoint/manifest.h"
#include "tenax/core/owned_folder.h"
#include "tenax/core/status.h"
#include "tenax/etcd/client.h"
#include "tenax/launch/rendezvous.h"
#include "tenax/protocol/fault_injection.h"
#include "tenax/transfer/checkpoint_sync.h"

namespace tenax::launch {

// An agent's replica folder is /dev/shm/<this><job id>-<agent id> (see OwnedFolder).
inline constexpr char kReplicaFolderPrefix[] = "tenax-replicas-";

// --- the decisions -----------------------------------------------------------------------------

// The manifest of a commits/<step> record ({"generation", "manifest"}); `where` names it in
// errors.
Result<ckpt::Manifest> CommitManifest(const std::string& record, const std::string& where);

// The job's commits as etcd holds them (commits/<step>); records that do not parse are none.
struct JobCommits {
  std::map<int64_t, uint32_t> accepted;  // step -> its manifest's CRC (ckpt::ManifestCrc)
  std::optional<ckpt::Manifest> newest;  // none: nothing committed (or all of it dropped)
};
JobCommits ParseCommits(const etcd::RangeResponse& commits);

// The commits the job dropped (dropped/<step>: lost with a node): step -> manifest CRC.
std::map<int64_t, uint32_t> ParseDrops(const etcd::RangeResponse& drops);

// Where `agents` other than `self` serve their checkpoint files (those without a server left out).
std::vector<transfer::FilePeer> FilePeersOf(const std::map<std::string, rdzv::AgentInfo>& agents,
                                            const std::string& self);

// The files of `m` that node `node_rank`'s ranks wrote (model-/optimizer-rankRRRRR-..., for its
// nproc_per_node ranks); node 0 also has the ones without a rank (train_state.json). On shared
// storage every node pushes its own.
ckpt::Manifest FilesOfNode(const ckpt::Manifest& m, int node_rank, int nproc_per_node);

// The agent that keeps node `node_rank`'s replicas: the next node's, in plan order (`nodes` has at
// least two).
const std::string& BuddyOf(const std::vector<std::string>& nodes, int node_rank);

// The injected push-loss fault (--inject push-loss:rank=R) that drops node `node_rank`'s pushes
// in `generation`, or null.
const protocol::Fault* PushLossFault(const std::vector<protocol::Fault>& faults, int node_rank,
                                     int nproc_per_node, int64_t generation);

// Where this node stands when a commit arrives, as the agent's view has it.
struct MirrorPlace {
  int64_t generation = -1;                        // the generation running here (-1: none)
  int node_rank = -1;                             // this node's in it (-1: none)
  std::vector<std::string> plan_nodes;            // its plan: [node rank] -> agent id
  std::map<std::string, rdzv::AgentInfo> agents;  // live agents as last read
};

// This node's files of a commit, and where they go.
struct ReplicaPush {
  ckpt::Manifest files;
  transfer::FilePeer buddy;
};

// What this node pushes of commit `m`: nullopt when nothing is (no generation running here, a
// single node, the buddy's file server unknown, or an injected push-loss fault, which is logged:
// tests wait for that line).
std::optional<ReplicaPush> ReplicaPushOf(const ckpt::Manifest& m, const MirrorPlace& place,
                                         int nproc_per_node,
                                         const std::vector<protocol::Fault>& faults);

// --- the mirror --------------------------------------------------------------------------------

struct CheckpointMirrorOptions {
  std::string job_id;
  std::string agent_id;        // this node's agent
  std::string address;         // where peers reach this node (the agent's address)
  std::string checkpoint_dir;  // this node's checkpoint folder (job.dump_folder/<name>/...)
  std::string secret;          // the job's; peers must present it
  int nproc_per_node = 1;
  std::vector<protocol::Fault> faults;  // the parsed --inject spec (push-loss)
};

// This node's RAM replica folder, the file server peers fetch from and push replicas to, and the
// pusher of this node's files of each commit. The agent makes one when the job checkpoints.
// Thread safety: Prepare on the agent's Run thread; Push on the etcd watcher's (the pusher's own
// thread does the sending); file_port and replica_root from any. Destroyed before the etcd
// client it is given (the pusher and the file server stop first, then the folder goes).
class CheckpointMirror {
 public:
  // Claims the replica folder (sweeping those of agents killed on this host), then starts the
  // file server and the pusher.
  static Result<std::unique_ptr<CheckpointMirror>> Start(CheckpointMirrorOptions options);
  CheckpointMirror(const CheckpointMirror&) = delete;
  CheckpointMirror& operator=(const CheckpointMirror&) = delete;

  int file_port() const { return files_->port(); }
  const std::string& replica_root() const { return replica_folder_->path(); }

  // Before this node's ranks resume in generation g: its checkpoint folder holds exactly the
  // job's commits (a commit etcd does not know, or one it dropped, is moved aside) and the newest
  // one complete, its missing files fetched from the live agents' folders and RAM replicas. When
  // no live node has some file of the newest commit, the commit is dropped in etcd (while g is
  // current) and an error returned. `live_agents` reads the agents alive now (the sources of
  // files; a lost one would make a file nobody has look merely unreachable), only when there is
  // a commit to complete.
  using LiveAgentsFn = std::function<Result<std::map<std::string, rdzv::AgentInfo>>()>;
  Status Prepare(etcd::EtcdClient& etcd, const rdzv::Keys& keys, int64_t g,
                 const LiveAgentsFn& live_agents);

  // A new commit (its commits/<step> record): this node's files of it go to the buddy's RAM, in
  // the background (ReplicaPushOf decides).
  void Push(const std::string& commit_record, const MirrorPlace& place);

 private:
  explicit CheckpointMirror(CheckpointMirrorOptions options) : o_(std::move(options)) {}

  const CheckpointMirrorOptions o_;
  // Destroyed in reverse: the pusher, then the server (both use the folder), then the folder.
  std::unique_ptr<OwnedFolder> replica_folder_;  // the RAM folder files_ keeps replicas in
  std::unique_ptr<transfer::CheckpointFileServer>
      files_;                                        // this node's checkpoint files, for peers
  std::unique_ptr<transfer::ReplicaPusher> pusher_;  // this node's files of each commit
};

}  // namespace tenax::launch
