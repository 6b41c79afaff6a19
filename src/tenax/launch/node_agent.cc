#include "tenax/launch/node_agent.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "tenax/checkpoint/manifest.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/checkpoint_sync.h"
#include "tenax/launch/rendezvous.h"
#include "tenax/protocol/agent_channel.h"
#include "tenax/protocol/protocol.h"
#include "tenax/report/html_report.h"

namespace tenax::launch {
namespace {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::ToInt;

constexpr double kPollS = 0.5;  // re-read etcd at least this often while waiting
// How often an active agent publishes its ranks' progress, and node 0's agent reads everyone's:
// a ranks' beat holds its last 16 steps, so steps of up to 32 per second are all seen.
constexpr double kProgressS = 0.5;
// Each read or write between agents (checkpoint files, replicas): a peer stopped mid-transfer
// (SIGSTOP, a hung host) fails after this long instead of holding a push, or the agent's exit,
// for the library's default 30 s. Generous for a healthy network: it bounds one read, not a file.
constexpr std::chrono::milliseconds kPeerIoTimeout{5000};

std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) out += fmt::format("{:02x}", rd() & 0xff);
  return out;
}

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

// A TCP port free on `address` a moment ago (rank 0's store binds it next).
int FreePortOn(const std::string& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = INADDR_ANY;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// etcd is briefly unavailable while a member is lost and a new leader is elected (about a second
// with default settings): retry what must not fail for that, for up to `budget_s`. Only
// Unavailable is retried; every operation retried here is safe to repeat (idempotent, or a
// compare-and-swap whose repeat after an unknown outcome is harmless).
template <typename F>
auto Retry(F fn, double budget_s = 30) -> decltype(fn()) {
  const double deadline = protocol::MonotonicNow() + budget_s;
  double pause = 0.1;
  for (;;) {
    auto r = fn();
    if (r.ok() || r.status().code() != StatusCode::kUnavailable ||
        protocol::MonotonicNow() + pause > deadline) {
      return r;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    pause = std::min(pause * 2, 1.0);
  }
}

int64_t ParseInt(const std::string& s, int64_t fallback) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return (end != s.c_str() && *end == '\0') ? v : fallback;
}

// The last path component of every key in `r` (keys under `prefix`: agents/<id>, slow/<id>).
std::set<std::string> IdsUnder(const RangeResponse& r, const std::string& prefix) {
  std::set<std::string> ids;
  for (const KeyValue& kv : r.kvs) ids.insert(kv.key.substr(prefix.size()));
  return ids;
}

// The readable agents/<id> records of `r`, by agent id.
std::map<std::string, rdzv::AgentInfo> AgentRecords(const RangeResponse& r) {
  std::map<std::string, rdzv::AgentInfo> agents;
  for (const KeyValue& kv : r.kvs) {
    if (auto info = rdzv::AgentInfo::FromJson(kv.value); info.ok()) agents[info->id] = *info;
  }
  return agents;
}

class NodeAgent {
 public:
  NodeAgent(const LaunchOptions& o, JobInfo job, AgentOptions a, std::string host, std::string exe)
      : o_(o), a_(std::move(a)), keys_(a_.job_id), host_(std::move(host)) {
    job_ = std::move(job);
    exe_ = std::move(exe);
  }
  ~NodeAgent();
  Result<int> Run();

 private:
  Status Register();
  void OnEvents(const std::vector<WatchEvent>& events);
  Result<int64_t> CurrentGeneration();
  // Waits until `done()` is true, re-checking whenever etcd changed (and at least every
  // kPollS); false after `timeout_s`.
  bool WaitUntil(const std::function<bool()>& done, double timeout_s);
  // Joins generation g and waits for its plan; nullopt when g is no longer current, the job
  // stopped, or the lease was lost.
  Result<std::optional<rdzv::Plan>> Rendezvous(int64_t g);
  void LogFailureOf(int64_t g);
  Result<std::optional<rdzv::StopRecord>> ReadStop();
  Status Stop(int code, const std::string& reason);
  // After g failed: the next generation, or the job's end.
  Status Advance(int64_t g, int code, const std::string& why);
  Status RecordLost(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& lost);
  Status Commit(int64_t generation, int64_t step, const nlohmann::json& manifest);
  // Before this node's ranks resume: its checkpoint folder holds exactly the job's commits (a
  // commit etcd does not know is moved aside) and the newest one complete, its missing files
  // fetched from the other nodes' folders and RAM replicas.
  Status PrepareCheckpoints(int64_t g);
  // A new commit: this node's files of it go to the next node's RAM (replicas), in the background.
  void PushReplicas(const std::string& commit_json);
  std::vector<FilePeer> Peers();
  void PublishReport(int64_t g, int node_rank, const Supervisor::Outcome& out);
  // This node's account of a failure its ranks saw (failures/<G>/<id>).
  rdzv::FailureReport ReportOf(const Verdict& v, int node_rank) const;
  // Supervisor's RemoteHangFn: this node's ranks hang waiting for a rank elsewhere. Records this
  // node's (secondary) evidence without moving the generation, then waits until another node
  // names the culprit (or the generation moves, or `budget_s` passes) before they are killed.
  void AwaitRemoteHang(const Verdict& v, double budget_s);
  // Progress across nodes, on a thread of its own so that etcd's latency never stalls the
  // supervision loop: every kProgressS it publishes this node's ranks' compute times of the
  // running generation (gen/<G>/progress/<node>); node 0's agent also finds stragglers among
  // every rank of the job from everyone's (a whole slow node looks normal to its own launcher).
  void ProgressLoop();
  // Node 0's view of one generation's stragglers.
  struct Judge {
    int64_t generation = -1;
    std::unique_ptr<StragglerDetector> detector;  // over every rank of the job
    std::map<int, rdzv::FailureReport> pending;   // node -> its straggling, to be replaced
    bool said_no_spare = false;
  };
  // Node 0: the stragglers in what the nodes published for g. With --replace-stragglers, once a
  // spare node is ready (now or later), a straggler's node is marked slow (a spare of last
  // resort), the failure recorded and g ended; returns the reason to stop g then.
  std::optional<std::string> JudgeStragglers(int64_t g, const rdzv::Plan& plan, Judge* judge);
  void WriteGoodput(bool ended, int code);
  double WallNow() const { return protocol::WallNow(); }

  // Constant after construction.
  const LaunchOptions& o_;
  const AgentOptions a_;
  const rdzv::Keys keys_;
  const std::string host_;
  JobInfo job_;
  std::string exe_;

  std::unique_ptr<EtcdClient> etcd_;
  std::unique_ptr<EtcdLeaseKeeper> keeper_;
  std::unique_ptr<EtcdWatcher> watcher_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<protocol::AgentChannelServer> channel_;
  std::unique_ptr<CheckpointFileServer> files_;  // this node's checkpoint files, for peers
  std::unique_ptr<ReplicaPusher> pusher_;        // this node's files of each commit, to a peer
  std::string secret_;
  std::string replica_root_;
  rdzv::AgentInfo info_;
  double job_start_unix_ = 0;
  rdzv::Plan last_plan_;  // the newest plan this agent saw (whose losses it may record)
  std::map<std::string, std::string> hosts_;  // agent id -> host, as last seen in agents/
  int64_t last_plan_gen_ = -1;
  bool fenced_ = false;  // this agent lost its lease while active in last_plan_gen_
  double fenced_at_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_: what the watcher and the lease keeper saw.
  uint64_t changes_ = 0;
  bool lease_lost_ = false;
  bool stopped_ = false;
  int64_t running_ = -1;                           // the generation whose ranks run here (-1: none)
  bool moved_ = false;                             // the generation key left `running_`
  std::set<std::string> active_;                   // agents active in `running_`
  std::set<std::string> lost_;                     // ... whose agents/<id> key vanished
  std::map<std::string, rdzv::AgentInfo> agents_;  // live agents as last read
  int node_rank_ = -1;                             // this node's in `running_`
  std::vector<std::string> plan_nodes_;            // `running_`'s plan
  rdzv::Plan running_plan_;                        // ... all of it
  int64_t lease_id_ = 0;                           // the lease this agent's keys hang on
  // The progress thread's: the running generation's beats (copied by the StopFn on the
  // supervision loop's thread), a reason to stop it (a straggler node replaced), and quitting.
  std::vector<protocol::Beat> beats_;
  std::optional<std::string> straggler_stop_;
  bool quit_ = false;
  std::thread progress_;  // ProgressLoop: started by Run, joined first by the destructor
};

NodeAgent::~NodeAgent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
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
  TENAX_ASSIGN_OR_RETURN(EtcdLease lease, etcd_->GrantLease(std::chrono::seconds(a_.lease_ttl_s)));
  TENAX_ASSIGN_OR_RETURN(
      keeper_, EtcdLeaseKeeper::Start(a_.etcd, lease, [this](const Status& why) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          lease_lost_ = true;
          ++changes_;
        }
        log::Error("launch: lost the etcd lease ({}); stopping this node's ranks (fencing)",
                   why.message());
        cv_.notify_all();
        if (supervisor_) supervisor_->Wake();
      }));
  {
    std::lock_guard<std::mutex> lock(mu_);
    lease_lost_ = false;
    lease_id_ = lease.id;
  }
  TENAX_RETURN_IF_ERROR(
      etcd_->Put(keys_.agent(info_.id), info_.ToJson().dump(), lease.id).status());
  return Status::Ok();
}

