#include "tenax/launch/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

extern char** environ;

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/net.h"
#include "tenax/protocol/exit_report.h"
#include "tenax/protocol/flight_analysis.h"
#include "tenax/protocol/heartbeat.h"
#include "tenax/protocol/rank_context.h"
#include "tenax/report/html_report.h"
#include "tenax/report/run_data.h"

namespace tenax::launch {
namespace {

using protocol::ExitCode;
using protocol::FailureKind;
using protocol::ToInt;

// After the first failed rank, how long to keep collecting evidence before deciding: its peers
// die within milliseconds of it (their collectives lose the partner), and their exit reports
// and deaths are what tells them apart from the cause.
constexpr double kWindowS = 0.25;
// When every failure so far is secondary, the cause has not ended yet (or never will: a cut
// network); wait this long for it before deciding without it.
constexpr double kSecondaryWindowS = 2.0;
constexpr double kBeatCheckS = 0.25;  // heartbeat polling period

std::string HostName() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? host : "?";
}

}  // namespace

Supervisor::Supervisor(const LaunchOptions& o, JobInfo job, std::string host, int fixed_port,
                       std::string exe, std::unique_ptr<ChildWatcher> watcher)
    : o_(o),
      job_(std::move(job)),
      host_(std::move(host)),
      fixed_port_(fixed_port),
      exe_(std::move(exe)),
      t0_mono_(protocol::MonotonicNow()),
      t0_wall_(protocol::WallNow()),
      watcher_(std::move(watcher)),
      goodput_(t0_wall_, &job_.previous_goodput, HostName(), static_cast<int>(::getpid())),
      stragglers_(o.nproc_per_node, o.straggler_factor, o.straggler_steps),
      restarts_(*RestartPolicy::FromOptions(o)) {  // checked by ValidateLaunchOptions
  for (const protocol::Fault& f : job_.faults) {
    if (f.kind == protocol::FaultKind::kPoisson) {
      schedule_ = std::make_unique<FaultSchedule>(f, o.nproc_per_node);
    }
  }
}

Supervisor::~Supervisor() {
  slots_.reset();  // kills and reaps the processes still running
  for (int fd : liveness_) {
    if (fd >= 0) ::close(fd);
  }
  // hb_folder_ and ram_folder_ are removed after this, once the processes are gone.
}

double Supervisor::Elapsed() const { return protocol::MonotonicNow() - t0_mono_; }

Result<pid_t> Supervisor::Spawn(int slot, int read_fd) {
  // Everything the child needs is prepared here: after fork only async-signal-safe calls are
  // allowed (the metrics thread may hold the allocator's lock). Descriptors the child keeps are
  // duplicates without close-on-exec, closed here after the fork.
  std::vector<int> inherited;
  auto inherit = [&](int fd) -> Result<int> {
    const int dup = ::dup(fd);
    if (dup < 0) return IoError(std::string("dup: ") + std::strerror(errno));
    inherited.push_back(dup);
    return dup;
  };
  auto close_inherited = [&] {
    for (int fd : inherited) ::close(fd);
  };
  protocol::StandbySetup setup;
  setup.slot = slot;
  setup.launcher_pid = static_cast<int>(::getpid());
  setup.launch_time_unix = t0_wall_;
  setup.heartbeat_dir = hb_dir_;
  setup.inject = o_.inject;
  setup.agent_socket = agent_socket_;
  setup.live_store = live_store_;
  setup.job_secret = job_secret_;
  if (ram_folder_) setup.ram_folder = ram_folder_->path();
  Result<int> standby = inherit(read_fd);
  Result<int> liveness = standby.ok() ? inherit(liveness_[0]) : standby;
  Result<int> lock = Result<int>(-1);
  if (liveness.ok() && job_.run_lock != nullptr) {
    lock = job_.run_lock->InheritableFd();
    if (lock.ok()) inherited.push_back(*lock);
  }
  if (!standby.ok() || !liveness.ok() || !lock.ok()) {
    close_inherited();
    return !standby.ok() ? standby.status() : !liveness.ok() ? liveness.status() : lock.status();
  }
  setup.standby_fd = *standby;
  setup.launcher_fd = *liveness;
  setup.run_lock_fd = *lock;
  std::vector<std::string> env = protocol::StandbyEnvironment(setup);
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o_.nproc_per_node));
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    const bool ours = std::any_of(env.begin(), env.end(), [&](const std::string& x) {
      return x.compare(0, key.size() + 1, key + "=") == 0;
    });
    if (!ours) env.push_back(kv);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> argv{const_cast<char*>(exe_.c_str())};
  for (const auto& a : o_.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Dies with the launcher, even if the launcher dies between fork and this line.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(ToInt(ExitCode::kLauncherLost));
    ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; a rank should not
    ::execve(exe_.c_str(), argv.data(), envp.data());
    static const char msg[] = "tenax launch: exec of the tenax binary failed\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  close_inherited();
  if (pid < 0) return Internal(std::string("fork failed: ") + std::strerror(errno));
  TENAX_RETURN_IF_ERROR(watcher_->Watch(pid));
  return pid;
}

