// The node agent's life (node_agent.h): construction, registration under a lease, etcd's events,
// and Run, the loop over generations (rendezvous, run or wait as a spare, record how it ended);
// RunNodeAgent, the entry point. The class and what its other files hold: node_agent_internal.h.
#include "tenax/launch/node_agent.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <random>

#include "tenax/core/log.h"
#include "tenax/core/net.h"
#include "tenax/core/sha256.h"
#include "tenax/launch/node_agent_internal.h"

namespace tenax::launch::agent_internal {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::ToInt;

namespace {

// How long a node whose ranks only failed because of others waits for the node with the
// evidence to report it (AwaitCulprit): that node's launcher decides within its 0.25 s window
// once its ranks end, and a generation rarely ends later on one node than on another by more.
constexpr double kAwaitCulpritS = 3.0;

// The first IPv4 address of an interface that is up and not loopback (GLOO_SOCKET_IFNAME's when
// set: the address the ranks use), else the host name.
std::string DefaultAddress(const std::string& host) {
  const char* wanted = std::getenv("GLOO_SOCKET_IFNAME");
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return host;
  std::string found;
  for (ifaddrs* a = all; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    if (wanted != nullptr && *wanted != '\0' && std::string(a->ifa_name) != wanted) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                sizeof(text));
    found = text;
    break;
  }
  ::freeifaddrs(all);
  return found.empty() ? host : found;
}

}  // namespace

NodeAgent::~NodeAgent() {
  view_.Quit();
  if (progress_.joinable()) progress_.join();
  watcher_.reset();  // no callback after this
  channel_.reset();
  supervisor_.reset();
  if (keeper_ && !keeper_->lost()) {
    (void)etcd_->RevokeLease(keeper_->lease());  // leave at once, not after the TTL
  }
  keeper_.reset();
}

Status NodeAgent::Register() {
  TENAX_ASSIGN_OR_RETURN(etcd::EtcdLease lease,
                         etcd_->GrantLease(std::chrono::seconds(a_.lease_ttl_s)));
  TENAX_ASSIGN_OR_RETURN(
      keeper_,
      etcd::EtcdLeaseKeeper::Start(a_.etcd, lease, [this](const Status& why) { LeaseLost(why); }));
  view_.LeaseGranted(lease.id);
  TENAX_RETURN_IF_ERROR(
      etcd_->Put(keys_.agent(info_.id), info_.ToJson().dump(), lease.id).status());
  return Status::Ok();
}

void NodeAgent::OnEvents(const std::vector<etcd::WatchEvent>& events) {
  const std::vector<std::string> commits = view_.OnEvents(events);
  if (live_) live_->OnEvents(events);
  if (supervisor_) supervisor_->Wake();
  for (const std::string& c : commits) PushReplicas(c);
}