void NodeAgent::OnEvents(const std::vector<WatchEvent>& events) {
  std::vector<std::string> commits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++changes_;
    for (const WatchEvent& e : events) {
      const std::string& key = e.kv.key;
      if (key == keys_.generation() && e.type == WatchEvent::Type::kPut && running_ >= 0 &&
          ParseInt(e.kv.value, -1) != running_) {
        moved_ = true;
      } else if (key == keys_.stop()) {
        stopped_ = true;
      } else if (e.type == WatchEvent::Type::kPut &&
                 key.compare(0, keys_.commits().size(), keys_.commits()) == 0) {
        commits.push_back(e.kv.value);
      } else if (e.type == WatchEvent::Type::kDelete &&
                 key.compare(0, keys_.agents().size(), keys_.agents()) == 0) {
        const std::string id = key.substr(keys_.agents().size());
        if (active_.count(id) > 0) lost_.insert(id);
      }
    }
  }
  cv_.notify_all();
  if (supervisor_) supervisor_->Wake();
  for (const std::string& c : commits) PushReplicas(c);
}

Result<int64_t> NodeAgent::CurrentGeneration() {
  TENAX_ASSIGN_OR_RETURN(bool created,
                         Retry([&] { return etcd_->PutIfAbsent(keys_.generation(), "0"); }));
  (void)created;
  TENAX_ASSIGN_OR_RETURN(std::optional<KeyValue> g,
                         Retry([&] { return etcd_->Get(keys_.generation()); }));
  if (!g) return Internal("the job's generation key vanished");
  return ParseInt(g->value, 0);
}

bool NodeAgent::WaitUntil(const std::function<bool()>& done, double timeout_s) {
  const double deadline = protocol::MonotonicNow() + timeout_s;
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = changes_;
    }
    if (done()) return true;
    const double left = deadline - protocol::MonotonicNow();
    if (left <= 0) return false;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(std::min(left, kPollS)),
                 [&] { return changes_ != seen; });
  }
}

Result<std::optional<rdzv::StopRecord>> NodeAgent::ReadStop() {
  TENAX_ASSIGN_OR_RETURN(std::optional<KeyValue> kv,
                         Retry([&] { return etcd_->Get(keys_.stop()); }));
  if (!kv) return std::optional<rdzv::StopRecord>();
  TENAX_ASSIGN_OR_RETURN(rdzv::StopRecord s, rdzv::StopRecord::FromJson(kv->value));
  return std::optional<rdzv::StopRecord>(s);
}

Status NodeAgent::Stop(int code, const std::string& reason) {
  rdzv::StopRecord s{code, reason};
  TENAX_ASSIGN_OR_RETURN(
      bool first, Retry([&] { return etcd_->PutIfAbsent(keys_.stop(), s.ToJson().dump()); }));
  if (first) log::Error("launch: the job stops (exit code {}): {}", code, reason);
  return Status::Ok();
}

Status NodeAgent::Advance(int64_t g, int code, const std::string& why) {
  if (!protocol::Restartable(code)) {
    return Stop(code, fmt::format("{} (exit code {}: a restart cannot fix it, "
                                  "docs/exit_codes.md)",
                                  why, code));
  }
  if (g + 1 > o_.max_restarts) {
    return Stop(
        code, fmt::format("{}; no restarts left ({} used, --max-restarts)", why, o_.max_restarts));
  }
  TENAX_ASSIGN_OR_RETURN(bool bumped, Retry([&] {
                           return etcd_->CompareAndSwap(keys_.generation(), std::to_string(g),
                                                        std::to_string(g + 1));
                         }));
  if (bumped) log::Info("launch: generation {} -> {}: {}", g, g + 1, why);
  return Status::Ok();
}