int Supervisor::AnalyzeHang() {
  if (hb_dir_.empty()) return -1;
  const int n = o_.nproc_per_node;
  std::error_code ec;
  for (int i = 0; i < n; ++i) {
    std::filesystem::remove(protocol::FlightRecordPath(hb_dir_, Rank(i)), ec);  // stale dumps
  }
  slots_->SignalRanks(SIGUSR1);
  // Each rank's watchdog thread dumps at once, even when the training thread is stuck; a rank
  // that is stopped or too stuck to dump is named by its absence.
  const double deadline = Elapsed() + o_.flight_dump_s;
  for (;;) {
    int have = 0;
    for (int i = 0; i < n; ++i) {
      have += std::filesystem::exists(protocol::FlightRecordPath(hb_dir_, Rank(i))) ? 1 : 0;
    }
    if (have == n || Elapsed() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Indexed by global rank; other nodes' ranks are absent here. On several nodes only a rank of
  // this node may be named: when this node's ranks all wait inside a collective, the rank they
  // wait for is elsewhere, and this node's report is secondary (the node agent says so).
  std::vector<nlohmann::json> dumps(static_cast<size_t>(n * nnodes_));
  for (int i = 0; i < n; ++i) {
    auto text = LocalFs().ReadFile(protocol::FlightRecordPath(hb_dir_, Rank(i)));
    nlohmann::json j;
    if (text.ok()) j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    dumps[static_cast<size_t>(Rank(i))] = j.is_discarded() ? nlohmann::json() : j;
  }
  const protocol::FlightAnalysis a = protocol::AnalyzeFlightRecords(dumps);
  log::Error("launch: flight records: {}", a.Summary());
  std::vector<int> here;
  for (int r : a.waited_on) {
    if (r >= Rank(0) && r <= Rank(n - 1)) here.push_back(r - Rank(0));
  }
  if (nnodes_ == 1) return a.waited_on.size() == 1 ? a.waited_on[0] : -1;
  return here.size() == 1 ? here[0] : -1;
}

RankEnd Supervisor::Evidence(int gen, int local, pid_t pid, const ChildEnd& end) {
  RankEnd e;
  e.rank = Rank(local);
  e.code = end.code;
  e.mono_s = end.mono_s;
  auto report = protocol::ReadExitReport(hb_dir_, e.rank);
  if (report && report->generation == gen && report->pid == pid) e.report = report;
  auto beat = protocol::ReadHeartbeat(hb_dir_, e.rank);
  if (beat && beat->generation == gen && beat->pid == pid) {
    e.phase = beat->phase;
    e.writing_checkpoint = beat->writing_checkpoint >= 0;
    e.host = beat->host;
  }
  return e;
}

std::optional<protocol::Beat> Supervisor::CurrentBeat(int gen, int local) const {
  auto beat = protocol::ReadHeartbeat(hb_dir_, Rank(local));
  if (!beat || beat->generation != gen || beat->pid != g_.pids[local]) return std::nullopt;
  return beat;
}

bool Supervisor::CheckBeats(int gen, Outcome* out) {
  const int n = o_.nproc_per_node;
  for (int i = 0; i < n; ++i) {
    auto beat = CurrentBeat(gen, i);
    if (!beat) continue;
    g_.beats[i] = *beat;
    if (i == 0) ever_ready_ = true;  // any beat of this generation's process: ready or later
    if (beat->phase == protocol::Phase::kFinish) {
      MarkDone(i);
      g_.finished[i] = true;
    }
    if (local_stragglers_) stragglers_.Add(i, beat->recent);
    if (i == 0 && !job_.live) goodput_.LeadBeat(*beat, Elapsed(), protocol::WallNow());
    if (beat->step == g_.last_step[i]) {
      if (beat->work != g_.last_work[i]) {  // evaluating: progress, but not a step's interval
        g_.last_work[i] = beat->work;
        g_.last_progress = Elapsed();
      }
      continue;
    }
    g_.last_work[i] = beat->work;
    if (i == 0 && g_.last_step[0] >= 0) g_.intervals.push_back(Elapsed() - g_.last_progress);
    // A step finished in this process: seen as a change of step, or as a step beyond the one it
    // resumed from (a fast run may finish its first steps between two polls).
    g_.any_step_done = g_.any_step_done || g_.last_step[i] >= 0 ||
                       (beat->phase != protocol::Phase::kReady && beat->step > beat->resume_step);
    g_.last_step[i] = beat->step;
    g_.last_progress = Elapsed();
  }
  if (job_.live) LiveGoodputBeat(gen);
  for (const Straggler& s : stragglers_.Evaluate()) {
    ++straggler_count_;
    const int slot = slots_->SlotOf(s.local);
    log::Warn(
        "launch: straggler: rank {} on {} (slot {}) computed {:.3f}s per step against a "
        "median of {:.3f}s for {} steps in a row (step {})",
        Rank(s.local), g_.beats[s.local].host, slot, s.compute_s, s.median_s, o_.straggler_steps,
        s.step);
    goodput_.AddStraggler({{"time_s", Elapsed()},
                           {"generation", gen},
                           {"rank", Rank(s.local)},
                           {"slot", slot},
                           {"host", g_.beats[s.local].host},
                           {"step", s.step},
                           {"compute_s", s.compute_s},
                           {"median_s", s.median_s}});
    if (o_.replace_stragglers) {
      Verdict v;
      v.rank = Rank(s.local);
      v.code = ToInt(ExitCode::kStraggler);
      v.kind = FailureKind::kStraggler;
      v.cause = fmt::format("rank {} straggles ({:.3f}s vs median {:.3f}s)", Rank(s.local),
                            s.compute_s, s.median_s);
      v.host = g_.beats[s.local].host;
      v.mono_s = protocol::MonotonicNow();
      out->verdict = v;
      out->exit_code = v.code;
      out->detected_s = Elapsed();
      out->detection_s = 0;
      return true;
    }
  }
  // Every rank's work is done: what is left is their teardown, judged by ExitOverdue, not here.
  if (AllFinished()) return false;
  double timeout = o_.startup_timeout_s;
  if (g_.any_step_done && g_.intervals.empty()) {
    timeout = o_.hang_timeout_s;  // training, though no step interval was seen yet
  } else if (g_.any_step_done) {
    std::vector<double> sorted = g_.intervals;
    std::sort(sorted.begin(), sorted.end());
    timeout = std::max(o_.hang_timeout_s, o_.hang_factor * sorted[sorted.size() / 2]);
  }
  const double quiet = Elapsed() - g_.last_progress;
  if (quiet <= timeout) return false;
  std::string steps;
  for (int i = 0; i < n; ++i) {
    steps += fmt::format("{}rank {} at step {}", i ? ", " : "", Rank(i), g_.last_step[i]);
  }
  log::Error("launch: hang: no rank finished a step for {:.1f}s (timeout {:.1f}s); {}", quiet,
             timeout, steps);
  Verdict v;
  v.code = ToInt(ExitCode::kHang);
  v.kind = FailureKind::kHang;
  v.cause = fmt::format("hang: no progress for {:.1f}s", quiet);
  // The only rank at the lowest step, or the only one not finished (attribution.h).
  std::vector<bool> done(n);
  std::vector<int64_t> suspect_steps = g_.last_step;
  for (int i = 0; i < n; ++i) done[i] = Done(i);
  if (job_.live) LiveHangSuspects(&suspect_steps, &done);
  int culprit = HangSuspect(suspect_steps, done);
  // Flight records say more: every rank dumps its last collectives, and the analysis names the
  // rank(s) the others wait for (docs/flight_recorder.md).
  g_.hang_silent.clear();
  if (const int waited = AnalyzeHang(); waited >= 0) {
    culprit = waited;
    v.cause += fmt::format("; flight records: the others wait for rank {}", Rank(waited));
  } else if (const std::vector<int> silent = job_.live ? LiveSilentRanks() : std::vector<int>{};
             !silent.empty()) {
    culprit = silent.front();
    std::set<int> replicas;
    for (int i : silent) {
      g_.hang_silent.push_back(Rank(i));
      replicas.insert(ReplicaOf(Rank(i)));
    }
    if (silent.size() == 1) {
      v.cause += fmt::format("; rank {} alone left no flight record", Rank(culprit));
    } else if (replicas.size() == 1) {
      v.cause += fmt::format("; ranks {} alone left no flight record, all of replica {}",
                             fmt::join(g_.hang_silent, ","), *replicas.begin());
    } else {
      v.cause += fmt::format("; ranks {} alone left no flight record, of replicas {}",
                             fmt::join(g_.hang_silent, ","), fmt::join(replicas, ","));
    }
  }
  if (culprit >= 0) {
    v.rank = Rank(culprit);
    v.host = g_.beats[culprit].host;
  }
  v.mono_s = t0_mono_ + g_.last_progress;  // the evidence: progress stopped then
  if (culprit < 0 && LiveAwaitRemoteHang()) return false;
  if (culprit < 0 && nnodes_ > 1 && remote_hang_) {
    // The rank this node's ranks wait for is elsewhere: its node names it once its own check
    // fires (about when ours did: progress stopped everywhere at once) and its ranks dumped.
    remote_hang_(v, std::min(timeout, 30.0) + o_.flight_dump_s + 2);
  }
  out->verdict = v;
  out->exit_code = v.code;
  out->detected_s = Elapsed();
  // From the last progress to the verdict, the flight records' collection included: until then
  // nothing was done about the failure.
  out->detection_s = out->detected_s - g_.last_progress;
  return true;
}

void Supervisor::MarkDone(int local) {
  if (!Done(local)) g_.done_at[local] = Elapsed();
}

bool Supervisor::AllFinished() const {
  for (int i = 0; i < o_.nproc_per_node; ++i) {
    if (!Done(i)) return false;
  }
  return true;
}

bool Supervisor::Finished(int gen, int local) {
  if (g_.finished[local]) return true;
  auto beat = CurrentBeat(gen, local);
  if (!beat || beat->phase != protocol::Phase::kFinish) return false;
  g_.beats[local] = *beat;
  MarkDone(local);
  g_.finished[local] = true;
  return true;
}

void Supervisor::AddExitFault(int gen, int local, const std::string& kind,
                              const std::string& detail) {
  const int slot = slots_->SlotOf(local);
  const double now = Elapsed();
  nlohmann::json f = {{"time_s", now},
                      {"generation", gen},
                      {"rank", Rank(local)},
                      {"slot", slot},
                      {"host", g_.beats[local].host.empty() ? host_ : g_.beats[local].host},
                      {"step", g_.beats[local].step},
                      {"kind", kind},
                      {"detail", detail}};
  goodput_.AddExitFault(f);
  f["time_unix"] = t0_wall_ + now;
  g_.exit_faults.push_back(std::move(f));
}

bool Supervisor::ExitOverdue(int gen) {
  if (!AllFinished()) return false;
  // The deadline runs from the moment the last rank finished (or exited).
  const double waited = Elapsed() - *std::max_element(g_.done_at.begin(), g_.done_at.end());
  if (waited <= o_.exit_timeout_s) return false;
  std::vector<int> stuck;
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    if (g_.exited[local]) continue;
    stuck.push_back(Rank(local));
    AddExitFault(gen, local, "hang",
                 fmt::format("did not exit {:.1f}s after finishing (--exit-timeout {:g}); killed",
                             waited, o_.exit_timeout_s));
  }
  log::Warn(
      "launch: rank(s) {} finished training (step {}, checkpoints committed) but did not exit "
      "within --exit-timeout {:g}s: stuck in their teardown; killing them. The run is complete; "
      "recorded in goodput.json exit_faults",
      fmt::join(stuck, ", "), g_.beats.front().step, o_.exit_timeout_s);
  return true;
}

Supervisor::Generation::Generation(int ranks)
    : beats(ranks),
      pids(ranks, -1),
      last_step(ranks, -1),
      last_work(ranks, 0),
      finished(ranks, false),
      exited(ranks, false),
      done_at(ranks, 0.0) {
  for (protocol::Beat& b : beats) b.phase = protocol::Phase::kSetup;  // no beat yet
}

Supervisor::Outcome Supervisor::RunGeneration(const GenerationPlan& plan, const StopFn& stop) {
  Outcome out;
  const int gen = plan.generation;
  node_rank_ = plan.node_rank;
  nnodes_ = plan.nnodes;
  const int n = o_.nproc_per_node;
  goodput_.GenerationStarted(gen, Elapsed());
  stragglers_.Reset();
  g_ = Generation(n);
  for (int local = 0; local < n; ++local) {
    std::error_code ec;
    std::filesystem::remove(protocol::HeartbeatPath(hb_dir_, Rank(local)), ec);
    std::filesystem::remove(protocol::ExitReportPath(hb_dir_, Rank(local)), ec);
    std::filesystem::remove(protocol::NanRequestPath(hb_dir_, Rank(local)), ec);
  }
  StartRanks(plan, &out);
  // Refill the spare pool after the ranks got their processes: they must not wait for it.
  if (Status st = slots_->FillStandbys(); !st.ok()) {
    log::Warn("launch: could not start a standby process: {}", st.message());
  }

  std::vector<RankEnd> failed;  // evidence: ranks that failed while the generation ran
  g_.last_progress = g_.last_check = Elapsed();
  while (slots_->RanksAlive() > 0) {
    double timeout = g_.stopping ? g_.kill_at - Elapsed() : g_.last_check + kBeatCheckS - Elapsed();
    if (!failed.empty() && !out.verdict) timeout = std::min(timeout, 0.01);
    if (schedule_) timeout = std::min(timeout, schedule_->SecondsUntilDue(Elapsed()));
    const std::vector<ChildEnd> ends = watcher_->Wait(std::clamp(timeout, 0.0, 1.0));
    if (const int sig = watcher_->signal(); sig != 0 && !out.interrupted) {
      log::Info("launch: received signal {}, stopping all ranks", sig);
      out.exit_code = 128 + sig;
      out.interrupted = true;
      BeginStop(sig, o_.kill_grace_s);
    }
    if (!out.superseded && stop) {
      if (std::optional<std::string> why = stop()) {
        // Another node decided, or this node lost its lease: the ranks must stop now (a fenced
        // node's ranks must not go on after its lease time), so no grace period.
        log::Info("launch: stopping generation {} on this node: {}", gen, *why);
        out.superseded = why;
        BeginStop(SIGKILL, 0);
      }
    }
    Reap(gen, ends, &failed);
    if (!failed.empty() && !out.verdict) {
      // Decide once the window after the first failure has passed, or nobody is left to fail.
      bool any_primary = false;
      for (const RankEnd& e : failed) any_primary = any_primary || !IsSecondary(e);
      const double first = failed.front().mono_s - t0_mono_;
      const double window = any_primary ? kWindowS : kSecondaryWindowS;
      if (Elapsed() >= first + window || slots_->RanksAlive() == 0) {
        Decide(gen, failed, &out);
        if (job_.live && !out.interrupted && LiveRecover(gen, failed, *out.verdict)) {
          out.verdict.reset();  // the others train on: no verdict ends this generation
          out.exit_code = 0;
          failed.clear();
        } else {
          if (auto h = g_.hung.find(out.verdict->rank); job_.live && h != g_.hung.end()) {
            // Killed for a hang that live recovery could not take (nobody left holds the
            // state): the hang is the failure, not the kill.
            out.verdict = h->second;
            out.exit_code = h->second.code;
            out.detection_s = out.detected_s - (h->second.mono_s - t0_mono_);
            g_.hung.erase(h);
          }
          log::Error("launch: {} ({}; {}); stopping the other {} rank(s) on this node",
                     out.verdict->cause, protocol::FailureKindName(out.verdict->kind),
                     out.verdict->reasoning, slots_->RanksAlive());
          BeginStop(SIGTERM, o_.kill_grace_s);
        }
      }
    }
    if (job_.live && !g_.stopping) LiveTick(gen);
    if (!g_.stopping && failed.empty() && Elapsed() - g_.last_check >= kBeatCheckS) {
      g_.last_check = Elapsed();
      if (CheckBeats(gen, &out)) {
        // A hang: the ranks are stuck, SIGTERM would wait for nothing. A straggler: stop it.
        if (out.verdict->kind == FailureKind::kHang && job_.live && LiveKillHung(*out.verdict)) {
          out.verdict.reset();  // the others train on once it is gone (supervisor_live.cc)
          out.exit_code = 0;
        } else if (out.verdict->kind == FailureKind::kHang) {
          log::Error("launch: killing every rank of generation {}", gen);
          BeginStop(SIGKILL, 0);
        } else {
          BeginStop(SIGTERM, o_.kill_grace_s);
        }
      }
      if (!g_.stopping && ExitOverdue(gen)) BeginStop(SIGKILL, 0);
      Publish(gen, false);
    }
    if (g_.stopping && Elapsed() >= g_.kill_at) {
      slots_->SignalRanks(SIGKILL);
      g_.kill_at = 1e300;
    }
    if (schedule_ && !out.interrupted) ScheduleTick(gen);
  }
  if (!failed.empty() && !out.verdict) {  // every rank failed within the window
    Decide(gen, failed, &out);
    log::Error("launch: {} ({}; {})", out.verdict->cause,
               protocol::FailureKindName(out.verdict->kind), out.verdict->reasoning);
  }
  // The last beats (the final step, a checkpoint) may have come after the last check.
  for (int i = 0; i < n; ++i) {
    auto beat = CurrentBeat(gen, i);
    if (!beat) continue;
    g_.beats[i] = *beat;
    if (i == 0 && !job_.live) goodput_.LeadBeat(*beat, Elapsed(), protocol::WallNow());
  }
  if (job_.live) {
    LiveGoodputBeat(gen);
    LiveEnd(gen, &out);
  }
  goodput_.GenerationEnded(Elapsed(), out.exit_code);
  if (schedule_) {
    if (out.verdict && out.scheduled < 0) out.scheduled = schedule_->awaiting();
    // The clock stood from the injection to the verdict; a generation that ended without one
    // (it finished, or was interrupted) frees it too.
    schedule_->Tick(Elapsed(),
                    !out.interrupted && ever_ready_ && goodput_.step() < job_.total_steps);
    schedule_->Resolved(out.verdict ? out.detected_s : Elapsed());
  }
  return out;
}

protocol::Assignment Supervisor::AssignmentOf(int gen, int local) const {
  protocol::Assignment a;
  a.rank = Rank(local);
  a.world = o_.nproc_per_node * nnodes_;
  a.local_rank = local;
  a.local_world = o_.nproc_per_node;
  a.master_addr = g_.master_addr;
  a.master_port = g_.master_port;
  a.generation = gen;
  a.run_elapsed_s = Elapsed();
  return a;
}

void Supervisor::StartRanks(const GenerationPlan& plan, Outcome* out) {
  const int n = o_.nproc_per_node;
  const int world = n * plan.nnodes;
  // A fresh store port each generation: the old one may linger in TIME_WAIT.
  const int port = plan.master_port > 0 ? plan.master_port : FreeTcpPort();
  const std::string master = plan.master_addr.empty() ? host_ : plan.master_addr;
  g_.master_addr = master;
  g_.master_port = port;
  if (job_.live) LiveStart(plan.generation);
  const int incarnation = plan.live_vacancy ? LiveVacancyIncarnation(plan) : 0;
  for (int local = 0; local < n; ++local) {
    protocol::Assignment a = AssignmentOf(plan.generation, local);
    a.live_incarnation = incarnation;
    Result<pid_t> pid = slots_->Assign(local, protocol::AssignmentLine(a));
    if (!pid.ok()) {
      log::Error("launch: {}", pid.status().message());
      Verdict v;
      v.rank = Rank(local);
      v.code = ToInt(ExitCode::kFailure);
      v.kind = FailureKind::kSetup;
      v.cause = pid.status().message();
      out->verdict = v;
      out->exit_code = v.code;
      out->detected_s = Elapsed();
      BeginStop(SIGKILL, 0);
      break;
    }
    g_.pids[local] = *pid;
    if (plan.live_vacancy) LiveFillVacancy(plan, local, *pid);
  }
  std::string where;
  for (int local = 0; local < n; ++local) {
    where += fmt::format("{}{}@slot{}", local ? " " : "", Rank(local), slots_->SlotOf(local));
  }
  log::Info("launch: generation {}: started ranks {}..{} of {} (store {}:{}; rank@slot: {})",
            plan.generation, Rank(0), Rank(n - 1), world, master, port, where);
}

void Supervisor::Reap(int gen, const std::vector<ChildEnd>& ends, std::vector<RankEnd>* failed) {
  for (const ChildEnd& e : ends) {
    const SlotTable::ReapedProcess r = slots_->Reaped(e.pid);
    if (r.slot < 0) continue;
    if (r.local < 0) {
      log::Warn("launch: the standby process {} in slot {} {} before it was needed", e.pid, r.slot,
                protocol::DescribeExitCode(e.code));
      continue;
    }
    if (g_.stopping) continue;  // stopped by us: not evidence
    if (std::find(g_.cancelled.begin(), g_.cancelled.end(), e.pid) != g_.cancelled.end()) {
      MarkDone(r.local);  // a replacement the run no longer needed (supervisor_live.cc)
      g_.exited[r.local] = true;
      continue;
    }
    if (e.code != 0 && Finished(gen, r.local)) {
      // Its work was done and durable: a crash in the teardown costs nothing to redo.
      log::Warn(
          "launch: rank {} {} after it finished training (step {}); the run is not affected "
          "(recorded in goodput.json exit_faults)",
          Rank(r.local), protocol::DescribeExitCode(e.code), g_.beats[r.local].step);
      AddExitFault(gen, r.local, "crash", protocol::DescribeExitCode(e.code) + " after finishing");
    } else if (e.code != 0) {
      failed->push_back(Evidence(gen, r.local, e.pid, e));
      continue;
    }
    MarkDone(r.local);
    g_.exited[r.local] = true;
  }
}

void Supervisor::Decide(int gen, const std::vector<RankEnd>& failed, Outcome* out) {
  out->verdict = AttributeFailure(failed);
  if (out->verdict->rank < 0) NameSdcRankFromRecords(gen, &*out->verdict);
  out->exit_code = out->verdict->code;
  out->detected_s = Elapsed();
  out->detection_s = out->detected_s - (out->verdict->mono_s - t0_mono_);
}

void Supervisor::BeginStop(int sig, double grace_s) {
  g_.stopping = true;
  slots_->SignalRanks(sig);
  slots_->SignalRanks(SIGCONT);  // a stopped rank must see the signal (SIGKILL needs none)
  g_.kill_at = sig == SIGKILL ? 1e300 : Elapsed() + grace_s;
}

Status Supervisor::Start() {
  if (slots_) return Status::Ok();
  // Folders of this launcher's own (core/owned_folder.h): <prefix><name>-<pid>-<random>, removed
  // when it ends; a killed launcher's are removed by the next launcher that starts on the host.
  std::random_device random;
  auto claim = [&](const std::string& parent, const std::string& prefix, const std::string& name) {
    return OwnedFolder::Claim(parent, prefix,
                              fmt::format("{}{}{}-{:08x}", prefix, name, ::getpid(), random()));
  };
  Result<OwnedFolder> hb = claim("/tmp", "tenax-heartbeat-", "");
  if (!hb.ok()) {
    return IoError(
        fmt::format("cannot create a heartbeat folder in /tmp: {}", hb.status().message()));
  }
  hb_folder_ = std::move(*hb);
  hb_dir_ = hb_folder_->path();
  if (job_.memory_replicas) {
    const std::string run = job_.run_dir.empty()
                                ? std::string()
                                : std::filesystem::path(job_.run_dir).filename().string() + "-";
    Result<OwnedFolder> ram = claim("/dev/shm", "tenax-ram-", run);
    if (!ram.ok()) {
      return IoError(fmt::format(
          "checkpoint.memory_replicas: cannot create the ranks' RAM folder in /dev/shm: {}; "
          "make /dev/shm a writable tmpfs or set checkpoint.memory_replicas = false",
          ram.status().message()));
    }
    ram_folder_ = std::move(*ram);
    log::Info(
        "launch: memory replicas in {}{}", ram_folder_->path(),
        ram_folder_->swept() > 0
            ? fmt::format(" (removed {} RAM folder(s) of killed launchers)", ram_folder_->swept())
            : std::string());
  }
  if (::pipe2(liveness_, O_CLOEXEC) != 0) {
    return Internal(std::string("pipe2: ") + std::strerror(errno));
  }
  TENAX_ASSIGN_OR_RETURN(monitor_,
                         Monitor::Start(o_.status_file, o_.metrics_addr, o_.metrics_port));
  QuarantinePolicy policy{o_.quarantine_after, o_.quarantine_window_s};
  slots_ = std::make_unique<SlotTable>(
      o_.nproc_per_node, o_.spares, policy, [this](int slot, int fd) { return Spawn(slot, fd); },
      [this] { return Elapsed(); });
  return Status::Ok();
}

void Supervisor::Prewarm() {
  if (!slots_) return;
  if (Status st = slots_->FillStandbys(); !st.ok()) {
    log::Warn("launch: could not start a standby process: {}", st.message());
  }
}

Result<int> Supervisor::Run() {
  TENAX_RETURN_IF_ERROR(Start());
  if (goodput_.segment() > 0) {
    log::Info("launch: launch {} of this run (earlier launches are in {})", goodput_.segment() + 1,
              job_.goodput_path);
  }
  int result = 0;
  for (int gen = 0;; ++gen) {
    GenerationPlan plan;
    plan.generation = gen;
    plan.node_rank = o_.node_rank;
    plan.nnodes = o_.nnodes;
    plan.master_addr = host_;
    plan.master_port = fixed_port_;
    Outcome g = RunGeneration(plan, nullptr);
    result = g.exit_code;
    if (g.exit_code == 0 || g.interrupted) break;
    const Verdict& v = *g.verdict;
    const int local = v.rank >= 0 ? v.rank - o_.node_rank * o_.nproc_per_node : -1;
    FailureRecord f;
    f.time_s = g.detected_s;
    f.generation = gen;
    f.rank = v.rank;
    f.slot = local >= 0 && local < o_.nproc_per_node ? slots_->SlotOf(local) : -1;
    f.host = v.host;
    f.kind = protocol::FailureKindName(v.kind);
    f.cause = v.cause;
    f.exit_code = v.code;
    f.detection_s = g.detection_s;
    f.scheduled = g.scheduled;
    goodput_.AddFailure(f);
    ReadTrainerRecords();  // a detection the trainer recorded is in goodput.json at once
    WriteGoodput(false, 0);
    if (!protocol::Restartable(v.code)) {
      log::Error(
          "launch: exit code {} means the input must be fixed (docs/exit_codes.md); "
          "not restarting",
          v.code);
      break;
    }
    if (std::optional<std::string> no = restarts_.Take(gen, Elapsed())) {
      if (o_.max_restarts > 0 || !o_.max_restarts_given) {  // --max-restarts 0 asked for it
        log::Error("launch: {}; stopping with exit code {}", *no, v.code);
      }
      break;
    }
    // A slot is excluded only on evidence that its rank caused the failure.
    if (f.slot >= 0 && protocol::BlamesSlot(v.kind)) {
      const int moved = slots_->Exclude(f.slot, protocol::QuarantinesAtOnce(v.kind));
      if (moved != f.slot) goodput_.SetReplacement(moved);
    }
    // A corruption that crossed a tensor-parallel collective names every rank it reached: each
    // one's slot is quarantined, not only the one whose report came first.
    for (int rank :
         v.kind == FailureKind::kSilentCorruption ? SdcNamedRanks(gen) : std::vector<int>{}) {
      const int l = Local(rank);
      if (rank != v.rank && l >= 0 && l < o_.nproc_per_node) {
        slots_->Exclude(slots_->SlotOf(l), /*at_once=*/true);
      }
    }
    log::Info("launch: {}: all ranks start again from the newest good checkpoint",
              restarts_.Describe(gen, Elapsed()));
  }
  ReadTrainerRecords();
  // A fault that never fired is an error: the test that asked for it tested nothing.
  const std::vector<protocol::Fault> unfired =
      protocol::UnfiredFaults(job_.faults, protocol::ReadFiredFaults(hb_dir_));
  for (const protocol::Fault& f : unfired) {
    log::Error("launch: the injected fault '{}' never fired{}", f.text,
               result == 0 ? " (the run ended before it could)" : "");
  }
  if (!unfired.empty() && result == 0) result = ToInt(ExitCode::kInvalidArgument);
  const double wall = Elapsed();
  const nlohmann::json report = goodput_.Report(wall, result, true);
  log::Info("launch: {} in {:.1f}s with {} failure(s) and {} restart(s)",
            result == 0 ? "finished" : "failed", wall, goodput_.failure_count(),
            goodput_.restarts());
  log::Info("launch: {}", Goodput::Summary(report));
  Publish(goodput_.restarts(), true);
  WriteGoodput(true, result);
  if (!job_.goodput_path.empty())
    log::Info("launch: goodput report written to {}", job_.goodput_path);
  if (!job_.goodput_path.empty())
    report::WriteReportAtEnd(job_.run_dir, job_.goodput_path, "launch");
  slots_.reset();  // releases the spares
  monitor_.reset();
  if (result != 0) log::Error("launch: the job failed (exit code {})", result);
  return result;
}

}  // namespace tenax::launch
