// What the node agents of one job keep in etcd, and how they read and write it: the key layout
// and the records, in one place (docs/launcher_protocol.md "Many nodes" describes the protocol
// around them). Every key lives under /tenax/jobs/<job-id>/:
//
//   secret                   random per-job secret; the first agent creates it. Agent-to-agent
//                            transfers (checkpoint files, replicas) must present it.
//   nnodes                   the job's node count N (the first agent sets it; others must agree)
//   start_unix               when the first agent registered (the job's clock for goodput)
//   generation               the current generation G (decimal); bumped by compare-and-swap by
//                            any agent that sees a failure, so exactly one bump per failure wins
//   agents/<id>              one per live agent (attached to its lease): host, address, file port
//   quarantined/<id>         an agent whose node was the culprit of --quarantine-after failures
//                            within --quarantine-window: a spare of last resort from then on
//   members/<id>             the same record, kept after the agent is gone: who ran where (its
//                            Slurm node, to drain it once it is lost)
//   drained/<id>             an agent whose node was drained in the scheduler (--drain-bad-nodes):
//                            the node, the generation and the reason; put once (the drainer)
//   spare_requests/<r>       a spare node asked of the scheduler (--min-spares): the generation,
//                            when, and the scheduler's job id once it answered; an agent started by
//                            it names <r> in its record (spare_request)
//   gen/<G>/join/<id>        an agent ready to take part in G (attached to its lease); its
//                            create_revision orders agents (earliest first)
//   gen/<G>/plan             node rank -> agent for G, and the spares; written once (put if
//                            absent) by the planner: the earliest-joined live agent
//   gen/<G>/master           rank 0's store address, put by node 0's agent
//   gen/<G>/report/<node>    a node's lead-rank summary when its part of G ends (goodput)
//   gen/<G>/done/<node>      the node's ranks all finished training (exit 0) in G
//   gen/<G>/progress/<node>  the node's ranks' compute seconds of their last steps (attached to
//                            the agent's lease; rate-limited): node 0's agent finds stragglers
//                            among every rank of the job from them
//   gen/<G>/straggler/<rank> a straggler found in G (goodput's stragglers table)
//   gen/<G>/exit/<rank>      a rank of G that hung or crashed in its teardown after finishing
//                            (goodput's exit_faults; the run was not affected)
//   gen/<G>/live/record      resilience.mode = "live": the job's live membership record of G
//                            (protocol/live_membership.h, plus `healing`: listed members that are
//                            replacements still receiving state), changed by compare-and-swap
//                            on its revision by the agent whose ranks failed or are ready to
//                            join; every agent copies it into its heartbeat folder for its ranks
//   gen/<G>/live/state/<node> live: the node's ranks' epochs and whether each is done
//   gen/<G>/live/recoveries/<node>/<id> live: the live recoveries agent <id> recorded as node
//                            <node> (goodput's live_recoveries)
//   gen/<G>/live/vacant/<node> live: node <node> was lost and its ranks left the record
//                            (LiveVacancy), put once by whoever saw it first
//   gen/<G>/live/claim/<node>  live: the spare agent that took the lost node's place (put if
//                            absent: one claim per node rank and generation)
//   live-store/              live: where the ranks' live groups meet (TENAX_LIVE_STORE's prefix);
//                            deleted when the job ends
//   slow/<id>                an agent whose node straggled and was replaced (--replace-stragglers):
//                            a spare of last resort from then on
//   failures/<G>/<id>        a node's evidence of G's failure (first by time wins), or
//                            lost-<id> for an agent whose lease expired while active in G
//   commits/<step>           a checkpoint commit: the generation that made it and its manifest
//                            (files, sizes, CRCs). A commit is accepted only if G is current
//                            (a transaction), so a rank of an old generation never commits
//   stop                     the job ends: exit code and reason (out of restarts, bad input,
//                            not enough nodes); every agent exits with that code
//
// Records are JSON. Thread safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/protocol/live_membership.h"

namespace tenax::launch::rdzv {

// A number-valued key (generation, nnodes) as etcd holds it; `fallback` when it is not one.
inline int64_t ParseInt(const std::string& s, int64_t fallback) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return (end != s.c_str() && *end == '\0') ? v : fallback;
}

// "NODE/TURN" (the end of a live vacancy's or claim's key) as (node, turn); (-1, -1) when it is
// not one.
inline std::pair<int, int> ParseNodeTurn(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) return {-1, -1};
  const int64_t node = ParseInt(s.substr(0, slash), -1), turn = ParseInt(s.substr(slash + 1), -1);
  if (node < 0 || turn < 0) return {-1, -1};
  return {static_cast<int>(node), static_cast<int>(turn)};
}