Status NodeAgent::RecordLost(int64_t g, const rdzv::Plan& plan, const std::set<std::string>& lost) {
  for (const std::string& id : lost) {
    rdzv::FailureReport f;
    f.agent = id;
    f.host = hosts_.count(id) > 0 ? hosts_[id] : std::string();
    f.node_rank = plan.NodeRankOf(id);
    f.kind = "node-lost";
    f.code = 137;
    f.wall_s = WallNow();
    f.cause = fmt::format(
        "node {} (agent {}) stopped renewing its etcd lease: killed, stopped, "
        "or cut off from the network",
        f.node_rank, id);
    TENAX_ASSIGN_OR_RETURN(bool first, Retry([&] {
                             return etcd_->PutIfAbsent(keys_.failure(g, "lost-" + id),
                                                       f.ToJson().dump());
                           }));
    if (first) log::Error("launch: {}", f.cause);
  }
  return Advance(g, 137, fmt::format("{} node(s) lost", lost.size()));
}

Status NodeAgent::Commit(int64_t generation, int64_t step, const nlohmann::json& manifest) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lease_lost_) return Unavailable("this node lost its etcd lease (fenced)");
  }
  Txn txn;
  txn.compare.push_back(
      Compare::Value(keys_.generation(), CompareOp::kEqual, std::to_string(generation)));
  txn.success.push_back(
      TxnOp::Put(keys_.commit(step),
                 nlohmann::json{{"generation", generation}, {"manifest", manifest}}.dump()));
  txn.failure.push_back(TxnOp::Get(keys_.generation()));
  // A repeat after an unknown outcome (a leader lost mid-request) is harmless: the comparison
  // still holds and the same record is written again.
  TENAX_ASSIGN_OR_RETURN(TxnResponse r, Retry([&] { return etcd_->Commit(txn); }, 40));
  if (!r.succeeded) {
    std::string now = "?";
    if (!r.gets.empty() && !r.gets[0].kvs.empty()) now = r.gets[0].kvs[0].value;
    return Unavailable(
        fmt::format("generation {} is no longer current (now {}): a rank of an old "
                    "generation must not commit a checkpoint",
                    generation, now));
  }
  return Status::Ok();
}

rdzv::FailureReport NodeAgent::ReportOf(const Verdict& v, int node_rank) const {
  rdzv::FailureReport f;
  f.agent = info_.id;
  f.host = host_;
  f.node_rank = node_rank;
  f.rank = v.rank;
  f.code = v.code;
  f.kind = protocol::FailureKindName(v.kind);
  f.cause = v.cause;
  // Nobody here is to blame: every failed rank only lost a peer (or waited for one).
  f.secondary = v.rank < 0;
  // The evidence's time, on the wall clock (nodes compare wall clocks; monotonic clocks are per
  // machine).
  f.wall_s = WallNow() - (protocol::MonotonicNow() - v.mono_s);
  return f;
}

void NodeAgent::AwaitRemoteHang(const Verdict& v, double budget_s) {
  int64_t g;
  int node_rank;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = running_;
    node_rank = node_rank_;
  }
  if (g < 0) return;
  (void)etcd_->Put(keys_.failure(g, info_.id), ReportOf(v, node_rank).ToJson().dump());
  log::Info(
      "launch: this node's ranks wait for a rank on another node; waiting up to {:.0f}s for "
      "that node to name it before stopping them",
      budget_s);
  const bool named = WaitUntil(
      [&] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (moved_ || stopped_ || lease_lost_ || !lost_.empty()) return true;
        }
        Result<RangeResponse> fs = etcd_->GetPrefix(keys_.failures(g));
        if (!fs.ok()) return false;
        return std::any_of(fs->kvs.begin(), fs->kvs.end(), [](const KeyValue& kv) {
          Result<rdzv::FailureReport> f = rdzv::FailureReport::FromJson(kv.value);
          return f.ok() && !f->secondary;
        });
      },
      budget_s);
  if (!named) log::Warn("launch: no other node named the rank this node's ranks wait for");
}

void NodeAgent::ProgressLoop() {
  Judge judge;
  std::string published;
  for (;;) {
    int64_t g;
    int node_rank;
    int64_t lease;
    rdzv::Plan plan;
    rdzv::NodeProgress mine;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(kProgressS), [&] { return quit_; });
      if (quit_) return;
      if (running_ < 0 || node_rank_ < 0 || lease_lost_ || moved_ || straggler_stop_) continue;
      g = running_;
      node_rank = node_rank_;
      lease = lease_id_;
      plan = running_plan_;
      for (size_t l = 0; l < beats_.size(); ++l) {
        const protocol::Beat& b = beats_[l];
        if (b.generation != g || b.recent.empty()) continue;
        mine.ranks[node_rank * o_.nproc_per_node + static_cast<int>(l)] = b.recent;
      }
    }
    if (!mine.ranks.empty()) {
      mine.agent = info_.id;
      mine.host = host_;
      mine.node_rank = node_rank;
      std::string text = mine.ToJson().dump();
      if (text != published) {  // attached to the lease: it vanishes with this agent
        if (etcd_->Put(keys_.progress(g, node_rank), text, lease).ok()) published = std::move(text);
      }
    }
    if (node_rank != 0) continue;
    if (judge.generation != g) {
      judge = Judge();
      judge.generation = g;
      judge.detector = std::make_unique<StragglerDetector>(o_.nnodes * o_.nproc_per_node,
                                                           o_.straggler_factor, o_.straggler_steps);
    }
    if (std::optional<std::string> stop = JudgeStragglers(g, plan, &judge)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        straggler_stop_ = std::move(stop);
      }
      if (supervisor_) supervisor_->Wake();
    }
  }
}

