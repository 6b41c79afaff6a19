// The supervision loop of `tenax launch` on one node. A launch is a sequence of generations:
// every rank process is started (as a standby, assigned its rank through a pipe: spares.h), then
// the loop sleeps until a child ends, a signal arrives or the next heartbeat check is due
// (child_watch.h), and ends the generation when
//   - every rank exited 0 (done); a rank that finished (its `finish` beat) but does not exit
//     within --exit-timeout is stuck in its teardown: named, killed, and the run is still done,
//   - a rank failed: the loop keeps collecting evidence for a short window (more deaths, exit
//     reports), then AttributeFailure names the first failure (attribution.h), and the other
//     ranks are stopped (SIGTERM + SIGCONT, SIGKILL after --kill-grace),
//   - no rank progressed within the hang timeout: every rank dumps its flight record (SIGUSR1),
//     the analysis names the rank the others wait for, and every rank is killed at once,
//   - a straggler is to be replaced, or the launcher itself is told to stop (SIGINT/SIGTERM).
// Then, if restartable and restarts are left, the blamed slot is excluded (a spare takes its
// rank) and the next generation starts; every rank resumes from the newest good checkpoint.
// Every process it starts dies with it: PR_SET_PDEATHSIG plus the liveness pipe
// (protocol/launcher_watch.h); the run folder's lock is inherited by every rank.
// Thread safety: one thread runs it (the monitor's HTTP thread only reads published copies).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/owned_folder.h"
#include "tenax/core/run_lock.h"
#include "tenax/core/sha256.h"
#include "tenax/core/status.h"
#include "tenax/launch/attribution.h"
#include "tenax/launch/child_watch.h"
#include "tenax/launch/fault_schedule.h"
#include "tenax/launch/goodput.h"
#include "tenax/launch/launcher.h"
#include "tenax/launch/live_link.h"
#include "tenax/launch/monitor.h"
#include "tenax/launch/restart_policy.h"
#include "tenax/launch/spares.h"
#include "tenax/launch/stragglers.h"
#include "tenax/protocol/fault_injection.h"

