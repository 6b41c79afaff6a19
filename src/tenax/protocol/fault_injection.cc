#include "tenax/protocol/fault_injection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "tenax/core/rate.h"

namespace tenax::protocol {
namespace {

const char* kGrammar =
    "crash:rank=R:(step=S|time=T)[:at=start|spike|eval][:how=kill|exit][:code=N], "
    "hang:rank=R:step=S, "
    "stop:rank=R:step=S, "
    "slow:rank=R:factor=F[:from=S], nan:rank=R:step=S, ckpt-fail:step=S[:rank=R], "
    "ckpt-corrupt:step=S, kill-in-ckpt:rank=R:step=S[:at=written|fenced], "
    "spike:rank=R:step=S[:factor=F], "
    "push-loss:rank=R, exit-hang:rank=R, exit-crash:rank=R[:code=N], await-join:rank=R:step=S, "
    "heal-fail:rank=R[:at=warmup|form|transfer][:how=kill|stop], "
    "sdc:rank=R:step=S[:where=grad|activation|weight]; "
    "each may end in :gen=G or "
    ":gen=all; or poisson:crash=RATE:hang=RATE:nan=RATE[:seed=S] (RATE: N/h, N/min or N/s)";

constexpr std::pair<FaultKind, const char*> kFaultKinds[] = {
    {FaultKind::kCrash, "crash"},
    {FaultKind::kHang, "hang"},
    {FaultKind::kStop, "stop"},
    {FaultKind::kSlow, "slow"},
    {FaultKind::kNan, "nan"},
    {FaultKind::kCkptFail, "ckpt-fail"},
    {FaultKind::kCkptCorrupt, "ckpt-corrupt"},
    {FaultKind::kKillInCkpt, "kill-in-ckpt"},
    {FaultKind::kSpike, "spike"},
    {FaultKind::kPushLoss, "push-loss"},
    {FaultKind::kExitHang, "exit-hang"},
    {FaultKind::kExitCrash, "exit-crash"},
    {FaultKind::kAwaitJoin, "await-join"},
    {FaultKind::kSdc, "sdc"},
    {FaultKind::kHealFail, "heal-fail"},
    {FaultKind::kPoisson, "poisson"},
};

// poisson:KIND=RATE[:...][:seed=S], after its name (`parts` holds the fields).
Status ParsePoisson(std::stringstream& parts, const std::string& item, Fault* f) {
  for (std::string part; std::getline(parts, part, ':');) {
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (key == "seed") {
      char* end = nullptr;
      const unsigned long long seed = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || value[0] == '-') {
        return InvalidArgument("--inject " + item + ": seed=" + value +
                               " is not a non-negative integer");
      }
      f->seed = seed;
      continue;
    }
    double* rate = key == "crash"  ? &f->rates.crash
                   : key == "hang" ? &f->rates.hang
                   : key == "nan"  ? &f->rates.nan
                                   : nullptr;
    const std::optional<PerWindow> r = ParsePerWindow(value);
    if (rate == nullptr || !r) {
      return InvalidArgument("--inject " + item + ": bad field '" + part +
                             "' (a poisson schedule takes crash=RATE, hang=RATE, nan=RATE with "
                             "RATE as N/h, N/min or N/s, e.g. crash=30/h, and seed=S)");
    }
    *rate = r->per_second();
  }
  if (!(f->rates.total() > 0)) {
    return InvalidArgument("--inject " + item +
                           ": a poisson schedule needs a rate above 0 for at least one of "
                           "crash, hang and nan (e.g. poisson:crash=30/h)");
  }
  return Status::Ok();
}

void Say(int rank, const std::string& what) {
  std::fprintf(stderr, "[rank %d] injected fault: %s\n", rank, what.c_str());
  std::fflush(stderr);
}

}  // namespace

const char* SdcSiteName(SdcSite s) {
  switch (s) {
    case SdcSite::kGrad:
      return "grad";
    case SdcSite::kActivation:
      return "activation";
    case SdcSite::kWeight:
      return "weight";
  }
  return "?";
}