Result<std::optional<int>> NodeAgent::Start() {
  TENAX_ASSIGN_OR_RETURN(etcd_, etcd::EtcdClient::Create(a_.etcd));
  info_.id = fmt::format("{}-{}-{}", host_, ::getpid(), RandomHex(3));
  info_.host = host_;
  info_.address = a_.address.empty() ? DefaultAddress(host_) : a_.address;
  info_.pid = static_cast<int>(::getpid());
  info_.nproc = o_.nproc_per_node;
  const SchedulerEnv where = SchedulerEnv::FromEnvironment();
  info_.scheduler_node = where.node;
  info_.scheduler_job = where.job;
  info_.spare_request = where.spare_request;
  if (o_.drain_bad_nodes || o_.min_spares > 0) {
    scheduler_ = std::make_unique<SchedulerActions>(SchedulerOptionsOf(o_));
  }
  // The job's fixed facts: the first agent writes them, the others must agree.
  TENAX_RETURN_IF_ERROR(etcd_->PutIfAbsent(keys_.secret(), RandomHex(32)).status());
  TENAX_RETURN_IF_ERROR(etcd_->PutIfAbsent(keys_.nnodes(), std::to_string(o_.nnodes)).status());
  TENAX_RETURN_IF_ERROR(
      etcd_->PutIfAbsent(keys_.start(), fmt::format("{:.3f}", WallNow())).status());
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> nnodes, etcd_->Get(keys_.nnodes()));
  if (nnodes && rdzv::ParseInt(nnodes->value, -1) != o_.nnodes) {
    return InvalidArgument(fmt::format(
        "--nnodes {} disagrees with the job {} in etcd, which has {} nodes; use the same "
        "--nnodes on every node (or another --job-id)",
        o_.nnodes, a_.job_id, nnodes->value));
  }
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> start, etcd_->Get(keys_.start()));
  job_start_unix_ = start ? std::strtod(start->value.c_str(), nullptr) : WallNow();
  TENAX_ASSIGN_OR_RETURN(std::optional<rdzv::StopRecord> stopped, ReadStop());
  if (stopped && stopped->code == 0) {
    log::Info("launch: job {} is already complete; nothing to do", a_.job_id);
    return std::optional<int>(0);
  }
  if (stopped) {
    return InvalidArgument(fmt::format(
        "the job {} has already ended in etcd (exit code {}: {}); start a new job with another "
        "--job-id",
        a_.job_id, stopped->code, stopped->reason));
  }
  TENAX_ASSIGN_OR_RETURN(std::optional<etcd::KeyValue> secret, etcd_->Get(keys_.secret()));
  if (!secret) return Internal("the job's secret vanished from etcd");
  secret_ = secret->value;
  if (!job_.checkpoint_dir.empty()) {
    // Peers fetch this node's checkpoint files (and the replicas it holds for them) from its
    // server, whose port this agent's record carries.
    CheckpointMirrorOptions mo;
    mo.job_id = a_.job_id;
    mo.agent_id = info_.id;
    mo.address = info_.address;
    mo.checkpoint_dir = job_.checkpoint_dir;
    mo.secret = secret_;
    mo.nproc_per_node = o_.nproc_per_node;
    mo.faults = job_.faults;
    TENAX_ASSIGN_OR_RETURN(mirror_, CheckpointMirror::Start(std::move(mo)));
    info_.file_port = mirror_->file_port();
  }
  // The supervisor runs this node's ranks; goodput.json is the agent's (it covers every node).
  // Made before the lease keeper and the watcher exist: their threads wake it.
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<ChildWatcher> children, ChildWatcher::Create());
  JobInfo local = job_;
  local.goodput_path.clear();
  supervisor_ =
      std::make_unique<Supervisor>(o_, local, info_.address, 0, exe_, std::move(children));
  supervisor_->LeaveStragglersToAgent();  // judged among every rank of the job (ProgressLoop)
  supervisor_->SetJobSecret(secret_);
  supervisor_->SetRemoteHangHook(
      [this](const Verdict& v, double budget_s) { AwaitRemoteHang(v, budget_s); });
  if (job_.live) {
    // Live recovery: the membership is the job's, in etcd; the ranks' groups meet there too.
    live_ = std::make_unique<EtcdLiveLink>(etcd_.get(), keys_, info_.id,
                                           [this] { return view_.lease_id(); });
    protocol::LiveStoreAddress store;
    store.endpoints = a_.etcd.endpoints;
    store.prefix = keys_.live_store();
    store.ca_file = a_.etcd.ca_file;
    store.cert_file = a_.etcd.cert_file;
    store.key_file = a_.etcd.key_file;
    supervisor_->SetLiveLink(live_.get(), std::move(store));
  }
  TENAX_RETURN_IF_ERROR(Register());
  // Who ran where, kept after this agent is gone (the node to drain once it is lost).
  TENAX_RETURN_IF_ERROR(etcd_->Put(keys_.member(info_.id), info_.ToJson().dump()).status());
  TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse now, etcd_->GetPrefix(keys_.root()));
  TENAX_ASSIGN_OR_RETURN(
      watcher_, etcd::EtcdWatcher::Start(
                    a_.etcd, keys_.root(), now.revision + 1,
                    [this](const std::vector<etcd::WatchEvent>& e) { OnEvents(e); },
                    [](const Status& st) { log::Warn("launch: etcd watch: {}", st.message()); }));
  TENAX_RETURN_IF_ERROR(supervisor_->Start());
  TENAX_ASSIGN_OR_RETURN(channel_,
                         protocol::AgentChannelServer::Start(
                             supervisor_->heartbeat_dir() + "/agent.sock",
                             [this](int64_t gen, int64_t step, const nlohmann::json& manifest) {
                               return Commit(gen, step, manifest);
                             }));
  // Before any rank process exists: every rank of the job must commit through its agent (ranks
  // that did not would run other collectives in a save than those that did).
  supervisor_->SetAgentSocket(supervisor_->heartbeat_dir() + "/agent.sock");
  supervisor_->Prewarm();  // this node's ranks start up while the agents meet
  log::Info("launch: agent {} ({}) joined job {} of {} node(s) at {}", info_.id, info_.address,
            a_.job_id, o_.nnodes, fmt::join(a_.etcd.endpoints, ","));
  return std::optional<int>();
}