std::optional<std::string> NodeAgent::JudgeStragglers(int64_t g, const rdzv::Plan& plan,
                                                      Judge* judge) {
  Result<RangeResponse> all = etcd_->GetPrefix(keys_.progresses(g));
  if (!all.ok()) return std::nullopt;  // etcd busy (a leader change): next time
  const int world = o_.nnodes * o_.nproc_per_node;
  std::map<int, std::string> host_of;  // node rank -> host
  for (const KeyValue& kv : all->kvs) {
    Result<rdzv::NodeProgress> p = rdzv::NodeProgress::FromJson(kv.value);
    if (!p.ok()) continue;
    host_of[p->node_rank] = p->host;
    for (const auto& [rank, steps] : p->ranks) {
      if (rank >= 0 && rank < world) judge->detector->Add(rank, steps);
    }
  }
  for (const Straggler& s : judge->detector->Evaluate()) {
    const int node = s.local / o_.nproc_per_node;
    const std::string agent = node < static_cast<int>(plan.nodes.size()) ? plan.nodes[node] : "";
    const std::string host = host_of[node];
    log::Warn(
        "launch: straggler: rank {} on node {} ({}) computed {:.3f}s per step against a median "
        "of {:.3f}s of the job's other ranks for {} steps in a row (step {})",
        s.local, node, host, s.compute_s, s.median_s, o_.straggler_steps, s.step);
    const nlohmann::json record = {
        {"time_unix", WallNow()}, {"generation", g}, {"rank", s.local}, {"node", node},
        {"host", host},           {"agent", agent},  {"step", s.step},  {"compute_s", s.compute_s},
        {"median_s", s.median_s}};
    (void)etcd_->Put(keys_.straggler(g, s.local), record.dump());
    if (!o_.replace_stragglers || agent.empty() || judge->pending.count(node) > 0) continue;
    rdzv::FailureReport& f = judge->pending[node];
    f.agent = agent;
    f.host = host;
    f.node_rank = node;
    f.rank = s.local;
    f.code = ToInt(ExitCode::kStraggler);
    f.kind = protocol::FailureKindName(FailureKind::kStraggler);
    f.cause = fmt::format(
        "node {} straggles: its rank {} computed {:.3f}s per step against a median of {:.3f}s of "
        "the job's other ranks for {} steps in a row (--replace-stragglers: a spare node takes "
        "its place)",
        node, s.local, s.compute_s, s.median_s, o_.straggler_steps);
    f.wall_s = WallNow();
  }
  if (judge->pending.empty()) return std::nullopt;
  // A spare node that is alive and not itself a replaced straggler takes the slow node's place;
  // until one is there, the slow node trains on.
  Result<RangeResponse> alive = etcd_->GetPrefix(keys_.agents());
  Result<RangeResponse> slow = etcd_->GetPrefix(keys_.slow_agents());
  if (!alive.ok() || !slow.ok()) return std::nullopt;
  std::set<std::string> ready = IdsUnder(*alive, keys_.agents());
  for (const std::string& a : IdsUnder(*slow, keys_.slow_agents())) ready.erase(a);
  for (const std::string& a : plan.nodes) ready.erase(a);
  if (ready.empty()) {
    if (!judge->said_no_spare) {
      log::Warn("launch: no spare node yet to take node {}'s place: it trains on",
                judge->pending.begin()->first);
      judge->said_no_spare = true;
    }
    return std::nullopt;
  }
  const rdzv::FailureReport f = judge->pending.begin()->second;
  (void)Retry([&] {
    return etcd_->Put(keys_.slow_agent(f.agent), nlohmann::json{{"generation", g}}.dump());
  });
  (void)Retry(
      [&] { return etcd_->Put(keys_.failure(g, "straggler-" + f.agent), f.ToJson().dump()); });
  if (Status st = Advance(g, f.code, f.cause); !st.ok()) log::Warn("launch: {}", st.message());
  return fmt::format("node {} straggles and is replaced (--replace-stragglers)", f.node_rank);
}

void NodeAgent::PublishReport(int64_t g, int node_rank, const Supervisor::Outcome& out) {
  const nlohmann::json report = supervisor_->goodput().Report(supervisor_->Elapsed(), 0, false);
  if (!report.contains("generations") || report["generations"].empty()) return;
  nlohmann::json gen = report["generations"].back();
  const double t0 = supervisor_->start_unix();
  auto unix_of = [&](const char* key) {
    const double v = gen.value(key, -1.0);
    return v >= 0 ? t0 + v : -1.0;
  };
  const nlohmann::json r = {{"agent", info_.id},
                            {"host", host_},
                            {"start_unix", unix_of("start_s")},
                            {"ready_unix", unix_of("ready_s")},
                            {"end_unix", unix_of("end_s")},
                            {"last_step_unix", unix_of("last_step_at")},
                            {"resume_step", gen.value("resume_step", int64_t{-1})},
                            {"last_step", gen.value("last_step", int64_t{-1})},
                            {"steps_s", gen.value("steps_s", 0.0)},
                            {"checkpoint_s", gen.value("checkpoint_s", 0.0)},
                            {"tokens_per_s", supervisor_->lead_beat().tokens_per_s},
                            {"run_dir", supervisor_->lead_beat().run_dir},
                            {"exit_code", out.exit_code}};
  (void)etcd_->Put(keys_.report(g, node_rank), r.dump());
}

std::vector<FilePeer> NodeAgent::Peers() {
  std::vector<FilePeer> peers;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, a] : agents_) {
    if (id == info_.id || a.file_port <= 0) continue;
    peers.push_back(
        {fmt::format("agent {} on {}", id, a.host), fmt::format("{}:{}", a.address, a.file_port)});
  }
  return peers;
}