const char* FaultKindName(FaultKind k) {
  for (const auto& [value, name] : kFaultKinds) {
    if (value == k) return name;
  }
  return "?";
}

Result<std::vector<Fault>> ParseFaults(const std::string& spec) {
  std::vector<Fault> out;
  std::stringstream faults(spec);
  for (std::string item; std::getline(faults, item, ',');) {
    std::stringstream parts(item);
    std::string part;
    std::getline(parts, part, ':');
    Fault f;
    bool known = false;
    for (const auto& [value, name] : kFaultKinds) {
      if (part == name) {
        f.kind = value;
        known = true;
      }
    }
    if (!known) {
      return InvalidArgument("--inject " + item + ": unknown fault '" + part +
                             "' (supported: " + kGrammar + ")");
    }
    f.index = static_cast<int>(out.size());
    f.text = item;
    if (f.kind == FaultKind::kPoisson) {
      TENAX_RETURN_IF_ERROR(ParsePoisson(parts, item, &f));
      out.push_back(f);
      continue;
    }
    bool have_rank = false, have_step = false, have_factor = false;
    while (std::getline(parts, part, ':')) {
      const size_t eq = part.find('=');
      const std::string key = part.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      const bool numeric = !value.empty() && *end == '\0' && n >= 0;
      const double x = std::strtod(value.c_str(), &end);
      const bool real = !value.empty() && *end == '\0' && std::isfinite(x);
      if (key == "how" && (value == "kill" || value == "exit") && f.kind == FaultKind::kCrash) {
        f.kill = value == "kill";
      } else if (key == "how" && (value == "kill" || value == "stop") &&
                 f.kind == FaultKind::kHealFail) {
        f.stop = value == "stop";
      } else if (key == "at" &&
                 (value == "start" || value == "reduce" || value == "spike" || value == "eval") &&
                 f.kind == FaultKind::kCrash) {
        f.at = value == "reduce"  ? Fault::At::kReduce
               : value == "spike" ? Fault::At::kSpike
               : value == "eval"  ? Fault::At::kEval
                                  : Fault::At::kStart;
      } else if (key == "at" && (value == "written" || value == "fenced") &&
                 f.kind == FaultKind::kKillInCkpt) {
        f.ckpt_at = value == "fenced" ? CheckpointPhase::kFenced : CheckpointPhase::kWritten;
      } else if (key == "at" && (value == "warmup" || value == "form" || value == "transfer") &&
                 f.kind == FaultKind::kHealFail) {
        f.heal_at = value == "warmup" ? HealPoint::kWarmUp
                    : value == "form" ? HealPoint::kForm
                                      : HealPoint::kTransfer;
      } else if (key == "rank" && numeric) {
        f.rank = static_cast<int>(n);
        have_rank = true;
      } else if ((key == "step" || (key == "from" && f.kind == FaultKind::kSlow)) && numeric &&
                 (n > 0 || (n == 0 && key == "step" && f.kind == FaultKind::kCrash))) {
        f.step = n;
        have_step = true;
      } else if (key == "time" && f.kind == FaultKind::kCrash && real && x > 0) {
        f.time_s = x;
      } else if (key == "factor" && f.kind == FaultKind::kSlow && real && x >= 1) {
        f.factor = x;
        have_factor = true;
      } else if (key == "factor" && f.kind == FaultKind::kSpike && real && x > 1) {
        f.factor = x;
      } else if (key == "code" && numeric && n > 0 && n < 256) {
        f.code = static_cast<int>(n);
      } else if (key == "where" && f.kind == FaultKind::kSdc &&
                 (value == "grad" || value == "activation" || value == "weight")) {
        f.site = value == "grad"         ? SdcSite::kGrad
                 : value == "activation" ? SdcSite::kActivation
                                         : SdcSite::kWeight;
      } else if (key == "gen" && numeric) {
        f.generation = static_cast<int>(n);
      } else if (key == "gen" && value == "all") {
        f.generation = Fault::kEveryGeneration;
      } else {
        return InvalidArgument(
            "--inject " + item + ": bad field '" + part +
            "' (rank=R, step=S >= 1 (crash: >= 0), time=T > 0 (crash), factor=F >= 1 and "
            "from=S (slow), factor=F > 1 (spike), how=kill|exit, code=1..255, "
            "where=grad|activation|weight (sdc), at=start|reduce|spike|eval (crash), "
            "at=written|fenced (kill-in-ckpt), at=warmup|form|transfer "
            "and "
            "how=kill|stop (heal-fail), gen=G or gen=all)");
      }
    }
    const bool rank_optional = f.kind == FaultKind::kCkptFail || f.kind == FaultKind::kCkptCorrupt;
    if (!have_rank && !rank_optional) {
      return InvalidArgument("--inject " + item + ": a " + part + " needs rank=R");
    }
    if (f.kind == FaultKind::kSpike && f.factor == 1) f.factor = 100;
    if (f.kind == FaultKind::kSlow) {
      if (!have_factor) return InvalidArgument("--inject " + item + ": a slow needs factor=F");
      if (!have_step) f.step = 1;
    } else if (f.kind == FaultKind::kCrash && (have_step == (f.time_s > 0))) {
      return InvalidArgument("--inject " + item +
                             ": a crash needs rank=R and step=S or time=T (one of them)");
    } else if (f.kind == FaultKind::kCrash && f.at != Fault::At::kStart && f.step < 1) {
      const char* at = f.at == Fault::At::kReduce  ? "reduce"
                       : f.at == Fault::At::kSpike ? "spike"
                                                   : "eval";
      const char* whose = f.at == Fault::At::kReduce  ? "gradient reduction it strikes"
                          : f.at == Fault::At::kSpike ? "loss spikes"
                                                      : "evaluation it strikes";
      return InvalidArgument(fmt::format(
          "--inject {}: a crash at={} needs step=S >= 1 (the step whose {})", item, at, whose));
    } else if (f.kind == FaultKind::kPushLoss || f.kind == FaultKind::kExitHang ||
               f.kind == FaultKind::kExitCrash || f.kind == FaultKind::kHealFail) {
      if (have_step) {
        return InvalidArgument(
            "--inject " + item +
            (f.kind == FaultKind::kPushLoss
                 ? ": a push-loss has no step (it drops every push of its node in its generation)"
             : f.kind == FaultKind::kHealFail
                 ? ": a heal-fail has no step (it strikes the rank's first replacement as it "
                   "heals, whenever that is)"
                 : ": an " + std::string(FaultKindName(f.kind)) +
                       " has no step (it strikes once the rank's work is done)"));
      }
    } else if (f.kind != FaultKind::kCrash && !have_step) {
      return InvalidArgument(
          fmt::format("--inject {}: a {} needs step=S", item, FaultKindName(f.kind)));
    }
    out.push_back(f);
  }
  return out;
}