Result<int> NodeAgent::Run() {
  TENAX_ASSIGN_OR_RETURN(std::optional<int> over, Start());
  if (over) return *over;

  for (;;) {
    if (view_.lease_lost() || Fenced()) {
      // Fenced: our ranks are gone; come back under a new lease once etcd answers.
      TENAX_ASSIGN_OR_RETURN(std::optional<int> ended, RegisterAgain());
      if (ended) return *ended;
    }
    TENAX_ASSIGN_OR_RETURN(std::optional<rdzv::StopRecord> stop, ReadStop());
    if (stop) {
      // The report is node 0's of the newest plan (a former node 0 must not overwrite it), or
      // whoever took its place (ReportingAgent).
      Result<int64_t> newest = CurrentGeneration();
      Result<std::optional<etcd::KeyValue>> plan =
          newest.ok() ? etcd_->Get(keys_.plan(*newest))
                      : Result<std::optional<etcd::KeyValue>>(newest.status());
      if (plan.ok() && *plan) {
        Result<rdzv::Plan> p = rdzv::Plan::FromJson((**plan).value);
        if (p.ok() && ReportingAgent(*newest, *p) == info_.id) WriteGoodput(true, stop->code);
      }
      // Every agent's log ends with how the job ended (the other paths to the end say it too).
      if (stop->code == 0) {
        log::Info("launch: job {} finished on every node", a_.job_id);
      } else {
        log::Info("launch: job {} stopped (exit code {}): {}", a_.job_id, stop->code, stop->reason);
      }
      return stop->code;
    }
    TENAX_ASSIGN_OR_RETURN(const int64_t g, CurrentGeneration());
    TENAX_ASSIGN_OR_RETURN(std::optional<rdzv::Plan> plan, Rendezvous(g));
    if (!plan) continue;
    const int node_rank = plan->NodeRankOf(info_.id);
    if (g > 0) LogFailureOf(g - 1);
    last_plan_ = *plan;
    last_plan_gen_ = g;
    view_.Begin(g, *plan, node_rank);
    if (node_rank < 0) {
      TENAX_ASSIGN_OR_RETURN(std::optional<int> end, WaitAsSpare(g, *plan));
      if (end) return *end;
      continue;
    }
    TENAX_ASSIGN_OR_RETURN(std::optional<int> end, RunActive(g, *plan, node_rank));
    if (end) return *end;
  }
}

bool NodeAgent::Fenced() {
  if (!keeper_ || !keeper_->lost()) return false;
  LeaseLost(keeper_->status());
  return true;
}

void NodeAgent::LeaseLost(const Status& why) {
  // Woken under the view's lock, and only until the destructor quits the view, which it does
  // before it destroys the supervisor (set before any keeper exists). Said once, by whichever
  // saw the loss first: the keeper's thread, or Run's by the lease's deadline (Fenced), after
  // which the keeper is replaced and its thread may never get to say it.
  if (view_.LeaseLost([this] { supervisor_->Wake(); })) {
    log::Error("launch: lost the etcd lease ({}); stopping this node's ranks (fencing)",
               why.message());
  }
}

