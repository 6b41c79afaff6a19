#include "tenax/launch/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

extern char** environ;

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tenax/core/fault_injection.h"
#include "tenax/core/fs.h"
#include "tenax/core/heartbeat.h"
#include "tenax/core/log.h"
#include "tenax/core/net.h"
#include "tenax/launch/goodput.h"
#include "tenax/launch/monitor.h"
#include "tenax/launch/spares.h"
#include "tenax/launch/stragglers.h"
#include "tenax/parallel/flight_recorder.h"

namespace tenax::launch {
namespace {

volatile sig_atomic_t g_forward_signal = 0;  // set by the handler, read by the wait loop
void OnSignal(int sig) { g_forward_signal = sig; }

constexpr double kPollS = 0.02;  // the wait loop's period: the detection latency of a crash

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Exit codes after which starting again cannot help (docs/exit_codes.md).
bool Restartable(int code) { return code != 2 && code != 3 && code != 4 && code != 7; }

double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
double WallNow() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// What a failed rank was doing, from its exit code and its last beat's phase.
std::string Classify(int code, const std::string& phase, bool writing_checkpoint) {
  if (phase == "nonfinite") return "nonfinite";
  if (phase == "loss-spike") return "loss-spike";
  if (phase == "checkpoint" || (writing_checkpoint && code != 8 && code != 9)) {
    return code == 5 ? "checkpoint-write" : "crash-in-checkpoint";
  }
  if (phase == "setup") return "setup";
  if (code == 5) return "io-error";
  return "crash";
}

// Kinds that say the slot (the machine) is at fault, so its rank moves to a spare.
bool BlamesSlot(const std::string& kind) {
  return kind == "crash" || kind == "crash-in-checkpoint" || kind == "hang" ||
         kind == "straggler" || kind == "setup";
}

struct GenerationResult {
  int exit_code = 0;
  int failed_local = -1;
  std::string kind, cause, host;
  bool interrupted = false;  // the launcher itself was told to stop
  double detected_s = 0;     // launch clock
  double detection_s = 0;
};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, std::string host, int fixed_port, std::string exe)
      : o_(o), host_(std::move(host)), fixed_port_(fixed_port), exe_(std::move(exe)),
        t0_(Now()), wall0_(WallNow()),
        stragglers_(o.nproc_per_node, o.straggler_factor, o.straggler_steps) {}

  Result<int> Run();

 private:
  int Rank(int local) const { return o_.node_rank * o_.nproc_per_node + local; }
  double Elapsed() const { return Now() - t0_; }
  Result<pid_t> Spawn(int slot, int read_fd);
  GenerationResult RunGeneration(int gen);
  void Publish(int gen, bool force);
  // On a hang: every rank dumps its flight record (SIGUSR1); returns the local rank the others
  // wait for, or -1 when the records do not single one out.
  int AnalyzeHang(int n);

  const LaunchOptions& o_;
  const std::string host_;
  const int fixed_port_;
  const std::string exe_;
  const double t0_, wall0_;
  std::string hb_dir_;
  std::unique_ptr<SlotTable> slots_;
  std::unique_ptr<Monitor> monitor_;
  Goodput goodput_;
  StragglerDetector stragglers_;
  std::vector<Beat> beats_;  // newest beat per local rank, this generation
  int straggler_count_ = 0;
};

