// Live recovery's membership record (resilience.mode = "live", issue 34): which data-parallel
// replica slots take part in the cross-replica collectives, decided by one authority (the
// launcher, which sees every rank's process end) and read by the ranks. Each change gets a new
// epoch; the ranks of an epoch form their group through a store of that epoch alone
// (parallel/live_group.h), so a rank of an older membership can never join a newer group.
//   members    slots (nominal data-parallel ranks, 0 .. world - 1) in the epoch's group, in the
//              order of their group ranks
//   joining    members that have no state yet (a replacement process): they receive the
//              weights, optimizer state and data cursor from a live member when the group forms
// The record is <heartbeat folder>/live-membership.json, written atomically (temp file +
// rename), so a reader sees a whole record or the previous one.
// HSDP: members are ranks, and a data-parallel replica's ranks are listed or dropped together
// (ReplicaView).
// Several nodes: the file is node-local; each node agent copies it from the job's record in etcd
// (launch/rendezvous.h, gen/<G>/live/record).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::protocol {

struct LiveMembership {
  int epoch = 0;
  int generation = 0;  // the launch generation whose ranks it is for (TENAX_RESTART_COUNT)
  int world = 0;       // the nominal data-parallel world: slots 0 .. world - 1
  std::vector<int> members;
  std::vector<int> joining;

  bool Has(int slot) const;
  bool Joining(int slot) const;
  // Slots of the nominal world that are not members: their samples are taken over.
  std::vector<int> Missing() const;
  bool operator==(const LiveMembership& o) const {
    return epoch == o.epoch && generation == o.generation && world == o.world &&
           members == o.members && joining == o.joining;
  }
};

std::string LiveMembershipPath(const std::string& heartbeat_dir);  // live-membership.json
std::string LiveMembershipJson(const LiveMembership& m);
// Checks what every reader relies on: epoch >= 0, 1 <= |members| <= world, members distinct and
// in range, joining a subset of members that leaves at least one member with state.
Result<LiveMembership> ParseLiveMembership(const std::string& json);
Status WriteLiveMembership(const std::string& heartbeat_dir, const LiveMembership& m);
// nullopt: no record yet.
Result<std::optional<LiveMembership>> ReadLiveMembership(const std::string& heartbeat_dir);

// Which slots' micro-batches each member runs in a step: its own, and the missing slots dealt
// round-robin over the members in group order (missing slot k of Missing() goes to member
// k % |members|), so every slot's samples are trained exactly once per step, whatever the
// membership. Returned for the member `slot`, in ascending slot order.
std::vector<int> SlotsRunBy(const LiveMembership& m, int slot);

// A run of one slot's samples: rows [begin, end) of each of its micro-batches.
struct SlotPart {
  int slot = 0;
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const SlotPart& a, const SlotPart& b) {
    return a.slot == b.slot && a.begin == b.begin && a.end == b.end;
  }
  friend bool operator<(const SlotPart& a, const SlotPart& b) {
    return a.slot != b.slot ? a.slot < b.slot : a.begin < b.begin;
  }
};

// What each member runs of a step's samples, a slot holding `samples` (its local batch): its own
// slot whole and, with `split`, an even share of the missing slots' samples (taken in slot order
// and cut into |members| contiguous runs, member i the i-th in group order), so that a lost
// slot's work is spread over every member instead of falling whole on one of them; without
// `split`, the missing slots whole as SlotsRunBy deals them. Every sample of every slot is run
// exactly once per step. Returned for the member `slot`, ascending, without empty parts.
std::vector<SlotPart> PartsRunBy(const LiveMembership& m, int slot, int64_t samples, bool split);
// The samples of `a` that are not in `b`, as ascending runs (parts of one slot's samples as
// sets of rows).
std::vector<SlotPart> PartsMinus(const std::vector<SlotPart>& a, const std::vector<SlotPart>& b);
// Whether every sample of `b` is in `a`.
bool PartsInclude(const std::vector<SlotPart>& a, const std::vector<SlotPart>& b);

// HSDP: a record of ranks seen from the replicas' side. Each data-parallel replica is
// `ranks_per_replica` consecutive ranks (replicate is the outermost mesh axis); the view's slots
// are replicas (world: the number of replicas), and replica q is a member (joining) when its rank
// at `position` (0 .. ranks_per_replica - 1, the shard index) is. The launcher lists or drops a
// replica's ranks together, so the view is the same for every position. Same epoch and generation.
LiveMembership ReplicaView(const LiveMembership& m, int ranks_per_replica, int position);

}  // namespace tenax::protocol