Status ValidateFaults(const std::vector<Fault>& faults, const JobShape& job) {
  int schedules = 0;
  for (const Fault& f : faults) {
    if (f.kind == FaultKind::kPoisson) {
      if (++schedules > 1) {
        return InvalidArgument("--inject " + f.text +
                               ": one poisson schedule per launch (give every kind's rate in it)");
      }
      if (job.total_steps <= 0) {
        return InvalidArgument("--inject " + f.text +
                               ": a poisson schedule needs a `train` command (it stops drawing "
                               "failures at the run's last step)");
      }
      if (job.nnodes > 1) {
        return InvalidArgument(
            "--inject " + f.text +
            ": poisson schedules run under the single-node launcher; on several nodes inject "
            "faults by step or time (crash:rank=R:time=T)");
      }
      if (job.live && f.rates.nan > 0) {
        return InvalidArgument(
            "--inject " + f.text +
            ": with resilience.mode = \"live\" a poisson schedule draws crashes and hangs only: "
            "a NaN loss stops every replica (a restart), which live recovery's model does not "
            "cover; drop nan=RATE, or use resilience.mode = \"restart\"");
      }
      if (job.max_restarts < 1) {
        return InvalidArgument("--inject " + f.text +
                               ": every failure of a poisson schedule needs a restart; give "
                               "--max-restarts (e.g. 1000)");
      }
      if (job.restart_budget_per_s > 0 && f.rates.total() > job.restart_budget_per_s) {
        return InvalidArgument(fmt::format(
            "--inject {}: {:g} failures an hour would spend the restart budget ({:g} an hour, "
            "--restart-budget); give --max-restarts (e.g. 1000) or a larger --restart-budget",
            f.text, f.rates.total() * 3600, job.restart_budget_per_s * 3600));
      }
      if (f.rates.nan > 0 && !job.nan_restarts) {
        return InvalidArgument("--inject " + f.text +
                               ": a NaN loss stops the run unless training.on_nonfinite = "
                               "\"restart\"; set it, or drop nan= from the schedule");
      }
      continue;
    }
    if (f.rank >= job.world) {
      return InvalidArgument(fmt::format(
          "--inject {}: rank {} does not exist in a job of {} rank(s) (ranks 0..{}), so the "
          "fault could never fire",
          f.text, f.rank, job.world, job.world - 1));
    }
    if (job.total_steps > 0 && f.step > job.total_steps) {
      return InvalidArgument(fmt::format(
          "--inject {}: step {} is after the run's last step ({}, training.steps), so the fault "
          "could never fire",
          f.text, f.step, job.total_steps));
    }
    if (f.kind == FaultKind::kAwaitJoin && !job.live) {
      return InvalidArgument("--inject " + f.text +
                             ": await-join waits for a replacement to join a live group; it "
                             "needs resilience.mode = \"live\"");
    }
    if (f.kind == FaultKind::kHealFail) {
      if (!job.live) {
        return InvalidArgument("--inject " + f.text +
                               ": heal-fail strikes a replacement healing from a live rank; it "
                               "needs resilience.mode = \"live\"");
      }
      const int per_replica = std::max(1, job.live_replica_ranks);
      const int replica = f.rank / per_replica;
      bool replaced = false;
      for (const Fault& g : faults) {
        const bool kills =
            g.kind == FaultKind::kCrash || g.kind == FaultKind::kHang || g.kind == FaultKind::kStop;
        replaced =
            replaced || (kills && g.rank / per_replica == replica &&
                         (g.generation == f.generation || g.generation == Fault::kEveryGeneration));
      }
      if (!replaced) {
        const std::string of =
            per_replica > 1 ? fmt::format(" or of its replica (ranks {}..{})",
                                          replica * per_replica, (replica + 1) * per_replica - 1)
                            : "";
        return InvalidArgument(fmt::format(
            "--inject {}: rank {} is never replaced, so the fault could never fire; add a crash, "
            "hang or stop of rank {}{} (e.g. crash:rank={}:step=5)",
            f.text, f.rank, f.rank, of, f.rank));
      }
    }
    if (f.kind == FaultKind::kKillInCkpt && f.ckpt_at == CheckpointPhase::kFenced &&
        job.nnodes < 2) {
      return InvalidArgument(fmt::format(
          "--inject {}: at=fenced strikes between a commit's record in etcd and the committing "
          "rank's folder, which only a job of several nodes has (--nnodes >= 2 with --rdzv "
          "etcd://...); this one has {}: use at=written",
          f.text, job.nnodes));
    }
    if (f.kind == FaultKind::kPushLoss && job.nnodes < 2) {
      return InvalidArgument(fmt::format(
          "--inject {}: replicas are pushed between the nodes of a job of several nodes "
          "(--nnodes >= 2 with --rdzv etcd://...); this one has {}, so the fault could never "
          "fire",
          f.text, job.nnodes));
    }
    if (f.generation > job.max_restarts) {
      return InvalidArgument(fmt::format(
          "--inject {}: generation {} never runs with --max-restarts {} (generations 0..{}); "
          "raise --max-restarts or lower gen",
          f.text, f.generation, job.max_restarts, job.max_restarts));
    }
  }
  return Status::Ok();
}