int Supervisor::AnalyzeHang(int n) {
  if (hb_dir_.empty()) return -1;
  std::error_code ec;
  for (int i = 0; i < n; ++i) {
    std::filesystem::remove(parallel::FlightRecordPath(hb_dir_, Rank(i)), ec);  // stale dumps
  }
  slots_->SignalRanks(SIGUSR1);
  // Each rank's watchdog thread dumps within its poll interval, even when the training thread
  // is stuck; give them a few seconds.
  for (int tries = 0; tries < 50; ++tries) {
    int have = 0;
    for (int i = 0; i < n; ++i) {
      have += std::filesystem::exists(parallel::FlightRecordPath(hb_dir_, Rank(i))) ? 1 : 0;
    }
    if (have == n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<nlohmann::json> dumps;
  for (int i = 0; i < n; ++i) {
    auto text = LocalFs().ReadFile(parallel::FlightRecordPath(hb_dir_, Rank(i)));
    nlohmann::json j;
    if (text.ok()) j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    dumps.push_back(j.is_discarded() ? nlohmann::json() : j);
  }
  if (o_.node_rank != 0 || o_.nnodes != 1) return -1;  // other nodes' ranks are not here
  const parallel::FlightAnalysis a = parallel::AnalyzeFlightRecords(dumps);
  log::Error("launch: flight records: {}", a.Summary());
  return a.waited_on.size() == 1 ? a.waited_on[0] : -1;
}

Result<pid_t> Supervisor::Spawn(int slot, int read_fd) {
  // Everything the child needs is prepared here: after fork only async-signal-safe calls are
  // allowed (the metrics thread may hold the allocator's lock).
  const int fd = ::dup(read_fd);  // without O_CLOEXEC: survives the exec; closed here after fork
  if (fd < 0) return IoError(std::string("dup: ") + std::strerror(errno));
  std::vector<std::string> env = {
      "TENAX_STANDBY_FD=" + std::to_string(fd), "TENAX_SLOT=" + std::to_string(slot),
      "LOCAL_WORLD_SIZE=" + std::to_string(o_.nproc_per_node),
      fmt::format("TENAX_LAUNCH_TIME={:.3f}", wall0_)};
  if (!hb_dir_.empty()) env.push_back("TENAX_HEARTBEAT_DIR=" + hb_dir_);
  if (!o_.inject.empty()) env.push_back("TENAX_INJECT=" + o_.inject);
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
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; a rank should not
    ::execve(exe_.c_str(), argv.data(), envp.data());
    static const char msg[] = "tenax launch: exec of the tenax binary failed\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::close(fd);
  if (pid < 0) return Internal(std::string("fork failed: ") + std::strerror(errno));
  return pid;
}

void Supervisor::Publish(int gen, bool force) {
  if (!monitor_) return;
  nlohmann::json ranks = nlohmann::json::array();
  int alive = 0;
  for (int local = 0; local < o_.nproc_per_node; ++local) {
    const int slot = slots_->SlotOf(local);
    const SlotProcess& p = slots_->process(slot);
    const bool up = p.pid > 0 && p.local == local;
    alive += up;
    const Beat& b = beats_[local];
    ranks.push_back({{"rank", Rank(local)}, {"slot", slot}, {"pid", up ? p.pid : -1},
                     {"alive", up}, {"step", b.step}, {"phase", b.phase}, {"host", b.host},
                     {"tokens_per_s", b.tokens_per_s}});
  }
  const double wall = Elapsed();
  nlohmann::json status = {{"time_s", wall},
                           {"generation", gen},
                           {"ranks_alive", alive},
                           {"ranks", ranks},
                           {"step", goodput_.step()},
                           {"tokens_per_s", goodput_.tokens_per_s()},
                           {"restarts", goodput_.restarts()},
                           {"failures", goodput_.failure_count()},
                           {"spares_ready", slots_->ReadySpares()},
                           {"quarantined_slots", slots_->QuarantinedSlots()},
                           {"stragglers", straggler_count_},
                           {"goodput", goodput_.Report(wall, 0)}};
  monitor_->Update(status, force);
}

GenerationResult Supervisor::RunGeneration(int gen) {
  GenerationResult g;
  const int n = o_.nproc_per_node;
  const int world = n * o_.nnodes;
  // A fresh store port each generation: the old one may linger in TIME_WAIT.
  const int port = fixed_port_ > 0 ? fixed_port_ : FreeTcpPort();
  goodput_.GenerationStarted(gen, Elapsed());
  stragglers_.Reset();
  beats_.assign(n, Beat{});
  for (int local = 0; local < n; ++local) {
    std::error_code ec;
    std::filesystem::remove(hb_dir_ + "/rank-" + std::to_string(Rank(local)), ec);
  }
  for (int local = 0; local < n; ++local) {
    Status st = slots_->Assign(
        local, fmt::format("RANK={} WORLD_SIZE={} LOCAL_RANK={} LOCAL_WORLD_SIZE={} "
                           "MASTER_ADDR={} MASTER_PORT={} TENAX_RESTART_COUNT={} "
                           "TENAX_RUN_ELAPSED_S={:.3f}",
                           Rank(local), world, local, n, host_, port, gen, Elapsed()));
    if (!st.ok()) {
      log::Error("launch: {}", st.message());
      g.exit_code = 1;
      g.failed_local = local;
      g.kind = "setup";
      g.cause = st.message();
      g.detected_s = Elapsed();
      slots_->SignalRanks(SIGKILL);
      break;
    }
  }
  std::string where;
  for (int local = 0; local < n; ++local) {
    where += fmt::format("{}{}@slot{}", local ? " " : "", Rank(local), slots_->SlotOf(local));
  }
  log::Info("launch: generation {}: started ranks {}..{} of {} (store {}:{}; rank@slot: {})", gen,
            Rank(0), Rank(n - 1), world, host_, port, where);
  // Refill the spare pool after the ranks got their processes: they must not wait for it.
  if (Status st = slots_->FillStandbys(); !st.ok()) {
    log::Warn("launch: could not start a standby process: {}", st.message());
  }

  std::vector<int64_t> last_step(n, -1);
  double last_progress = Now();  // launcher clock of the newest step change on any rank
  double last_check = 0;
  bool any_step_done = false;
  std::vector<double> intervals;  // seconds between step completions (local rank 0)
  bool stopping = g.exit_code != 0;
  auto kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3600);
  auto begin_stop = [&](int sig) {
    slots_->SignalRanks(sig);
    stopping = true;
    kill_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<int>(o_.kill_grace_s * 1000));
  };
  if (stopping) begin_stop(SIGKILL);
  while (slots_->RanksAlive() > 0) {
    if (g_forward_signal != 0 && !stopping) {
      log::Info("launch: received signal {}, stopping all ranks", int(g_forward_signal));
      g.exit_code = 128 + g_forward_signal;
      g.interrupted = true;
      begin_stop(g_forward_signal);
    }
    // Reap everything that ended since the last poll. Among several failures in one poll, the
    // root cause is likelier (1) one killed by a signal from outside (SIGKILL, SIGSEGV, ...),
    // then (2) one that exited with its own diagnosis (a tenax exit code: a failed checkpoint
    // write, a NaN, a spike), then (3) the rest: aborts (SIGABRT) and exit 1, which is how peers
    // die when a collective loses its partner.
    auto cause_rank = [](int status) {
      if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGABRT ? 3 : 1;
      const int code = WEXITSTATUS(status);
      return code >= 2 && code <= 9 ? 2 : 3;
    };
    int failed_local = -1, failed_status = 0;
    for (int status = 0;;) {
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      const SlotTable::ReapedProcess r = slots_->Reaped(pid);
      if (r.slot < 0) continue;
      if (r.local < 0) {
        log::Warn("launch: the standby process {} in slot {} {} before it was needed", pid,
                  r.slot, Describe(status));
        continue;
      }
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!failed || stopping) continue;
      if (failed_local < 0 || cause_rank(status) < cause_rank(failed_status)) {
        failed_local = r.local;
        failed_status = status;
      }
    }
    int announced = 0;  // a rank that said why it exits (Beat::exiting) is the cause
    if (failed_local >= 0) {
      for (int i = 0; i < n && announced == 0; ++i) {
        auto b = ReadHeartbeat(hb_dir_, Rank(i));
        if (b && b->generation == gen && b->exiting > 0) {
          failed_local = i;
          announced = b->exiting;
        }
      }
    }
    if (failed_local >= 0) {
      auto beat = ReadHeartbeat(hb_dir_, Rank(failed_local));  // the newest phase
      const bool current = beat && beat->generation == gen;
      g.exit_code = announced > 0 ? announced : ExitCode(failed_status);
      g.failed_local = failed_local;
      g.kind = Classify(g.exit_code, current ? beat->phase : std::string("setup"),
                        current && beat->writing_checkpoint >= 0);
      g.cause = "rank " + std::to_string(Rank(failed_local)) + " " +
                (announced > 0 ? fmt::format("exited with code {}", announced)
                               : Describe(failed_status));
      g.host = current ? beat->host : "";
      g.detected_s = Elapsed();
      g.detection_s = kPollS;
      log::Error("launch: {} ({}); stopping the other {} rank(s) on this node", g.cause, g.kind,
                 slots_->RanksAlive());
      begin_stop(SIGTERM);
    }
    if (!stopping && Now() - last_check > 0.25) {
      last_check = Now();
      for (int i = 0; i < n; ++i) {
        auto beat = ReadHeartbeat(hb_dir_, Rank(i));
        if (!beat || beat->generation != gen) continue;
        beats_[i] = *beat;
        stragglers_.Add(i, beat->recent);
        if (i == 0) goodput_.LeadBeat(*beat, Elapsed(), WallNow());
        if (beat->step == last_step[i]) continue;
        if (i == 0 && last_step[0] >= 0) intervals.push_back(Now() - last_progress);
        any_step_done = any_step_done || last_step[i] >= 0;
        last_step[i] = beat->step;
        last_progress = Now();
      }
      for (const Straggler& s : stragglers_.Evaluate()) {
        ++straggler_count_;
        const int slot = slots_->SlotOf(s.local);
        log::Warn("launch: straggler: rank {} on {} (slot {}) computed {:.3f}s per step against "
                  "a median of {:.3f}s for {} steps in a row (step {})",
                  Rank(s.local), beats_[s.local].host, slot, s.compute_s, s.median_s,
                  o_.straggler_steps, s.step);
        goodput_.AddStraggler({{"time_s", Elapsed()}, {"generation", gen},
                               {"rank", Rank(s.local)}, {"slot", slot},
                               {"host", beats_[s.local].host}, {"step", s.step},
                               {"compute_s", s.compute_s}, {"median_s", s.median_s}});
        if (o_.replace_stragglers && !stopping) {
          g.exit_code = 125;
          g.failed_local = s.local;
          g.kind = "straggler";
          g.cause = fmt::format("rank {} straggles ({:.3f}s vs median {:.3f}s)", Rank(s.local),
                                s.compute_s, s.median_s);
          g.host = beats_[s.local].host;
          g.detected_s = Elapsed();
          g.detection_s = 0;
          begin_stop(SIGTERM);
        }
      }
      double timeout = o_.startup_timeout_s;
      if (any_step_done && !intervals.empty()) {
        std::vector<double> sorted = intervals;
        std::sort(sorted.begin(), sorted.end());
        timeout = std::max(o_.hang_timeout_s, o_.hang_factor * sorted[sorted.size() / 2]);
      }
      const double quiet = Now() - last_progress;
      if (!stopping && quiet > timeout) {
        std::string steps;
        for (int i = 0; i < n; ++i) {
          steps += fmt::format("{}rank {} at step {}", i ? ", " : "", Rank(i), last_step[i]);
        }
        log::Error("launch: hang: no rank finished a step for {:.1f}s (timeout {:.1f}s); {}; "
                   "stopping all ranks",
                   quiet, timeout, steps);
        g.exit_code = 124;
        g.kind = "hang";
        g.cause = fmt::format("hang: no progress for {:.1f}s", quiet);
        g.detected_s = Elapsed();
        g.detection_s = quiet;
        // The lowest step is the likeliest culprit; equal steps leave it undetermined.
        const auto low = std::min_element(last_step.begin(), last_step.end());
        if (std::count(last_step.begin(), last_step.end(), *low) == 1) {
          g.failed_local = static_cast<int>(low - last_step.begin());
          g.host = beats_[g.failed_local].host;
        }
        // Flight records say more: ask every rank to dump its last collectives and name the
        // rank(s) the others wait for (docs/flight_recorder.md).
        const int culprit = AnalyzeHang(n);
        if (culprit >= 0) {
          g.failed_local = culprit;
          g.host = beats_[culprit].host;
          g.cause += fmt::format("; flight records: the others wait for rank {}", Rank(culprit));
        }
        begin_stop(SIGTERM);
      }
      Publish(gen, false);
    }
    if (stopping && std::chrono::steady_clock::now() > kill_at) {
      slots_->SignalRanks(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(kPollS));
  }
  // The last beats (the final step, a checkpoint) may have come after the last poll.
  for (int i = 0; i < n; ++i) {
    auto beat = ReadHeartbeat(hb_dir_, Rank(i));
    if (!beat || beat->generation != gen) continue;
    beats_[i] = *beat;
    if (i == 0) goodput_.LeadBeat(*beat, Elapsed(), WallNow());
  }
  goodput_.GenerationEnded(Elapsed(), g.exit_code);
  return g;
}

