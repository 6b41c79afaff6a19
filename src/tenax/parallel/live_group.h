// The cross-replica group of live recovery (resilience.mode = "live", issue 34): a
// data-parallel group that outlives the death of any of its members.
//   Membership  decided by the launcher and read from the heartbeat folder
//               (protocol/live_membership.h); each epoch's group forms through a store of its
//               own (a file <store_dir>/<name>-epoch-E, or keys in etcd on several nodes), so it
//               never depends on a member's process (the job's TCP store lives in rank 0) and a
//               rank of an older epoch cannot join it.
//               Before connecting, every member checks in (a file beside the store) and waits
//               for the others; a newer epoch in the record meanwhile (one of them died on its
//               way in) ends the wait at once, instead of the group's connect timeout. So does
//               it while they connect (a member that died after checking in: the group's store
//               is a WatchedStore, parallel/watched_store.h).
//   Failure     a collective that throws (a member died or was killed) makes the member Leave():
//               dropping the group closes its connections, so the members still blocked on it
//               fail too instead of waiting for the timeout; then it forms the next epoch.
//               A member cut off by a partition closes nothing that arrives: a collective waiting
//               on it is abandoned as soon as the record moves to an epoch that leaves it out
//               (Dropped; GroupOptions::abandon), not at the group's timeout.
//   Quorum      once per step, before the step's first collective, the members agree on the
//               newest epoch any of them has seen (NewestEpoch), so all switch at the same step
//               boundary, e.g. to take in a replacement.
//   Healing     after a group forms, Sync() compares every member's (has state, step); when they
//               differ, the member with the newest state sends it (the caller's tensors:
//               weights, optimizer state, data cursor...) point to point to each member that
//               lacks it (the others take no part), with a CRC-32 that
//               each receiver checks before using it, and an HMAC-SHA-256 of it keyed with the
//               job's secret (Options::secret): a receiver uses only state signed by a holder
//               of the secret, as the node agents serve checkpoint files only to one.
// Contract: every method is collective over the members of the current epoch, called in the
// same order by each (Sync's transfer itself only between its source and receivers); a member
// that throws out of one must Leave() before forming again.
// Thread safety: one thread.
// HSDP (several ranks per replica) uses two: one over every rank (slot = rank) and one per shard
// index over the replicas (slot = replica, membership protocol::ReplicaView); a replica's own
// shard group is formed once per incarnation of the replica and never re-formed here
// (train/trainer_live.cc). Several nodes: the epochs meet in etcd (Options::etcd).
// Non-goals: TP and PP inside a replica.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/etcd/client.h"
#include "tenax/parallel/communicator.h"
#include "tenax/protocol/live_membership.h"

namespace tenax::parallel {

struct LiveSyncReport {
  bool transferred = false;    // this member sent or received state
  int source_slot = -1;        // whose state was sent
  std::vector<int> receivers;  // slots that lacked it (no state, or an older step)
  int64_t step = 0;            // the step every member holds now
  int64_t bytes = 0;           // bytes sent to each receiver (the state, plus its header)
  double seconds = 0;
};

class LiveGroup {
 public:
  struct Options {
    std::string store_dir;      // a folder only this job's ranks write (the heartbeat folder)
    std::string name = "live";  // store files: <store_dir>/<name>-epoch-E (one per generation)
    int slot = 0;               // this process's nominal data-parallel rank
    int world = 1;              // the nominal data-parallel world (slots 0 .. world - 1)
    GroupOptions group;         // backend and the forming / per-collective timeout
    // Runs between polls while Form waits for the other members (a rank refreshes its
    // heartbeat there, so waiting is not a hang).
    std::function<void()> on_wait;
    // Runs on a member receiving state in Sync, after its i-th tensor arrived (fault injection).
    std::function<void(size_t i)> on_received;
    // The job's secret (TENAX_JOB_SECRET): the state a member sends is signed with it, and a
    // receiver refuses state signed with another.
    std::string secret;
    // Several nodes: each epoch meets in etcd under `<etcd_prefix><name>-epoch-E/` (check-ins as
    // keys, the group through an EtcdStore: parallel/etcd_store.h) instead of in files of
    // store_dir. The record is still read from store_dir, where the node agent keeps it.
    std::optional<etcd::EtcdOptions> etcd;
    std::string etcd_prefix;
    // HSDP's groups over the replicas: the record read as protocol::ReplicaView(record,
    // ranks_per_replica, position) (the view Form is given); 1: the record's slots themselves.
    int ranks_per_replica = 1;
    int position = 0;
  };
  explicit LiveGroup(Options options);
  ~LiveGroup();
  LiveGroup(const LiveGroup&) = delete;
  LiveGroup& operator=(const LiveGroup&) = delete;