Status NodeAgent::PrepareCheckpoints(int64_t g) {
  if (job_.checkpoint_dir.empty()) return Status::Ok();
  TENAX_ASSIGN_OR_RETURN(RangeResponse commits,
                         Retry([&] { return etcd_->GetPrefix(keys_.commits()); }));
  std::map<int64_t, uint32_t> accepted;
  std::optional<ckpt::Manifest> newest;
  for (const KeyValue& kv : commits.kvs) {
    const auto j = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("manifest")) continue;
    Result<ckpt::Manifest> m = ckpt::Manifest::Parse(j["manifest"].dump(), kv.key);
    if (!m.ok()) continue;
    accepted[m->step] = ckpt::ManifestCrc(*m);
    if (!newest || m->step > newest->step) newest = *m;
  }
  if (!newest) return Status::Ok();  // nothing committed yet: a fresh start everywhere
  // The sources of files are the agents alive now (a lost one would make a file nobody has look
  // merely unreachable, below).
  TENAX_ASSIGN_OR_RETURN(RangeResponse agents,
                         Retry([&] { return etcd_->GetPrefix(keys_.agents()); }));
  {
    std::lock_guard<std::mutex> lock(mu_);
    agents_ = AgentRecords(agents);
  }
  // A commit etcd does not know (a rank of an old generation wrote it, or it is newer than the
  // job's newest) must not be resumed from.
  const int64_t oldest = accepted.begin()->first;
  for (int attempt = 0;; ++attempt) {  // two agents may move the same folder on shared storage
    Result<std::vector<std::string>> moved =
        SetAsideUnacceptedCommits(LocalFs(), job_.checkpoint_dir, accepted, oldest);
    if (moved.ok()) {
      for (const auto& m : *moved)
        log::Warn("launch: {} is not a commit of the job: moved aside", m);
      break;
    }
    if (attempt > 0) return moved.status();
  }
  ReconcileOptions ro;
  ro.local_replica_root = replica_root_;
  ro.transfer.io_timeout = kPeerIoTimeout;
  Result<ReconcileReport> r =
      Reconcile(LocalFs(), job_.checkpoint_dir, *newest, Peers(), secret_, ro);
  if (!r.ok()) {
    r = Reconcile(LocalFs(), job_.checkpoint_dir, *newest, Peers(), secret_,
                  ro);  // shared folder race
  }
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
    // Every live node answered and none has some file of it: the step is lost (its node died
    // before its replicas reached a peer). Drop its record while g is current, so that every
    // node resumes from the commit before it in the next generation.
    Txn txn;
    txn.compare.push_back(Compare::Value(keys_.generation(), CompareOp::kEqual, std::to_string(g)));
    txn.success.push_back(TxnOp::Delete(keys_.commit(newest->step)));
    Result<TxnResponse> dropped = Retry([&] { return etcd_->Commit(txn); });
    if (dropped.ok() && dropped->succeeded) {
      log::Error(
          "launch: checkpoint step {} is lost: no live node holds every file of it; the job "
          "goes back to the commit before it",
          newest->step);
    }
  }
  if (!r.ok()) {
    return r.status().WithContext(fmt::format(
        "generation {}: this node cannot get every file of checkpoint step {} (the job's newest "
        "commit)",
        g, newest->step));
  }
  if (r->fetched() > 0) log::Info("launch: {}", r->Summary(job_.checkpoint_dir));
  return Status::Ok();
}

void NodeAgent::PushReplicas(const std::string& commit_json) {
  if (!pusher_) return;
  const auto j = nlohmann::json::parse(commit_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("manifest")) return;
  Result<ckpt::Manifest> m = ckpt::Manifest::Parse(j["manifest"].dump(), "commit");
  if (!m.ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ < 0 || node_rank_ < 0 || plan_nodes_.size() < 2) return;
  // The next node keeps this node's files in RAM: a node lost with its disk is rebuilt from it.
  const std::string& buddy = plan_nodes_[(node_rank_ + 1) % plan_nodes_.size()];
  // Only the files this node's ranks wrote (model-/optimizer-rankRRRRR-...; node 0 also the ones
  // without a rank, train_state.json): on shared storage the others push theirs.
  ckpt::Manifest own = *m;
  own.files.clear();
  for (const auto& [name, entry] : m->files) {
    bool mine = name.find("rank") == std::string::npos && node_rank_ == 0;
    for (int l = 0; l < o_.nproc_per_node && !mine; ++l) {
      mine = name.find(fmt::format("rank{:05d}", node_rank_ * o_.nproc_per_node + l)) !=
             std::string::npos;
    }
    if (mine) own.files[name] = entry;
  }
  auto it = agents_.find(buddy);
  if (it == agents_.end() || it->second.file_port <= 0) return;
  pusher_->Submit(own, {fmt::format("agent {} on {}", buddy, it->second.host),
                        fmt::format("{}:{}", it->second.address, it->second.file_port)});
}

// goodput.json from what etcd holds about every generation (node 0's report of each) and every
// failure, so it covers every node and survives the loss of node 0.
void NodeAgent::WriteGoodput(bool ended, int code) {
  if (job_.goodput_path.empty()) return;
  Goodput g(job_start_unix_, nullptr, host_, static_cast<int>(::getpid()));
  Result<int64_t> current = CurrentGeneration();
  if (!current.ok()) return;
  double now = WallNow() - job_start_unix_;
  double last_end = -1;  // when the newest generation ended (a report written after the job ended
                         // still ends where the job did)
  nlohmann::json nodes = nlohmann::json::array();
  for (int64_t gen = 0; gen <= *current; ++gen) {
    Result<std::optional<KeyValue>> rep = etcd_->Get(keys_.report(gen, 0));
    Result<std::optional<KeyValue>> plan_kv = etcd_->Get(keys_.plan(gen));
    if (!plan_kv.ok() || !*plan_kv) continue;  // never ran
    Result<rdzv::Plan> plan = rdzv::Plan::FromJson((*plan_kv)->value);
    if (plan.ok()) nodes.push_back(plan->ToJson());
    nlohmann::json r =
        rep.ok() && *rep ? nlohmann::json::parse((**rep).value, nullptr, false) : nlohmann::json();
    const double start = r.is_object() ? r.value("start_unix", -1.0) : -1.0;
    g.GenerationStarted(static_cast<int>(gen), start >= 0 ? start - job_start_unix_ : now);
    if (r.is_object() && r.value("ready_unix", -1.0) >= 0) {
      protocol::Beat ready;
      ready.generation = static_cast<int>(gen);
      ready.phase = protocol::Phase::kReady;
      ready.resume_step = r.value("resume_step", int64_t{0});
      ready.run_dir = r.value("run_dir", std::string());
      ready.wall_s = r.value("ready_unix", 0.0);
      g.LeadBeat(ready, ready.wall_s - job_start_unix_, ready.wall_s);
      protocol::Beat last = ready;
      last.phase = protocol::Phase::kTrain;
      last.step = r.value("last_step", int64_t{0});
      last.steps_s = r.value("steps_s", 0.0);
      last.checkpoint_s = r.value("checkpoint_s", 0.0);
      last.tokens_per_s = r.value("tokens_per_s", 0.0);
      last.wall_s = r.value("last_step_unix", ready.wall_s);
      if (last.step > ready.resume_step)
        g.LeadBeat(last, last.wall_s - job_start_unix_, last.wall_s);
    }
    if (r.is_object() && r.value("end_unix", -1.0) >= 0) {
      g.GenerationEnded(r.value("end_unix", 0.0) - job_start_unix_, r.value("exit_code", 0));
      last_end = std::max(last_end, r.value("end_unix", 0.0) - job_start_unix_);
    }
    if (Result<RangeResponse> ss = etcd_->GetPrefix(keys_.stragglers(gen)); ss.ok()) {
      for (const KeyValue& kv : ss->kvs) {
        nlohmann::json s = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
        if (!s.is_object()) continue;
        s["time_s"] = s.value("time_unix", job_start_unix_) - job_start_unix_;
        s.erase("time_unix");
        g.AddStraggler(std::move(s));
      }
    }
    Result<RangeResponse> fs = etcd_->GetPrefix(keys_.failures(gen));
    if (!fs.ok()) continue;
    std::vector<rdzv::FailureReport> reports;
    for (const KeyValue& kv : fs->kvs) {
      auto f = rdzv::FailureReport::FromJson(kv.value);
      if (f.ok()) reports.push_back(*f);
    }
    if (std::optional<rdzv::FailureReport> first = rdzv::FirstFailure(reports)) {
      FailureRecord f;
      f.time_s = first->wall_s - job_start_unix_;
      f.generation = static_cast<int>(gen);
      f.rank = first->rank;
      f.node = first->node_rank;
      f.host = first->host;
      f.kind = first->kind;
      f.cause = first->cause;
      f.exit_code = first->code;
      if (first->kind == "node-lost" || first->kind == "partition") {
        // A lost node is known when its lease expires; its peers saw it go earlier (their
        // collectives broke): the earliest of those is when it failed.
        double failed = first->wall_s;
        for (const rdzv::FailureReport& r : reports) {
          if (r.secondary) failed = std::min(failed, r.wall_s);
        }
        f.detection_s = std::max(0.0, first->wall_s - failed);
      }
      g.AddFailure(f);
    }
  }
  if (ended && last_end >= 0) now = std::min(now, last_end + 1.0);
  nlohmann::json report = g.Report(now, code, ended);
  report["nodes_by_generation"] = nodes;
  report["job_id"] = a_.job_id;
  Status st = LocalFs().WriteFileAtomic(job_.goodput_path, report.dump(2) + "\n");
  if (!st.ok()) log::Warn("launch: could not write {}: {}", job_.goodput_path, st.message());
  if (ended) log::Info("launch: {}", Goodput::Summary(report));
  // The run report (report/html_report.h) from the node holding node rank 0, which has the run
  // folder's metrics (on shared storage, or its own ranks' on a private folder).
  if (ended && st.ok()) report::WriteReportAtEnd(job_.run_dir, job_.goodput_path, "launch");
}