Result<std::optional<int>> NodeAgent::RegisterAgain() {
  keeper_.reset();
  const double since = protocol::MonotonicNow();
  for (double pause = 0.2;; pause = std::min(pause * 2, 2.0)) {
    Status st = Register();
    if (st.ok()) break;
    if (protocol::MonotonicNow() - since > a_.nodes_timeout_s) {
      return st.WithContext(
          fmt::format("etcd unreachable for {:g}s (--rdzv-timeout)", a_.nodes_timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
  log::Info("launch: agent {} registered again after losing its lease", info_.id);
  if (fenced_ && last_plan_gen_ >= 0) {
    // The others recorded this node as lost; it was alive but cut off: a partition.
    rdzv::FailureReport f;
    f.agent = info_.id;
    f.host = host_;
    f.node_rank = last_plan_.NodeRankOf(info_.id);
    f.kind = "partition";
    f.code = 137;
    f.wall_s = fenced_at_;
    f.cause = fmt::format(
        "node {} ({}) was cut off from etcd while alive: its lease expired "
        "and it stopped its ranks (fencing)",
        f.node_rank, host_);
    (void)Retry([&] {
      return etcd_->Put(keys_.failure(last_plan_gen_, "lost-" + info_.id), f.ToJson().dump());
    });
    // The job may have ended meanwhile: its report then learns the loss was a partition.
    Result<std::optional<rdzv::StopRecord>> over = ReadStop();
    if (over.ok() && *over) {
      WriteGoodput(true, (*over)->code);
      return std::optional<int>((*over)->code);
    }
  }
  fenced_ = false;
  return std::optional<int>();
}

Result<std::optional<int>> NodeAgent::WaitAsSpare(int64_t g, const rdzv::Plan& plan) {
  log::Info("launch: generation {}: this node is a spare (active: {})", g,
            fmt::join(plan.nodes, ", "));
  // A spare watches: a lost active node ends the generation too (someone must say so), and
  // the job may end while it waits. Live: it may take a lost node's place instead.
  if (live_) live_->Begin(g, supervisor_->heartbeat_dir());
  bool finished = false;
  std::optional<rdzv::LiveVacancy> vacancy;
  view_.WaitUntil(
      [&] {
        bool current = true;
        if (live_) {
          current = LiveStillCurrent(g, plan);
          vacancy = LiveClaimVacancy(g);
          if (vacancy) return true;
        }
        finished = AllDone(g);
        return finished || !(live_ ? current : view_.StillCurrent());
      },
      1e9);
  if (vacancy) {
    rdzv::Plan mine = plan;
    mine.nodes[static_cast<size_t>(vacancy->node)] = info_.id;
    view_.Begin(g, mine, vacancy->node);
    return RunActive(g, mine, vacancy->node, vacancy);
  }
  if (finished) {
    log::Info("launch: job {} finished on every node", a_.job_id);
    return std::optional<int>(0);
  }
  // The lost stay for the next rendezvous to take as well (recording them again is harmless).
  const std::set<std::string> gone = view_.End(/*forget_lost=*/false).lost;
  if (!gone.empty()) TENAX_RETURN_IF_ERROR(RecordLost(g, plan, gone));
  return std::optional<int>();
}

Result<std::optional<int>> NodeAgent::RunActive(int64_t g, const rdzv::Plan& plan, int node_rank,
                                                const std::optional<rdzv::LiveVacancy>& vacancy) {
  // Rank 0's store lives on node 0: its agent publishes a free port there.
  std::string master;
  if (node_rank == 0) {
    master = fmt::format("{}:{}", info_.address, FreeTcpPort(info_.address));
    TENAX_RETURN_IF_ERROR(
        Retry([&] { return etcd_->PutIfAbsent(keys_.master(g), master); }).status());
  }
  view_.WaitUntil(
      [&] {
        Result<std::optional<etcd::KeyValue>> m = etcd_->Get(keys_.master(g));
        if (m.ok() && *m) master = (**m).value;
        return (m.ok() && *m) || !view_.StillCurrent();
      },
      120);
  if (!view_.StillCurrent() || master.empty()) {
    (void)view_.End(/*forget_lost=*/false);
    return std::optional<int>();
  }
  // A vacancy's ranks take their state from the live members, not from a checkpoint.
  if (Status st = vacancy ? Status::Ok() : PrepareCheckpoints(g); !st.ok()) {
    // This node cannot resume where the others do: a failure of the generation.
    log::Error("launch: {}", st.message());
    rdzv::FailureReport f;
    f.agent = info_.id;
    f.host = host_;
    f.node_rank = node_rank;
    f.code = ToInt(ExitCode::kIoError);
    f.kind = protocol::FailureKindName(FailureKind::kIoError);
    f.cause = st.message();
    f.wall_s = WallNow();
    (void)Retry([&] { return etcd_->Put(keys_.failure(g, info_.id), f.ToJson().dump()); });
    TENAX_RETURN_IF_ERROR(
        Advance(g, f.code, "node " + std::to_string(node_rank) + ": " + st.message()));
    (void)view_.End(/*forget_lost=*/false);
    return std::optional<int>();
  }
  GenerationPlan gp;
  gp.generation = static_cast<int>(g);
  gp.node_rank = node_rank;
  gp.nnodes = o_.nnodes;
  gp.master_addr = master.substr(0, master.rfind(':'));
  gp.master_port = std::atoi(master.substr(master.rfind(':') + 1).c_str());
  gp.live_vacancy = vacancy;
  if (!progress_.joinable()) progress_ = std::thread([this] { ProgressLoop(); });
  if (live_ && !vacancy) live_->Begin(g, supervisor_->heartbeat_dir());  // a spare's did already
  Supervisor::Outcome out = supervisor_->RunGeneration(gp, [&]() -> std::optional<std::string> {
    // The beats for ProgressLoop.
    if (live_) return LiveStopReason(g, plan, supervisor_->beats());
    return view_.StopReason(supervisor_->beats());
  });
  const AgentView::Ended ended = view_.End(/*forget_lost=*/true);
  const std::set<std::string>& gone = ended.lost;
  if (ended.lease_lost || Fenced()) {
    fenced_ = true;
    fenced_at_ = WallNow();
  }
  supervisor_->Prewarm();  // the next generation's processes start up during the rendezvous
  for (nlohmann::json f : supervisor_->exit_faults()) {  // for goodput.json, written by node 0
    f["node"] = node_rank;
    f.erase("time_s");  // this agent's clock; time_unix places it on the job's
    (void)etcd_->Put(keys_.exit_fault(g, f.value("rank", -1)), f.dump());
  }
  PublishReport(g, node_rank, out);
  if (out.interrupted) {
    TENAX_RETURN_IF_ERROR(Stop(out.exit_code, "a node agent was told to stop (SIGINT/SIGTERM)"));
    return std::optional<int>();
  }
  // The others found this node lost and went on: what it saw meanwhile (its own node lost, the
  // others gone at the job's end) is not its to record (RegisterAgain says what happened).
  if (fenced_) return std::optional<int>();
  if (!gone.empty()) {
    TENAX_RETURN_IF_ERROR(RecordLost(g, plan, gone));
    return std::optional<int>();
  }
  if (out.verdict) {
    const Verdict& v = *out.verdict;
    rdzv::FailureReport f = ReportOf(v, node_rank);
    if (v.kind == FailureKind::kSilentCorruption) f.sdc = NodeSdcRecords(g, node_rank);
    TENAX_RETURN_IF_ERROR(
        Retry([&] { return etcd_->Put(keys_.failure(g, info_.id), f.ToJson().dump()); }).status());
    if (f.secondary) AwaitCulprit(g, plan, kAwaitCulpritS);
    TENAX_RETURN_IF_ERROR(Advance(g, v.code, fmt::format("node {}: {}", node_rank, v.cause)));
    return std::optional<int>();
  }
  if (out.superseded) return std::optional<int>();
  // Every local rank finished: done here; the job is done when every node is.
  TENAX_RETURN_IF_ERROR(
      Retry([&] { return etcd_->Put(keys_.done(g, node_rank), info_.id); }).status());
  bool all_done = false;
  view_.WaitUntil(
      [&] {
        if (live_) LiveNodesLost(g, plan, /*active=*/true);  // a node lost while we wait
        all_done = AllDone(g);
        Result<int64_t> now = CurrentGeneration();
        return all_done || (now.ok() && *now != g) || view_.stopped();
      },
      1e9);
  if (all_done) {
    // The job is over: a launch with this job id again only reports it (stop code 0).
    (void)etcd_->PutIfAbsent(keys_.stop(), rdzv::StopRecord{0, "finished"}.ToJson().dump());
    if (live_) (void)etcd_->DeletePrefix(keys_.live_store());  // the ranks' groups are gone
    if (ReportingAgent(g, plan) == info_.id) WriteGoodput(true, 0);
    log::Info("launch: job {} finished on every node", a_.job_id);
    return std::optional<int>(0);
  }
  return std::optional<int>();
}

}  // namespace tenax::launch::agent_internal

namespace tenax::launch {

Result<int> RunNodeAgent(const LaunchOptions& options, JobInfo job, AgentOptions agent,
                         std::string host, std::string exe) {
  if (!etcd::EtcdClientAvailable()) {
    return InvalidArgument(
        "--rdzv etcd://... needs the etcd client, which this build lacks "
        "(install libcpp-httplib-dev and rebuild)");
  }
  agent_internal::NodeAgent a(options, std::move(job), std::move(agent), std::move(host),
                              std::move(exe));
  return a.Run();
}

}  // namespace tenax::launch