class Keys {
 public:
  explicit Keys(const std::string& job_id) : root_("/tenax/jobs/" + job_id + "/") {}
  const std::string& root() const { return root_; }
  std::string secret() const { return root_ + "secret"; }
  std::string nnodes() const { return root_ + "nnodes"; }
  std::string start() const { return root_ + "start_unix"; }
  std::string generation() const { return root_ + "generation"; }
  std::string agents() const { return root_ + "agents/"; }
  std::string agent(const std::string& id) const { return agents() + id; }
  std::string gen(int64_t g) const { return root_ + "gen/" + std::to_string(g) + "/"; }
  std::string joins(int64_t g) const { return gen(g) + "join/"; }
  std::string join(int64_t g, const std::string& id) const { return joins(g) + id; }
  std::string plan(int64_t g) const { return gen(g) + "plan"; }
  std::string master(int64_t g) const { return gen(g) + "master"; }
  std::string reports(int64_t g) const { return gen(g) + "report/"; }
  std::string report(int64_t g, int node) const { return reports(g) + std::to_string(node); }
  std::string dones(int64_t g) const { return gen(g) + "done/"; }
  std::string done(int64_t g, int node) const { return dones(g) + std::to_string(node); }
  std::string failures(int64_t g) const { return root_ + "failures/" + std::to_string(g) + "/"; }
  std::string failure(int64_t g, const std::string& id) const { return failures(g) + id; }
  std::string commits() const { return root_ + "commits/"; }
  std::string commit(int64_t step) const;  // zero-padded, so keys sort by step
  // Commits the job dropped (no live node held all of it): {"step", "manifest_crc",
  // "generation"}; a folder's copy of one is moved aside, never resumed from.
  std::string drops() const { return root_ + "dropped/"; }
  std::string dropped(int64_t step) const;
  std::string stop() const { return root_ + "stop"; }
  std::string progresses(int64_t g) const { return gen(g) + "progress/"; }
  std::string progress(int64_t g, int node) const { return progresses(g) + std::to_string(node); }
  std::string stragglers(int64_t g) const { return gen(g) + "straggler/"; }
  std::string straggler(int64_t g, int rank) const { return stragglers(g) + std::to_string(rank); }
  std::string exit_faults(int64_t g) const { return gen(g) + "exit/"; }
  std::string exit_fault(int64_t g, int rank) const {
    return exit_faults(g) + std::to_string(rank);
  }
  std::string live_record(int64_t g) const { return gen(g) + "live/record"; }
  std::string live_states(int64_t g) const { return gen(g) + "live/state/"; }
  std::string live_state(int64_t g, int node) const {
    return live_states(g) + std::to_string(node);
  }
  std::string live_recoveries(int64_t g) const { return gen(g) + "live/recoveries/"; }
  std::string live_recoveries(int64_t g, int node, const std::string& id) const {
    return live_recoveries(g) + std::to_string(node) + "/" + id;
  }
  // A node rank lost live, for the `turn`-th time in the generation (0, 1, ...: the spare that
  // took it may be lost too), and the spare that took it that time.
  std::string live_vacancies(int64_t g) const { return gen(g) + "live/vacant/"; }
  std::string live_vacant(int64_t g, int node, int turn) const {
    return live_vacancies(g) + std::to_string(node) + "/" + std::to_string(turn);
  }
  std::string live_claims(int64_t g) const { return gen(g) + "live/claim/"; }
  std::string live_claim(int64_t g, int node, int turn) const {
    return live_claims(g) + std::to_string(node) + "/" + std::to_string(turn);
  }
  std::string live_store() const { return root_ + "live-store/"; }
  std::string quarantined() const { return root_ + "quarantined/"; }
  std::string quarantined(const std::string& id) const { return quarantined() + id; }
  std::string members() const { return root_ + "members/"; }
  std::string member(const std::string& id) const { return members() + id; }
  std::string drains() const { return root_ + "drained/"; }
  std::string drained(const std::string& id) const { return drains() + id; }
  std::string spare_requests() const { return root_ + "spare_requests/"; }
  std::string spare_request(const std::string& r) const { return spare_requests() + r; }
  std::string slow_agents() const { return root_ + "slow/"; }
  std::string slow_agent(const std::string& id) const { return slow_agents() + id; }

 private:
  std::string root_;
};

struct AgentInfo {
  std::string id;
  std::string host;
  std::string address;  // where other agents reach it (its --rdzv-address, or its host's)
  int file_port = 0;    // its checkpoint file / replica server
  int pid = 0;
  int nproc = 0;
  // Where the scheduler runs it (scheduler.h, SchedulerEnv); empty outside Slurm.
  std::string scheduler_node;  // its Slurm node (SLURMD_NODENAME)
  std::string scheduler_job;   // its allocation (SLURM_JOB_ID)
  std::string spare_request;   // the spare request that started it (spare_requests/<r>)
  nlohmann::json ToJson() const;
  static Result<AgentInfo> FromJson(const std::string& text);
};

struct Plan {
  int64_t generation = 0;
  std::vector<std::string> nodes;   // [node rank] -> agent id
  std::vector<std::string> spares;  // agents waiting
  nlohmann::json ToJson() const;
  static Result<Plan> FromJson(const std::string& text);
  int NodeRankOf(const std::string& agent) const;  // -1: not active
};