void NodeAgent::LogFailureOf(int64_t g) {
  // Every node's log names the failure the job decided on, from every node's evidence: a node's
  // own "generation G -> G+1" line tells only what its ranks saw (often: peers lost).
  Result<RangeResponse> fs = etcd_->GetPrefix(keys_.failures(g));
  if (!fs.ok()) return;
  std::vector<rdzv::FailureReport> reports;
  for (const KeyValue& kv : fs->kvs) {
    auto f = rdzv::FailureReport::FromJson(kv.value);
    if (f.ok()) reports.push_back(*f);
  }
  std::optional<rdzv::FailureReport> first = rdzv::FirstFailure(reports);
  if (!first) return;
  const std::string who = first->rank >= 0
                              ? fmt::format("rank {} on node {}", first->rank, first->node_rank)
                              : fmt::format("node {}", first->node_rank);
  log::Info("launch: generation {} failed: {} ({}; {}): {}", g, who, first->kind, first->host,
            first->cause);
}

Result<std::optional<rdzv::Plan>> NodeAgent::Rendezvous(int64_t g) {
  rdzv::Plan previous;
  bool have_previous = false;
  if (g > 0) {
    TENAX_ASSIGN_OR_RETURN(std::optional<KeyValue> p,
                           Retry([&] { return etcd_->Get(keys_.plan(g - 1)); }));
    if (p) {
      TENAX_ASSIGN_OR_RETURN(previous, rdzv::Plan::FromJson(p->value));
      have_previous = true;
    }
  }
  TENAX_RETURN_IF_ERROR(Retry([&] {
                          return etcd_->Put(keys_.join(g, info_.id), info_.ToJson().dump(),
                                            keeper_->lease());
                        }).status());
  std::optional<rdzv::Plan> plan;
  Status error = Status::Ok();
  bool gone = false;  // g is over (moved on, stopped) or this agent lost its lease
  const double waiting_since = protocol::MonotonicNow();
  double last_said = -1;
  const bool ok = WaitUntil(
      [&] {
        std::set<std::string> lost;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (lease_lost_) return gone = true;
          lost.swap(lost_);
        }
        // An agent of the last plan vanished meanwhile: say so for that generation.
        if (!lost.empty() && last_plan_gen_ >= 0) {
          if (Status st = RecordLost(last_plan_gen_, last_plan_, lost); !st.ok()) {
            log::Warn("launch: {}", st.message());
          }
        }
        Result<std::optional<KeyValue>> p = etcd_->Get(keys_.plan(g));
        if (!p.ok()) return false;  // etcd unreachable for now: keep trying
        if (*p) {
          Result<rdzv::Plan> parsed = rdzv::Plan::FromJson((**p).value);
          if (!parsed.ok()) {
            error = parsed.status();
            return true;
          }
          plan = *parsed;
          return true;
        }
        Result<int64_t> now = CurrentGeneration();
        Result<std::optional<rdzv::StopRecord>> stop = ReadStop();
        if ((now.ok() && *now != g) || (stop.ok() && *stop)) return gone = true;
        Result<RangeResponse> joins = etcd_->GetPrefix(keys_.joins(g));
        Result<RangeResponse> agents = etcd_->GetPrefix(keys_.agents());
        if (!joins.ok() || !agents.ok()) return false;
        const std::set<std::string> alive = IdsUnder(*agents, keys_.agents());
        std::map<std::string, rdzv::AgentInfo> live = AgentRecords(*agents);
        for (const auto& [id, info] : live) hosts_[id] = info.host;
        {
          std::lock_guard<std::mutex> lock(mu_);
          agents_ = std::move(live);
        }
        std::vector<KeyValue> order = joins->kvs;
        std::sort(order.begin(), order.end(), [](const KeyValue& a, const KeyValue& b) {
          return a.create_revision < b.create_revision;
        });
        std::vector<std::string> joined;
        for (const KeyValue& kv : order) {
          const std::string id = kv.key.substr(keys_.joins(g).size());
          if (alive.count(id) > 0) joined.push_back(id);
        }
        const bool all_joined = joined.size() == alive.size();
        if (static_cast<int>(alive.size()) < o_.nnodes) {
          const double waited = protocol::MonotonicNow() - waiting_since;
          if (last_said < 0 || waited - last_said > 10) {
            log::Info(
                "launch: generation {}: waiting for nodes ({} of {} alive; --rdzv-timeout "
                "{:g}s)",
                g, alive.size(), o_.nnodes, a_.nodes_timeout_s);
            last_said = waited;
          }
          if (waited > a_.nodes_timeout_s) {
            error = Stop(ToInt(ExitCode::kUnavailable),
                         fmt::format("only {} of {} nodes after waiting {:g}s (--rdzv-timeout)",
                                     alive.size(), o_.nnodes, a_.nodes_timeout_s));
            return gone = true;
          }
          return false;
        }
        // The earliest-joined live agent plans, once every live agent has joined.
        if (joined.empty() || joined.front() != info_.id || !all_joined) return false;
        Result<RangeResponse> slow = etcd_->GetPrefix(keys_.slow_agents());
        if (!slow.ok()) return false;
        std::optional<rdzv::Plan> made =
            rdzv::MakePlan(g, o_.nnodes, joined, have_previous ? &previous : nullptr,
                           IdsUnder(*slow, keys_.slow_agents()));
        if (!made) return false;
        (void)etcd_->PutIfAbsent(keys_.plan(g), made->ToJson().dump());
        return false;  // read it back on the next turn (another planner may have won)
      },
      a_.nodes_timeout_s + 3600);
  TENAX_RETURN_IF_ERROR(error);
  if (!ok || gone) return std::optional<rdzv::Plan>();
  return plan;
}