std::vector<FiredFault> ReadFiredFaults(const std::string& heartbeat_dir) {
  std::vector<FiredFault> out;
  std::ifstream in(FiredFaultsPath(heartbeat_dir));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;  // a line torn by a crash mid-write
    out.push_back({j.value("index", -1), j.value("rank", -1), j.value("generation", -1),
                   j.value("step", int64_t{0})});
  }
  return out;
}

std::vector<Fault> UnfiredFaults(const std::vector<Fault>& faults,
                                 const std::vector<FiredFault>& fired) {
  std::vector<Fault> out;
  for (const Fault& f : faults) {
    if (f.kind == FaultKind::kPoisson) continue;
    bool seen = false;
    for (const FiredFault& x : fired) {
      seen = seen || (x.index == f.index &&
                      (f.generation == Fault::kEveryGeneration || x.generation == f.generation));
    }
    if (!seen) out.push_back(f);
  }
  return out;
}

Result<std::unique_ptr<FaultInjector>> FaultInjector::Create(const RankContext& ctx, int rank,
                                                             const ExitReporter* reporter) {
  if (ctx.inject.empty()) return std::unique_ptr<FaultInjector>();
  TENAX_ASSIGN_OR_RETURN(std::vector<Fault> all, ParseFaults(ctx.inject));
  std::vector<Fault> mine;
  for (const Fault& f : all) {
    const bool gen = f.generation == ctx.generation || f.generation == Fault::kEveryGeneration;
    if (f.kind == FaultKind::kPoisson) {  // the launcher's; the rank only takes its NaNs
      if (f.rates.nan > 0) mine.push_back(f);
      continue;
    }
    const int who = f.kind == FaultKind::kCkptCorrupt ? 0 : f.rank;
    if (gen && who == rank && f.kind != FaultKind::kPushLoss) mine.push_back(f);  // agent's
  }
  if (mine.empty()) return std::unique_ptr<FaultInjector>();
  return std::unique_ptr<FaultInjector>(new FaultInjector(ctx, rank, reporter, std::move(mine)));
}