Result<int> Supervisor::Run() {
  hb_dir_ = "/tmp/tenax-heartbeat-XXXXXX";
  if (::mkdtemp(hb_dir_.data()) == nullptr) {
    return IoError(std::string("cannot create a heartbeat folder in /tmp: ") +
                   std::strerror(errno));
  }
  TENAX_ASSIGN_OR_RETURN(monitor_, Monitor::Start(o_.status_file, o_.metrics_port));
  slots_ = std::make_unique<SlotTable>(
      o_.nproc_per_node, o_.spares, o_.quarantine_after,
      [this](int slot, int fd) { return Spawn(slot, fd); });
  int result = 0;
  for (int gen = 0;; ++gen) {
    GenerationResult g = RunGeneration(gen);
    result = g.exit_code;
    if (g.exit_code == 0 || g.interrupted) break;
    FailureRecord f;
    f.time_s = g.detected_s;
    f.generation = gen;
    f.rank = g.failed_local >= 0 ? Rank(g.failed_local) : -1;
    f.slot = g.failed_local >= 0 ? slots_->SlotOf(g.failed_local) : -1;
    f.host = g.host;
    f.kind = g.kind;
    f.cause = g.cause;
    f.exit_code = g.exit_code;
    f.detection_s = g.detection_s;
    goodput_.AddFailure(f);
    if (!Restartable(g.exit_code)) {
      log::Error("launch: exit code {} means the input must be fixed (docs/exit_codes.md); "
                 "not restarting",
                 g.exit_code);
      break;
    }
    if (gen >= o_.max_restarts) {
      if (o_.max_restarts > 0) {
        log::Error("launch: no restarts left ({} used); stopping with exit code {}",
                   o_.max_restarts, g.exit_code);
      }
      break;
    }
    if (f.slot >= 0 && BlamesSlot(g.kind)) {
      Result<int> moved = slots_->Exclude(f.slot);
      if (!moved.ok()) {
        log::Error("launch: cannot restart: {}; stopping with exit code {}",
                   moved.status().message(), g.exit_code);
        break;
      }
      if (*moved != f.slot) goodput_.SetReplacement(*moved);
    }
    log::Info("launch: restart {} of {}: all ranks start again from the newest good checkpoint",
              gen + 1, o_.max_restarts);
  }
  if (!goodput_.run_dir().empty()) {  // the trainer's loss-spike record (train/loss_spike.h)
    auto text = LocalFs().ReadFile(JoinPath(goodput_.run_dir(), "loss_spikes.json"));
    if (text.ok()) {
      const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("spikes") && j["spikes"].is_array()) {
        goodput_.SetLossSpikes(j["spikes"]);
      }
    }
  }
  const double wall = Elapsed();
  const nlohmann::json report = goodput_.Report(wall, result);
  log::Info("launch: {} in {:.1f}s with {} failure(s) and {} restart(s)",
            result == 0 ? "finished" : "failed", wall, goodput_.failure_count(),
            goodput_.restarts());
  log::Info("launch: {}", Goodput::Summary(report));
  Publish(goodput_.restarts(), true);
  std::string path = o_.goodput_file;
  if (path.empty() && !goodput_.run_dir().empty() && o_.node_rank == 0) {
    path = JoinPath(goodput_.run_dir(), "goodput.json");
  }
  if (!path.empty()) {
    TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(path, report.dump(2) + "\n"));
    log::Info("launch: goodput report written to {}", path);
  }
  slots_.reset();  // releases the spares
  monitor_.reset();
  std::error_code ec;
  std::filesystem::remove_all(hb_dir_, ec);
  if (result != 0) log::Error("launch: the job failed (exit code {})", result);
  return result;
}

}  // namespace

