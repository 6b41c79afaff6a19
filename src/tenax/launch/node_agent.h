// The node agent: `tenax launch --nnodes N --rdzv etcd://HOST:PORT[,...] --job-id NAME ...` on
// every node. Agents meet in etcd (rendezvous.h has the keys) and run the job in generations:
//
//   register   a lease kept alive (EtcdLeaseKeeper) and agents/<id> attached to it; the first
//              agent creates the job's secret and fixes N
//   join       every live agent joins the current generation G; the earliest-joined live agent
//              plans it once every live agent has joined: survivors keep their node ranks (their
//              files stay where they are used), free node ranks go to the others in join order,
//              the rest are spare nodes. Fewer than N agents: wait for one to join (or stop after
//              --rdzv-timeout with a report)
//   run        active nodes start their ranks (Supervisor::RunGeneration) with RANK = node rank x
//              P + local rank, rank 0's store at the address node 0's agent publishes; spares
//              wait
//   fail       an agent whose ranks fail reports its evidence (failures/<G>/<id>) and bumps the
//              generation (compare-and-swap: one bump per failure); an agent whose lease expires
//              while active is recorded as lost (by whoever sees it first) and bumps too; every
//              agent stops its ranks at once when the generation moves, and all join G+1. Ranks
//              resume from the newest checkpoint committed in etcd.
//   fence      an agent that loses its lease (cut off, stopped too long) kills its ranks at once
//              (its keeper's local deadline is never later than etcd's), and a rank may commit a
//              checkpoint only through its agent, which records the commit in etcd only while
//              the rank's generation is current (protocol/agent_channel.h)
//   progress   active agents publish their ranks' recent compute times (a thread of their own,
//              twice a second); node 0's agent finds stragglers among every rank of the job and,
//              with --replace-stragglers, replaces a straggler's node with a spare node
//   end        each active node marks done when its ranks finish; when all N did, every agent
//              exits 0. Out of restarts, a failure a restart cannot fix, or not enough nodes:
//              the agent that sees it records `stop` and every agent exits with its code
//
// The agent holding node rank 0 writes goodput.json, built from what every generation's node 0
// and every failure left in etcd, so it covers every node even when node 0 itself was replaced.
// Thread safety: Run on one thread; the etcd watcher and lease keeper threads only update the
// agent's view under its mutex and wake the loop; the progress thread reads the running
// generation's beats under it and hands back a reason to stop the generation.
#pragma once

#include <chrono>
#include <string>

#include "tenax/core/status.h"
#include "tenax/etcd/client.h"
#include "tenax/launch/launcher.h"
#include "tenax/launch/supervisor.h"

namespace tenax::launch {

struct AgentOptions {
  std::string job_id;
  etcd::EtcdOptions etcd;        // the --rdzv endpoints and TLS files
  int lease_ttl_s = 5;           // --rdzv-lease: a lost node is noticed within about this long
  std::string address;           // this node's address for other nodes (--rdzv-address)
  double nodes_timeout_s = 600;  // --rdzv-timeout: waiting for enough nodes
};

// Runs this node's agent until the job ends; returns the job's exit code.
Result<int> RunNodeAgent(const LaunchOptions& options, JobInfo job, AgentOptions agent,
                         std::string host, std::string exe);

}  // namespace tenax::launch
