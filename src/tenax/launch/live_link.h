// Live recovery on several nodes (resilience.mode = "live", supervisor_live.cc): what a node's
// supervisor needs of the other nodes, given by its node agent (node_agent_live.cc). On one node
// the supervisor is the one authority on the membership and writes it itself; on several, the
// record is the job's (rendezvous.h, gen/<G>/live/record) and each node changes it only for its
// own ranks:
//   a local rank fails     the node drops its replica from the newest record (the others'
//                          changes meanwhile are kept: compare-and-swap on the record's revision)
//   a replacement is ready the node lists it as joining, only while no other joiner is healing
//                          and every member trains in the newest epoch (the other nodes'
//                          ranks' epochs: Others)
//   it healed              the node takes it off `healing` (same epoch)
// Every agent copies each newer record into its heartbeat folder, where its ranks read it.
// Thread safety: every method may be called from any thread (the agent's implementation locks).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "tenax/core/status.h"
#include "tenax/launch/rendezvous.h"

namespace tenax::launch {

class LiveLink {
 public:
  virtual ~LiveLink() = default;
  // What a change makes of generation `gen`'s newest record (nullopt: there is none yet); it
  // returns the record to publish, or nullopt to leave it as it is.
  using Change =
      std::function<std::optional<rdzv::LiveRecord>(const std::optional<rdzv::LiveRecord>& now)>;
  // Applies `change` to the newest record and publishes the result by compare-and-swap, asking
  // `change` again when another node changed the record meanwhile. Returns the newest record
  // afterwards (nullopt: still none); an error when etcd does not answer.
  virtual Result<std::optional<rdzv::LiveRecord>> Update(int gen, const Change& change) = 0;
  // The newest record of `gen` this node has seen (no round trip to etcd).
  virtual std::optional<rdzv::LiveRecord> Current(int gen) = 0;
  // Every node's ranks as the nodes last published them: rank -> state (this node's own are
  // better read from their beats).
  virtual std::map<int, rdzv::LiveRankState> Others(int gen) = 0;
  // Node `node`'s ranks (rank -> state), for the others.
  virtual Status PublishOwn(int gen, int node, const std::map<int, rdzv::LiveRankState>& ranks) = 0;
  // This node's live recoveries of `gen` (goodput.json's entries, times on the wall clock as
  // time_unix and healed_at_unix), for the goodput.json that node 0's agent writes.
  virtual Status PublishRecoveries(int gen, int node, const nlohmann::json& records) = 0;
};

}  // namespace tenax::launch