Result<int> NodeAgent::Run() {
  TENAX_ASSIGN_OR_RETURN(etcd_, EtcdClient::Create(a_.etcd));
  info_.id = fmt::format("{}-{}-{}", host_, ::getpid(), RandomHex(3));
  info_.host = host_;
  info_.address = a_.address.empty() ? DefaultAddress(host_) : a_.address;
  info_.pid = static_cast<int>(::getpid());
  info_.nproc = o_.nproc_per_node;
  // The job's fixed facts: the first agent writes them, the others must agree.
  TENAX_RETURN_IF_ERROR(etcd_->PutIfAbsent(keys_.secret(), RandomHex(32)).status());
  TENAX_RETURN_IF_ERROR(etcd_->PutIfAbsent(keys_.nnodes(), std::to_string(o_.nnodes)).status());
  TENAX_RETURN_IF_ERROR(
      etcd_->PutIfAbsent(keys_.start(), fmt::format("{:.3f}", WallNow())).status());
  TENAX_ASSIGN_OR_RETURN(std::optional<KeyValue> nnodes, etcd_->Get(keys_.nnodes()));
  if (nnodes && ParseInt(nnodes->value, -1) != o_.nnodes) {
    return InvalidArgument(fmt::format(
        "--nnodes {} disagrees with the job {} in etcd, which has {} nodes; use the same "
        "--nnodes on every node (or another --job-id)",
        o_.nnodes, a_.job_id, nnodes->value));
  }
  TENAX_ASSIGN_OR_RETURN(std::optional<KeyValue> start, etcd_->Get(keys_.start()));
  job_start_unix_ = start ? std::strtod(start->value.c_str(), nullptr) : WallNow();
  TENAX_ASSIGN_OR_RETURN(std::optional<rdzv::StopRecord> stopped, ReadStop());
  if (stopped && stopped->code == 0) {
    log::Info("launch: job {} is already complete; nothing to do", a_.job_id);
    return 0;
  }
  if (stopped) {
    return InvalidArgument(fmt::format(
        "the job {} has already ended in etcd (exit code {}: {}); start a new job with another "
        "--job-id",
        a_.job_id, stopped->code, stopped->reason));
  }
  TENAX_ASSIGN_OR_RETURN(std::optional<KeyValue> secret, etcd_->Get(keys_.secret()));
  if (!secret) return Internal("the job's secret vanished from etcd");
  secret_ = secret->value;
  if (!job_.checkpoint_dir.empty()) {
    // Peers fetch this node's checkpoint files (and the replicas it holds for them) from here.
    replica_root_ = fmt::format("/dev/shm/tenax-replicas-{}-{}", a_.job_id, info_.id);
    FileServerOptions fo;
    fo.address = info_.address;
    fo.checkpoint_folder = job_.checkpoint_dir;
    fo.replica_root = replica_root_;
    fo.secret = secret_;
    TENAX_ASSIGN_OR_RETURN(files_, CheckpointFileServer::Start(fo));
    info_.file_port = files_->port();
    PushOptions po;
    po.transfer.io_timeout = kPeerIoTimeout;
    pusher_ = std::make_unique<ReplicaPusher>(
        LocalFs(), job_.checkpoint_dir, secret_, po, [](int64_t step, const Result<PushReport>& r) {
          if (!r.ok())
            log::Warn("launch: memory replica of step {}: {}", step, r.status().message());
        });
  }
  TENAX_RETURN_IF_ERROR(Register());
  TENAX_ASSIGN_OR_RETURN(RangeResponse now, etcd_->GetPrefix(keys_.root()));
  TENAX_ASSIGN_OR_RETURN(
      watcher_, EtcdWatcher::Start(
                    a_.etcd, keys_.root(), now.revision + 1,
                    [this](const std::vector<WatchEvent>& e) { OnEvents(e); },
                    [](const Status& st) { log::Warn("launch: etcd watch: {}", st.message()); }));
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<ChildWatcher> children, ChildWatcher::Create());
  // The supervisor runs this node's ranks; goodput.json is the agent's (it covers every node).
  JobInfo local = job_;
  local.goodput_path.clear();
  supervisor_ =
      std::make_unique<Supervisor>(o_, local, info_.address, 0, exe_, std::move(children));
  supervisor_->LeaveStragglersToAgent();  // judged among every rank of the job (ProgressLoop)
  supervisor_->SetRemoteHangHook(
      [this](const Verdict& v, double budget_s) { AwaitRemoteHang(v, budget_s); });
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

  for (;;) {
    bool lost;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lost = lease_lost_;
    }
    if (lost) {  // fenced: our ranks are gone; come back under a new lease once etcd answers
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
          return (*over)->code;
        }
      }
      fenced_ = false;
    }
    TENAX_ASSIGN_OR_RETURN(std::optional<rdzv::StopRecord> stop, ReadStop());
    if (stop) {
      // The report is node 0's of the newest plan (a former node 0 must not overwrite it).
      Result<int64_t> newest = CurrentGeneration();
      Result<std::optional<KeyValue>> plan = newest.ok()
                                                 ? etcd_->Get(keys_.plan(*newest))
                                                 : Result<std::optional<KeyValue>>(newest.status());
      if (plan.ok() && *plan) {
        Result<rdzv::Plan> p = rdzv::Plan::FromJson((**plan).value);
        if (p.ok() && p->NodeRankOf(info_.id) == 0) WriteGoodput(true, stop->code);
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = g;
      node_rank_ = node_rank;
      plan_nodes_ = plan->nodes;
      running_plan_ = *plan;
      beats_.clear();
      straggler_stop_.reset();
      moved_ = false;
      active_ = std::set<std::string>(plan->nodes.begin(), plan->nodes.end());
      lost_.clear();
    }
    auto still_current = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return !moved_ && !stopped_ && !lease_lost_ && lost_.empty();
    };
    if (node_rank < 0) {
      log::Info("launch: generation {}: this node is a spare (active: {})", g,
                fmt::join(plan->nodes, ", "));
      // A spare watches: a lost active node ends the generation too (someone must say so), and
      // the job may end while it waits.
      bool finished = false;
      WaitUntil(
          [&] {
            Result<RangeResponse> d = etcd_->GetPrefix(keys_.dones(g));
            finished = d.ok() && static_cast<int>(d->kvs.size()) >= o_.nnodes;
            return finished || !still_current();
          },
          1e9);
      if (finished) {
        log::Info("launch: job {} finished on every node", a_.job_id);
        return 0;
      }
      std::set<std::string> gone;
      {
        std::lock_guard<std::mutex> lock(mu_);
        gone = lost_;
        running_ = -1;
      }
      if (!gone.empty()) TENAX_RETURN_IF_ERROR(RecordLost(g, *plan, gone));
      continue;
    }
    // Rank 0's store lives on node 0: its agent publishes a free port there.
    std::string master;
    if (node_rank == 0) {
      master = fmt::format("{}:{}", info_.address, FreePortOn(info_.address));
      TENAX_RETURN_IF_ERROR(
          Retry([&] { return etcd_->PutIfAbsent(keys_.master(g), master); }).status());
    }
    WaitUntil(
        [&] {
          Result<std::optional<KeyValue>> m = etcd_->Get(keys_.master(g));
          if (m.ok() && *m) master = (**m).value;
          return (m.ok() && *m) || !still_current();
        },
        120);
    if (!still_current() || master.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = -1;
      continue;
    }
    if (Status st = PrepareCheckpoints(g); !st.ok()) {
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
      std::lock_guard<std::mutex> lock(mu_);
      running_ = -1;
      continue;
    }
    GenerationPlan gp;
    gp.generation = static_cast<int>(g);
    gp.node_rank = node_rank;
    gp.nnodes = o_.nnodes;
    gp.master_addr = master.substr(0, master.rfind(':'));
    gp.master_port = std::atoi(master.substr(master.rfind(':') + 1).c_str());
    if (!progress_.joinable()) progress_ = std::thread([this] { ProgressLoop(); });
    Supervisor::Outcome out = supervisor_->RunGeneration(gp, [&]() -> std::optional<std::string> {
      std::lock_guard<std::mutex> lock(mu_);
      beats_ = supervisor_->beats();  // for ProgressLoop
      if (straggler_stop_) return straggler_stop_;
      if (lease_lost_) return std::string("this node lost its etcd lease (fenced)");
      if (stopped_) return std::string("the job stopped");
      if (moved_) return std::string("the generation moved on (another node failed)");
      if (!lost_.empty()) return fmt::format("node(s) lost: {}", fmt::join(lost_, ", "));
      return std::nullopt;
    });
    std::set<std::string> gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone = lost_;
      lost_.clear();
      running_ = -1;
      if (lease_lost_) {
        fenced_ = true;
        fenced_at_ = WallNow();
      }
    }
    supervisor_->Prewarm();  // the next generation's processes start up during the rendezvous
    PublishReport(g, node_rank, out);
    if (out.interrupted) {
      TENAX_RETURN_IF_ERROR(Stop(out.exit_code, "a node agent was told to stop (SIGINT/SIGTERM)"));
      continue;
    }
    if (!gone.empty()) {
      TENAX_RETURN_IF_ERROR(RecordLost(g, *plan, gone));
      continue;
    }
    if (out.verdict) {
      const Verdict& v = *out.verdict;
      const rdzv::FailureReport f = ReportOf(v, node_rank);
      TENAX_RETURN_IF_ERROR(Retry([&] {
                              return etcd_->Put(keys_.failure(g, info_.id), f.ToJson().dump());
                            }).status());
      TENAX_RETURN_IF_ERROR(Advance(g, v.code, fmt::format("node {}: {}", node_rank, v.cause)));
      continue;
    }
    if (out.superseded) continue;
    // Every local rank finished: done here; the job is done when every node is.
    TENAX_RETURN_IF_ERROR(
        Retry([&] { return etcd_->Put(keys_.done(g, node_rank), info_.id); }).status());
    bool all_done = false;
    WaitUntil(
        [&] {
          Result<RangeResponse> d = etcd_->GetPrefix(keys_.dones(g));
          all_done = d.ok() && static_cast<int>(d->kvs.size()) >= o_.nnodes;
          Result<int64_t> now = CurrentGeneration();
          std::lock_guard<std::mutex> lock(mu_);
          return all_done || (now.ok() && *now != g) || stopped_;
        },
        1e9);
    if (all_done) {
      // The job is over: a launch with this job id again only reports it (stop code 0).
      (void)etcd_->PutIfAbsent(keys_.stop(), rdzv::StopRecord{0, "finished"}.ToJson().dump());
      if (node_rank == 0) WriteGoodput(true, 0);
      log::Info("launch: job {} finished on every node", a_.job_id);
      return 0;
    }
  }
}

}  // namespace

Result<int> RunNodeAgent(const LaunchOptions& options, JobInfo job, AgentOptions agent,
                         std::string host, std::string exe) {
  if (!EtcdClientAvailable()) {
    return InvalidArgument(
        "--rdzv etcd://... needs the etcd client, which this build lacks "
        "(install libcpp-httplib-dev and rebuild)");
  }
  NodeAgent a(options, std::move(job), std::move(agent), std::move(host), std::move(exe));
  return a.Run();
}

}  // namespace tenax::launch