FaultInjector::FaultInjector(const RankContext& ctx, int rank, const ExitReporter* reporter,
                             std::vector<Fault> faults)
    : ctx_(ctx), rank_(rank), reporter_(reporter), faults_(std::move(faults)) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kCrash && f.time_s > 0) {
      // One timer: a second crash by time on the same rank could never fire after the first.
      timer_ = std::thread([this, f] { TimerLoop(ctx_.launch_time_unix + f.time_s, f); });
      break;
    }
  }
}

FaultInjector::~FaultInjector() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void FaultInjector::TimerLoop(double deadline_unix, Fault f) {
  const auto wait = std::chrono::duration<double>(std::max(0.0, deadline_unix - WallNow()));
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, wait, [this] { return stop_; })) return;
  lock.unlock();
  Crash(f, -1, fmt::format("at {:g}s after the launch", f.time_s));
}

void FaultInjector::Record(const Fault& f, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!recorded_.insert(f.index).second) return;
  }
  if (ctx_.heartbeat_dir.empty()) return;
  const std::string line = nlohmann::json{{"index", f.index}, {"text", f.text},
                                          {"rank", rank_},    {"generation", ctx_.generation},
                                          {"step", step},     {"wall_s", WallNow()}}
                               .dump() +
                           "\n";
  // One small O_APPEND write: lines from several ranks do not interleave.
  const int fd = ::open(FiredFaultsPath(ctx_.heartbeat_dir).c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

void FaultInjector::Crash(const Fault& f, int64_t step, const std::string& where) {
  Record(f, step);
  const std::string what = fmt::format("crash ({}) {}", f.kill ? "kill" : "exit", where);
  Say(rank_, what);
  const int code = f.kill ? 128 + SIGKILL : f.code;
  // At a step's start the rank is outside any checkpoint code (exact); a timed crash may land
  // anywhere, so the launcher judges it by the rank's phase.
  if (reporter_ != nullptr) {
    reporter_->Report(code, FailureKind::kCrash, "injected " + what, /*secondary=*/false,
                      /*exact=*/step >= 0);
  }
  if (f.kill) ::raise(SIGKILL);
  std::_Exit(f.code);  // a deliberate crash: no destructors, like a real one
}

bool FaultInjector::CrashDue(int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kCrash && f.at == Fault::At::kStart && f.step == step) return true;
  }
  return false;
}