  // Forms the group of `m` (this slot must be a member): blocks until every member formed it.
  // PeerLost when the record moves past `m` (same generation, newer epoch) before every member
  // checked in: the launcher dropped one of them, its next epoch decides.
  Status Form(const protocol::LiveMembership& m);
  // A group of this member alone, outside every epoch (membership().epoch is -1): what a
  // replacement's warm-up step runs its collectives in before it joins. Its store is a file of
  // this process's own in store_dir, removed by Leave.
  Status FormAlone();
  // Drops the group after a failed collective (or before a newer epoch): closes its connections.
  void Leave();
  bool formed() const { return comm_ != nullptr; }
  // How the last successful Form spent its time: waiting for every member's check-in, then
  // connecting the group (the store's rendezvous and the backend's connections).
  struct FormTimes {
    double check_in_s = 0;
    double connect_s = 0;
  };
  const FormTimes& last_form() const { return last_form_; }
  const protocol::LiveMembership& membership() const { return membership_; }
  int slot() const { return options_.slot; }
  int world() const { return options_.world; }
  // The formed group (group ranks: the order of membership().members).
  Communicator& comm();
  // A communicator that always forwards to the group formed now, whatever epoch (what the
  // trainer's world and replicate groups are in live mode): its rank() and size() are the
  // current epoch's (before the first Form: the slot and the nominal world), nominal_size() the
  // nominal world, its stats() count every epoch's bytes.
  // It must not outlive this object.
  std::unique_ptr<Communicator> NewProxy();

  // The per-step quorum: `seen` is the newest record this member read (nullopt: none newer than
  // the current epoch). Returns the newest record over all members, or nullopt when nobody saw
  // one newer than the current epoch; the lowest member that saw it broadcasts it, so every
  // member gets the same record even if the file changes meanwhile. `flag` (optional), a number
  // the caller agrees on in the same round: this member's in, the members' largest out.
  Result<std::optional<protocol::LiveMembership>> NewestEpoch(
      const std::optional<protocol::LiveMembership>& seen, int64_t* flag = nullptr);

  // After Form: brings every member to the newest state (see the file comment). `state`: the
  // same tensors, shapes and dtypes on every member (contiguous, CPU); `step`: the step they
  // hold; `has_state`: false for a replacement that has nothing yet. Fails on a checksum
  // mismatch or when no member has state.
  Result<LiveSyncReport> Sync(const std::vector<at::Tensor>& state, int64_t step, bool has_state);
  // How many Syncs began writing received bytes into this member's tensors (counted before the
  // first byte lands): a Sync that then failed left them partly overwritten, so the caller's
  // state is no longer a whole step's and must not be offered as one (has_state = false).
  int64_t receives_begun() const { return receives_begun_; }

 private:
  // Form's first half: marks this member in and waits for every member's mark (files
  // <path>.in-<slot>, or keys <path>in-<slot> in etcd).
  Status AwaitCheckIns(const protocol::LiveMembership& m, const std::string& path);
  Status CheckIn(const std::string& path);
  Result<bool> AllCheckedIn(const protocol::LiveMembership& m, const std::string& path);
  // The record, when it moved past `m` (same generation, newer epoch); nullopt while it has not.
  Result<std::optional<protocol::LiveMembership>> Newer(const protocol::LiveMembership& m) const;
  // Why `m` is no longer the epoch to form: the record moved past it (same generation, newer
  // epoch); nullopt while it is.
  Result<std::optional<std::string>> Superseded(const protocol::LiveMembership& m) const;
  // Why a collective of `m` cannot end: the record moved to a newer epoch (same generation) that
  // leaves out a member of `m`, whom the launcher judged lost; nullopt while it has not, and for
  // a newer epoch that only adds members (a replacement joining, taken at a step boundary).
  Result<std::optional<std::string>> Dropped(const protocol::LiveMembership& m) const;

  const Options options_;
  std::unique_ptr<etcd::EtcdClient> etcd_;  // with options_.etcd: made by the first Form
  protocol::LiveMembership membership_;
  std::unique_ptr<Communicator> comm_;  // null: not formed
  int64_t receives_begun_ = 0;
  FormTimes last_form_;
  std::string alone_path_;  // FormAlone's store file while that group is formed
  // etcd: the epochs' key prefixes this member checked in to and has not deleted yet; once a
  // newer epoch formed nobody needs them (its members checked in to it, the others were dropped).
  std::vector<std::string> met_;
};

// Every caller gets `m` as `root` (a group rank) passed it: the same record on every rank of `c`
// even if the file changed between their reads (collective over `c`).
Result<protocol::LiveMembership> BroadcastMembership(Communicator& c,
                                                     const protocol::LiveMembership& m, int root);

// Waits until the heartbeat folder's record has an epoch above `epoch` and returns it (the
// launcher's decision after a failure), or fails after `timeout_s`. `on_wait` runs between polls
// (a rank refreshes its heartbeat there, so waiting is not a hang).
Result<protocol::LiveMembership> WaitForEpochAfter(const std::string& heartbeat_dir, int epoch,
                                                   double timeout_s,
                                                   const std::function<void()>& on_wait = {});

}  // namespace tenax::parallel