// Who the agents are for generation G, as the planner sees them: the joined agents in join order
// (earliest create_revision first) and the previous generation's plan (null for the first).
// Keeps each previous node rank with its holder when it joined again; fills the others in join
// order; the rest are spares. Agents in `last_resort` (nodes replaced as stragglers) keep no node
// rank and are placed only when no other agent is left (a slow node is better than none). Needs
// at least `nnodes` joined agents (else nullopt).
std::optional<Plan> MakePlan(int64_t generation, int nnodes,
                             const std::vector<std::string>& joined_in_order, const Plan* previous,
                             const std::set<std::string>& last_resort = {});

// A node's ranks' compute seconds per step of their last few steps (gen/<G>/progress/<node>),
// as their heartbeats report them (time blocked in collectives excluded).
struct NodeProgress {
  std::string agent;
  std::string host;
  int node_rank = -1;
  std::map<int, std::vector<std::pair<int64_t, double>>> ranks;  // global rank -> (step, compute_s)
  nlohmann::json ToJson() const;
  static Result<NodeProgress> FromJson(const std::string& text);
};

// A node's account of a generation's failure (failures/<G>/<id>).
struct FailureReport {
  std::string agent;
  std::string host;
  int node_rank = -1;
  int rank = -1;  // the global rank the node's evidence names (-1: none)
  int code = 0;
  std::string kind;  // protocol::FailureKindName, or "node-lost" / "partition"
  std::string cause;
  bool secondary = false;  // the node's ranks only lost peers
  double wall_s = 0;       // the evidence's time (wall clock: nodes compare)
  // The silent-data-corruption detections of this generation that this node's ranks recorded
  // (their run folder's sdc.json, train/sdc_check.h): node 0's goodput.json gathers them from
  // every node, whose run folders it may not see. Empty: none (left out of the JSON).
  nlohmann::json sdc = nlohmann::json::array();
  nlohmann::json ToJson() const;
  static Result<FailureReport> FromJson(const std::string& text);
};

// The failure of a generation from every node's report: secondaries never win; among the rest
// the earliest evidence; a lost node counts as evidence at the time it was found lost.
std::optional<FailureReport> FirstFailure(const std::vector<FailureReport>& reports);

// The job's end (stop).
struct StopRecord {
  int code = 0;
  std::string reason;
  nlohmann::json ToJson() const;
  static Result<StopRecord> FromJson(const std::string& text);
};

// resilience.mode = "live": the job's live record of a generation (gen/<G>/live/record). The
// membership is what every node's ranks read (each agent copies it into its heartbeat folder);
// `healing` lists the members that are replacements still receiving state: they hold nothing
// yet, so they cannot heal anyone, and a new joiner waits until they are in.
struct LiveRecord {
  protocol::LiveMembership membership;
  std::vector<int> healing;  // ascending
  nlohmann::json ToJson() const;
  static Result<LiveRecord> FromJson(const std::string& text);
  bool operator==(const LiveRecord& o) const {
    return membership == o.membership && healing == o.healing;
  }
};

// The next epoch after `now`: the ranks in `leave` dropped (from the members and from healing),
// those in `join` listed as joining (and healing). Members stay ascending.
LiveRecord NextLiveEpoch(const LiveRecord& now, const std::vector<int>& leave,
                         const std::vector<int>& join);

// live: one rank as its node tells the others (gen/<G>/live/state/<node>: rank -> state): the
// epoch it trains in (-1: none yet), whether it is done (finished, or past the run's last step),
// whether it is set up (its process of G has beaten: past its setup's collectives), and whether
// it finished outright (its work done, or its process gone).
struct LiveRankState {
  int epoch = -1;
  bool done = false;
  bool ready = false;
  bool finished = false;
  bool operator==(const LiveRankState& o) const {
    return epoch == o.epoch && done == o.done && ready == o.ready && finished == o.finished;
  }
};
std::string LiveStatesJson(const std::map<int, LiveRankState>& ranks);
// live: a node lost while its generation runs (gen/<G>/live/vacant/<node>): its agent and its
// ranks, when the others saw its lease go (wall clock), the epoch that dropped its ranks and that
// epoch's members, and the step the members held then (the lost ranks' last one, as far as anyone
// knows).
struct LiveVacancy {
  int node = -1;
  int turn = 0;  // how many times the node rank was lost before in this generation
  std::string agent;
  std::vector<int> ranks;
  double time_unix = 0;
  int epoch = 0;
  std::vector<int> members;
  int64_t step = -1;
  nlohmann::json ToJson() const;
  static Result<LiveVacancy> FromJson(const std::string& text);
  bool operator==(const LiveVacancy& o) const {
    return node == o.node && turn == o.turn && agent == o.agent && ranks == o.ranks &&
           time_unix == o.time_unix && epoch == o.epoch && members == o.members && step == o.step;
  }
};
Result<std::map<int, LiveRankState>> ParseLiveStates(const std::string& text);

}  // namespace tenax::launch::rdzv