void FaultInjector::OnStepBegin(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kCrash && f.at == Fault::At::kStart && f.step == step) {
      Crash(f, step, "at step " + std::to_string(step));
    }
  }
}

void FaultInjector::CrashWithinStep(Fault::At at, int64_t step, const std::string& where) {
  for (const Fault& f : faults_) {
    if (f.kind != FaultKind::kCrash || f.at != at || f.step != step) continue;
    if (ctx_.live_join && UnfiredFaults({f}, ReadFiredFaults(ctx_.heartbeat_dir)).empty()) {
      continue;  // its first incarnation crashed there already
    }
    Crash(f, step, "at step " + std::to_string(step) + "'s " + where);
  }
}

void FaultInjector::OnLossSpike(int64_t step) {
  CrashWithinStep(Fault::At::kSpike, step, "loss spike");
}

void FaultInjector::OnEvaluated(int64_t step) {
  CrashWithinStep(Fault::At::kEval, step, "evaluation");
}

void FaultInjector::OnSetup() {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kCrash && f.at == Fault::At::kStart && f.step == 0 && f.time_s <= 0) {
      Crash(f, 0, "in its setup");
    }
  }
}

void FaultInjector::BeforeGradientReduce(int64_t step, double compute_s) {
  CrashWithinStep(Fault::At::kReduce, step, "gradient reduction");
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kHang && f.step == step) {
      Record(f, step);
      Say(rank_, "hang at step " + std::to_string(step) + " before the gradient all-reduce");
      for (;;) ::pause();  // like a stuck kernel: alive, silent, holding its peers
    }
    if (f.kind == FaultKind::kStop && f.step == step) {
      Record(f, step);
      Say(rank_, "SIGSTOP at step " + std::to_string(step) + " before the gradient all-reduce");
      // Stopped, the rank handles no signal (no flight record on SIGUSR1); only SIGKILL ends it
      // and SIGCONT lets it carry on, like a process stopped by an operator or stuck in the
      // kernel.
      ::raise(SIGSTOP);
    }
    if (f.kind == FaultKind::kSlow && step >= f.step && compute_s > 0) {
      Record(f, step);
      std::this_thread::sleep_for(std::chrono::duration<double>((f.factor - 1) * compute_s));
    }
  }
}

void FaultInjector::AfterFinish(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kExitHang) {
      Record(f, step);
      Say(rank_, "hang in the teardown after step " + std::to_string(step));
      for (;;) ::pause();  // like a communicator whose destruction never returns
    }
    if (f.kind == FaultKind::kExitCrash) {
      Record(f, step);
      Say(rank_, "crash in the teardown after step " + std::to_string(step));
      std::_Exit(f.code);  // like a destructor that fails: no report, no cleanup
    }
  }
}

bool FaultInjector::PoisonLoss(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kNan && f.step == step) {
      Record(f, step);
      Say(rank_, "NaN loss at step " + std::to_string(step));
      return true;
    }
    if (f.kind == FaultKind::kPoisson && !ctx_.heartbeat_dir.empty()) {
      std::error_code ec;
      if (std::filesystem::remove(NanRequestPath(ctx_.heartbeat_dir, rank_), ec)) {
        Say(rank_,
            "NaN loss at step " + std::to_string(step) + " (the launcher's poisson schedule)");
        return true;
      }
    }
  }
  return false;
}