Result<int> Launch(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return InvalidArgument("--nproc-per-node and --nnodes must be >= 1 and 0 <= --node-rank < "
                           "--nnodes");
  }
  if (o.args.empty()) {
    return InvalidArgument("nothing to launch: give the tenax command after --, e.g. "
                           "tenax launch --nproc-per-node 4 -- train --config c.toml");
  }
  if (o.max_restarts < 0) return InvalidArgument("--max-restarts must be >= 0");
  if (o.max_restarts > 0 && o.nnodes > 1) {
    return InvalidArgument("--max-restarts with --nnodes > 1 is not supported yet (restarts need "
                           "a rendezvous across nodes); use one node or restart the job "
                           "from your scheduler");
  }
  if (o.spares < 0) return InvalidArgument("--spares must be >= 0");
  if (o.spares > 0 && o.nnodes > 1) {
    return InvalidArgument("--spares with --nnodes > 1 is not supported yet (spares are local "
                           "slots of a single-node job)");
  }
  if (o.quarantine_after < 1) return InvalidArgument("--quarantine-after must be >= 1");
  if (o.straggler_factor <= 1 || o.straggler_steps < 1) {
    return InvalidArgument("--straggler-factor must be > 1 and --straggler-steps >= 1");
  }
  if (o.metrics_port < 0 || o.metrics_port > 65535) {
    return InvalidArgument("--metrics-port must be a TCP port (1..65535), or 0 for none");
  }
  if (!o.inject.empty()) TENAX_RETURN_IF_ERROR(ParseFaults(o.inject).status());
  std::string host = "127.0.0.1";
  int fixed_port = 0;
  if (!o.rdzv.empty()) {
    const size_t colon = o.rdzv.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument("--rdzv " + o.rdzv + ": expected HOST:PORT");
    }
    host = o.rdzv.substr(0, colon);
    fixed_port = std::atoi(o.rdzv.c_str() + colon + 1);
    if (fixed_port <= 0 || fixed_port > 65535) {
      return InvalidArgument("--rdzv " + o.rdzv + ": bad port");
    }
  } else if (o.nnodes > 1) {
    return InvalidArgument("--nnodes > 1 needs --rdzv HOST:PORT (the address of node 0)");
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return Internal("cannot find the tenax executable (/proc/self/exe)");
  exe[n] = '\0';

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a standby that died must not kill the launcher on Assign

  Supervisor supervisor(o, host, fixed_port, exe);
  return supervisor.Run();
}

}  // namespace tenax::launch