namespace tenax::launch {

// One generation's assignment on this node: single-node launches make their own; on several
// nodes the node agent (node_agent.h) takes it from the plan the agents agreed on in etcd.
struct GenerationPlan {
  int generation = 0;  // the ranks' TENAX_RESTART_COUNT
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;  // rank 0's store
  int master_port = 0;      // 0: a free port on this machine (single node)
  // resilience.mode = "live", several nodes: this node takes the place of node `node_rank`,
  // lost while the generation runs: its ranks start as replacements that join the live members
  // (supervisor_live.cc, LiveFillVacancy).
  std::optional<rdzv::LiveVacancy> live_vacancy;
};

// Asked on every turn of the loop while a generation runs: a reason to stop it from outside
// (another node failed, this node lost its lease, the job is over), or nullopt to go on.
using StopFn = std::function<std::optional<std::string>()>;

// Several nodes: called (on the loop's thread) when this node's ranks hang waiting for a rank on
// another node, before they are killed: killing them at once would make that node's ranks fail
// with lost peers before its own hang check names the culprit. Returns after at most `budget_s`.
using RemoteHangFn = std::function<void(const Verdict& local, double budget_s)>;

// What Launch learned about the job before starting it.
struct JobInfo {
  std::string run_dir;                  // the run folder (`train`); empty for other commands
  std::string checkpoint_dir;           // its checkpoint folder (`train` with checkpoints on)
  int64_t total_steps = 0;              // training.steps (`train`); 0: unknown
  bool memory_replicas = false;         // checkpoint.memory_replicas: the ranks get a RAM folder
  std::vector<protocol::Fault> faults;  // the parsed --inject spec
  std::string goodput_path;             // where goodput.json goes; empty: nowhere
  nlohmann::json previous_goodput;      // goodput.json of earlier launches of this run (or null)
  const RunLock* run_lock = nullptr;    // passed on to every rank; may be null
  // resilience.mode = "live" (one node): a failed rank's process is replaced while the others
  // train on (supervisor_live.cc), instead of a new generation.
  bool live = false;
  // Live: ranks per data-parallel replica (the world over data_parallel_replicate), consecutive
  // ranks; a replica's ranks are dropped and replaced together.
  int live_replica_ranks = 1;
};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, JobInfo job, std::string host, int fixed_port,
             std::string exe, std::unique_ptr<ChildWatcher> watcher);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // The single-node policy: runs generations until done, out of restarts, or stopped. Returns the
  // job's exit code.
  Result<int> Run();

  // The pieces the node agent drives (several nodes): Start once (heartbeat folder, pipes, slots,
  // standbys), then one RunGeneration per generation this node takes part in.
  struct Outcome {
    int exit_code = 0;
    bool interrupted = false;               // the launcher itself was told to stop (SIGINT/SIGTERM)
    std::optional<std::string> superseded;  // stopped from outside (StopFn's reason)
    std::optional<Verdict> verdict;  // why the generation ended, when one of its ranks failed
    double detected_s = 0;           // launch clock
    double detection_s = 0;
    int scheduled = -1;  // the poisson schedule's failure (index) whose verdict this was, if any
  };
  Status Start();
  Outcome RunGeneration(const GenerationPlan& plan, const StopFn& stop);
  // Wakes the loop of a running generation, so that it asks its StopFn now; any thread.
  void Wake() { watcher_->Wake(); }
  // Starts a standby process in every empty slot now, so that the next generation's ranks have
  // done their start-up (process, libraries, config) by the time it is planned.
  void Prewarm();
  // This node's lead (local rank 0) beat of the running or last generation.
  const protocol::Beat& lead_beat() const { return g_.beats.front(); }
  // Every local rank's newest beat (index: local rank); a beat of an older generation until the
  // rank's first beat in this one. Read from the StopFn (the loop's thread).
  const std::vector<protocol::Beat>& beats() const { return g_.beats; }
  // Several nodes: stragglers are found among every rank of the job by the node agent
  // (node_agent.cc), not among this node's ranks alone.
  void LeaveStragglersToAgent() { local_stragglers_ = false; }
  void SetRemoteHangHook(RemoteHangFn fn) { remote_hang_ = std::move(fn); }
  double Elapsed() const;
  double start_unix() const { return t0_wall_; }
  const std::string& heartbeat_dir() const { return hb_dir_; }
  Goodput& goodput() { return goodput_; }
  void WriteGoodput(bool ended, int exit_code);
  // The trainer's loss-spike and silent-data-corruption records into goodput.json, when they
  // can be read.
  void ReadTrainerRecords();
  // The ranks the trainer's silent-data-corruption record names in `generation`.
  std::vector<int> SdcNamedRanks(int generation) const;
  // A silent-data-corruption verdict with no rank (only the named ranks' peers ended within the
  // window): the rank this node's check records name, if any.
  void NameSdcRankFromRecords(int gen, Verdict* verdict);
  // Several nodes: the node agent's channel, passed to every rank started from now on.
  void SetAgentSocket(std::string path) { agent_socket_ = std::move(path); }
  // Several nodes, resilience.mode = "live": the job's live record through the node agent
  // (live_link.h; it outlives this supervisor's generations) and the etcd where the ranks' live
  // groups meet (TENAX_LIVE_STORE of every rank started from now on).
  void SetLiveLink(LiveLink* link, protocol::LiveStoreAddress store) {
    live_link_ = link;
    live_store_ = std::move(store);
  }
  // Several nodes: the job's secret from etcd instead of this launch's own (TENAX_JOB_SECRET of
  // every rank started from now on).
  void SetJobSecret(std::string secret) { job_secret_ = std::move(secret); }
  // The running or last generation's ranks that hung or crashed after they finished (their work
  // done: no restart), as goodput.json `exit_faults` entries plus `time_unix`.
  const std::vector<nlohmann::json>& exit_faults() const { return g_.exit_faults; }

 private:
  int Rank(int local) const { return node_rank_ * o_.nproc_per_node + local; }
  int Local(int rank) const { return rank - node_rank_ * o_.nproc_per_node; }
  // Local rank `local`'s assignment in generation `gen`: this generation's store (g_.master_*).
  protocol::Assignment AssignmentOf(int gen, int local) const;
  Result<pid_t> Spawn(int slot, int read_fd);
  // RunGeneration's parts: give every local rank its assignment (a failure to is the
  // generation's verdict); take the processes that ended as evidence or as done; decide on the
  // evidence once its window has passed; and begin stopping the ranks (signal `sig`, SIGKILL after
  // `grace_s`).
  void StartRanks(const GenerationPlan& plan, Outcome* out);
  void Reap(int gen, const std::vector<ChildEnd>& ends, std::vector<RankEnd>* failed);
  void Decide(int gen, const std::vector<RankEnd>& failed, Outcome* out);
  void BeginStop(int sig, double grace_s);
  // Heartbeats: progress, stragglers, hang. Returns true when the generation must stop.
  bool CheckBeats(int gen, Outcome* out);
  // On a hang: every rank dumps its flight record (SIGUSR1, up to --flight-dump seconds);
  // returns the local rank the others wait for, or -1 when the records do not single one out.
  int AnalyzeHang();
  RankEnd Evidence(int gen, int local, pid_t pid, const ChildEnd& end);
  // Local rank `local`'s newest beat when it is this generation's process's (else stale: none).
  std::optional<protocol::Beat> CurrentBeat(int gen, int local) const;
  // Teardown. A rank is done when it finished (its `finish` beat: work done and durable) or exited
  // 0 (or crashed after finishing); MarkDone, called before either is set, records when it first
  // became done.
  bool Done(int local) const { return g_.finished[local] || g_.exited[local]; }
  void MarkDone(int local);
  bool AllFinished() const;  // every rank is done
  // Whether local rank `local` finished in generation `gen`: seen before, or its newest beat is
  // its `finish` beat (read now: it may have ended between two heartbeat checks).
  bool Finished(int gen, int local);
  // Every rank finished but some did not exit within --exit-timeout: logs and records them
  // (goodput.json exit_faults); the caller kills them and the generation ends with exit code 0.
  bool ExitOverdue(int gen);
  void AddExitFault(int gen, int local, const std::string& kind, const std::string& detail);
  void Publish(int gen, bool force);
  // The poisson schedule (fault_schedule.h): moves its clock and strikes the rank of an arrival
  // that is due: SIGKILL (crash), SIGSTOP once the generation has finished a step (hang: before
  // that, silence is judged by --startup-timeout), or a NaN request (nan). While the ranks are
  // being stopped, a due arrival waits for the next generation's ranks.
  void ScheduleTick(int gen);
  // Live recovery (resilience.mode = "live", supervisor_live.cc): the generation's first
  // membership (every rank); a failure taken without stopping the others (false: not possible,
  // the generation ends as usual); and, every turn of the loop, the replacements: announced as
  // joining once ready, recorded once healed.
  void LiveStart(int gen);
  // A vacancy's ranks (GenerationPlan::live_vacancy): the incarnation every one of them starts
  // under, and the record of local rank `local`, started as `pid`, as a replacement on its way in.
  int LiveVacancyIncarnation(const GenerationPlan& plan);
  void LiveFillVacancy(const GenerationPlan& plan, int local, pid_t pid);
  bool LiveRecover(int gen, const std::vector<RankEnd>& failed, const Verdict& v);
  // A hang whose culprit is known: only that rank is killed (its death is then recovered from as
  // a failure of kind hang); false: not possible, every rank is killed as usual.
  bool LiveKillHung(const Verdict& v);
  // Several nodes: a hang whose culprit is on another node waits one timeout for that node to
  // kill it (true: no verdict now).
  bool LiveAwaitRemoteHang();
  void LiveTick(int gen);
  // The generation ended (a restart, or the run's end): the records of replacements that had not
  // healed are closed as discarded.
  void LiveEnd(int gen, Outcome* out);
  // The newest step that `ranks` finished in generation `gen` (their beats, read now); -1: none.
  int64_t LiveGroupStep(int gen, const std::vector<int>& ranks) const;
  // The hang check's suspects (HangSuspect's inputs, for local ranks): a replacement still on its
  // way in makes no steps until it joined and waits for members that may be the stuck ones, so
  // it is taken for done and never the lowest step.
  void LiveHangSuspects(std::vector<int64_t>* last_step, std::vector<bool>* done) const;
  // When the flight records cannot say whom the others wait for: the running local ranks that
  // left no flight record (too stuck to handle SIGUSR1: a stopped member, a replacement stopped
  // inside its state transfer, a frozen node's ranks), ascending, when they are of one replica
  // or a replica of the quorum has none of them (it trains on; the launcher takes every replica
  // holding a silent rank out, LiveKillHung); empty: none, or some in every replica.
  std::vector<int> LiveSilentRanks() const;
  // Whether `rank` trains in the quorum: a member that is not a replacement still healing (the
  // poisson schedule strikes these only).
  bool LiveInQuorum(int rank) const;
  // The data-parallel replica that `rank` belongs to (its JobInfo::live_replica_ranks consecutive
  // ranks; the rank itself under DDP).
  int ReplicaOf(int rank) const { return rank / job_.live_replica_ranks; }
  // Publishes the next epoch: the ranks in `leave` dropped, those in `join` listed as joining.
  // A join is published only while the record is still at the epoch this node last saw and
  // nobody is healing (another node's change meanwhile: not now, the next turn asks again).
  // Returns whether this change was published (g_.live is the newest record either way).
  bool LivePublish(int gen, const std::vector<int>& leave, const std::vector<int>& join);
  // A replacement of this node healed: it leaves the record's `healing` (same epoch).
  void LiveHealed(int gen, int rank);
  // Several nodes: the newest record as the agent saw it, and this node's ranks' epochs and
  // whether each is done, for the other nodes (published when changed).
  void LiveSync(int gen);
  // Every rank's live state: this node's from their beats (LiveOwnStates), the others' as their
  // nodes published them (several nodes).
  std::map<int, rdzv::LiveRankState> LiveOwnStates(int gen) const;
  std::map<int, rdzv::LiveRankState> LiveStates(int gen);
  // Whether `rank` runs on this node.
  bool LiveLocal(int rank) const { return Local(rank) >= 0 && Local(rank) < o_.nproc_per_node; }
  // The goodput split's view of a live generation (g_.beats read): one lead process's step and
  // checkpoint seconds, followed from poll to poll; when it is gone, another member's (the ranks
  // train in lockstep, so any member's seconds since the last poll are the group's).
  void LiveGoodputBeat(int gen);

  // Constant after construction.
  const LaunchOptions& o_;
  const JobInfo job_;
  const std::string host_;
  const int fixed_port_;
  const std::string exe_;
  const double t0_mono_, t0_wall_;

  std::unique_ptr<ChildWatcher> watcher_;
  // This launcher's folders, removed when it ends (by the next launcher on the host when it is
  // killed): heartbeats (in /tmp) and, with memory replicas, the ranks' RAM folder (/dev/shm).
  std::optional<OwnedFolder> hb_folder_, ram_folder_;
  std::string hb_dir_;          // hb_folder_'s path
  int liveness_[2] = {-1, -1};  // the ranks hold [0] (launcher_watch.h); only this holds [1]
  std::unique_ptr<SlotTable> slots_;
  std::unique_ptr<Monitor> monitor_;
  Goodput goodput_;
  StragglerDetector stragglers_;
  int node_rank_ = 0;                       // this generation's
  int nnodes_ = 1;                          // this generation's
  std::string agent_socket_;                // several nodes: protocol/agent_channel.h
  LiveLink* live_link_ = nullptr;           // several nodes, live: the node agent's; else null
  protocol::LiveStoreAddress live_store_;   // several nodes, live: where the live groups meet
  std::string job_secret_ = RandomHex(32);  // the ranks' TENAX_JOB_SECRET
  int straggler_count_ = 0;
  bool local_stragglers_ = true;  // false: the node agent finds them
  RemoteHangFn remote_hang_;
  double last_goodput_write_ = -1;
  std::unique_ptr<FaultSchedule> schedule_;  // --inject poisson:...; null without one
  RestartPolicy restarts_;                   // whether a failed generation may be followed
  bool ever_ready_ = false;                  // a generation of this launch reached training
  // What the running (or last) generation tracks: made anew when a generation starts, so nothing
  // of one generation leaks into the next. Vectors are per local rank.
  struct Generation {
    explicit Generation(int ranks);
    std::vector<protocol::Beat> beats;  // newest beat (kSetup until the rank's first)
    std::vector<pid_t> pids;
    // Progress (CheckBeats).
    std::vector<int64_t> last_step;
    std::vector<int64_t> last_work;  // beats' evaluation progress (Beat::work)
    std::vector<double> intervals;   // seconds between step completions (local rank 0)
    double last_progress = 0, last_check = 0;
    bool any_step_done = false;
    // Teardown: the `finish` beat was seen, the process exited 0 (or crashed after finishing),
    // and when either happened first.
    std::vector<bool> finished, exited;
    std::vector<double> done_at;
    std::vector<nlohmann::json> exit_faults;  // with time_unix (several nodes)
    // Stopping the ranks: begun (no more evidence), and when SIGKILL follows (launch clock).
    bool stopping = false;
    double kill_at = 1e300;
    // The ranks' store, for a replacement's assignment.
    std::string master_addr;
    int master_port = 0;
    // Live recovery: the current membership, and each replacement on its way in.
    rdzv::LiveRecord live;                              // membership.members: ranks, ascending
    std::map<int, rdzv::LiveRankState> live_published;  // several nodes: this node's, as told
    // Several nodes: the epoch in which a hang here waited for another node's rank to be killed
    // (CheckBeats); at the next timeout in the same epoch the generation ends.
    int live_hang_deferred = -1;
    nlohmann::json live_recoveries_published;  // several nodes: as told
    struct Replacement {
      int local = -1;
      int record = -1;  // its goodput live_recoveries entry
      nlohmann::json entry;
      int announced_epoch = -1;  // the epoch listing it as joining; -1: not yet
      bool healed = false;
      int incarnation = 0;  // of its replica (TENAX_LIVE_JOIN)
      // The rank whose failure this one ended with: its own rank, or the culprit's when it was
      // found dead in the same check as the culprit (it lost the culprit and exited).
      int failed_with = -1;
    };
    // Per replica: its incarnation, raised with each failure of it (its new ranks form the
    // replica's own group under that number).
    std::vector<int> incarnation;
    // Ranks the launcher killed because another rank of their replica failed -> why; their end
    // is no failure of their own.
    std::map<int, std::string> retiring;
    std::vector<Replacement> replacements;
    std::vector<pid_t> cancelled;  // replacements stopped because the run ended without them
    std::map<int, Verdict> hung;   // rank -> the hang verdict that made the launcher kill it
    // The hang check's silent ranks (LiveSilentRanks, as ranks) when they named the culprit: the
    // first of each replica is killed with it (LiveKillHung).
    std::vector<int> hang_silent;
    // LiveGoodputBeat: the lead's pid, every process's counters at the last poll, the totals.
    int lead_pid = -1;
    std::map<int, std::pair<double, double>> counters;  // pid -> (steps_s, checkpoint_s)
    double steps_s = 0, checkpoint_s = 0;
  };
  Generation g_ = Generation(1);

  // Live recovery (supervisor_live.cc): closes a replacement's record as discarded with
  // `outcome`; the steps short-handed are those up to `group_step`, the step the members hold.
  void LiveDiscard(Generation::Replacement* r, const std::string& outcome, int64_t group_step);
};

}  // namespace tenax::launch