bool FaultInjector::AwaitJoinDue(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kAwaitJoin && f.step == step) {
      Record(f, step);
      Say(rank_, "holding step " + std::to_string(step) + " until every rank is in the group");
      return true;
    }
  }
  return false;
}

void FaultInjector::DuringHeal(HealPoint at) {
  if (!ctx_.live_join) return;
  for (const Fault& f : faults_) {
    if (f.kind != FaultKind::kHealFail || f.heal_at != at) continue;
    // Once per generation: the replacement started after this one heals.
    bool fired = false;
    for (const FiredFault& x : ReadFiredFaults(ctx_.heartbeat_dir)) {
      fired = fired || (x.index == f.index && x.generation == ctx_.generation);
    }
    if (fired) continue;
    const std::string where = at == HealPoint::kWarmUp ? "in its warm-up step"
                              : at == HealPoint::kForm ? "before connecting to the group"
                                                       : "inside the state transfer";
    if (!f.stop) Crash(f, -1, "while healing, " + where);
    Record(f, -1);
    Say(rank_, "SIGSTOP while healing, " + where);
    ::raise(SIGSTOP);
  }
}

std::optional<SdcSite> FaultInjector::SdcAt(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind != FaultKind::kSdc || step < f.step) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (recorded_.count(f.index) > 0) return f.site;
    }
    Record(f, step);
    Say(rank_,
        fmt::format("silent data corruption ({}) from step {} on", SdcSiteName(f.site), step));
    return f.site;
  }
  return std::nullopt;
}

double FaultInjector::LossFactor(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind == FaultKind::kSpike && f.step == step) {
      Record(f, step);
      Say(rank_, fmt::format("loss x {:g} at step {}", f.factor, step));
      return f.factor;
    }
  }
  return 1;
}

Status FaultInjector::CheckpointHook(int64_t step, CheckpointPhase phase,
                                     const std::string& step_dir) {
  for (const Fault& f : faults_) {
    if (f.step != step) continue;
    if (phase == CheckpointPhase::kWritten && f.kind == FaultKind::kCkptFail) {
      Record(f, step);
      Say(rank_, "checkpoint write of step " + std::to_string(step) + " fails");
      return IoError("writing checkpoint step " + std::to_string(step) + " in " + step_dir +
                     " failed: injected I/O error (--inject ckpt-fail)");
    }
    if (phase == f.ckpt_at && f.kind == FaultKind::kKillInCkpt) {
      Record(f, step);
      const std::string when = phase == CheckpointPhase::kFenced
                                   ? "once etcd recorded the commit of checkpoint step " +
                                         std::to_string(step) + ", before its folder did"
                                   : "while writing checkpoint step " + std::to_string(step);
      Say(rank_, "SIGKILL " + when);
      if (reporter_ != nullptr) {
        reporter_->Report(128 + SIGKILL, FailureKind::kCrashInCheckpoint,
                          "injected SIGKILL " + when);
      }
      ::raise(SIGKILL);
    }
    if (phase == CheckpointPhase::kCommitted && f.kind == FaultKind::kCkptCorrupt) {
      // The largest file: the weights, whose checksum a resume verifies.
      std::string victim;
      std::uintmax_t size = 0;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(step_dir, ec)) {
        if (e.is_regular_file() && e.file_size() > size) {
          size = e.file_size();
          victim = e.path().string();
        }
      }
      if (victim.empty()) return IoError("ckpt-corrupt: no file in " + step_dir);
      std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(static_cast<std::streamoff>(size / 2));
      char byte = 0;
      file.get(byte);
      file.seekp(static_cast<std::streamoff>(size / 2));
      file.put(static_cast<char>(byte ^ 0x5a));
      if (!file) return IoError("ckpt-corrupt: could not rewrite " + victim);
      Record(f, step);
      Say(rank_, "flipped a byte of " + victim + " after its commit");
    }
  }
  return Status::Ok();
}

}  // namespace tenax::protocol
