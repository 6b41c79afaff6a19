#include "tenax/core/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tenax/core/check.h"

namespace tenax {
namespace {

const char* kGrammar =
    "crash:rank=R:(step=S|time=T)[:how=kill|exit][:code=N], hang:rank=R:step=S, "
    "slow:rank=R:factor=F[:from=S], nan:rank=R:step=S, ckpt-fail:step=S[:rank=R], "
    "ckpt-corrupt:step=S, kill-in-ckpt:rank=R:step=S, spike:rank=R:step=S[:factor=F]; each "
    "may end in :gen=G or :gen=all";

bool KnownKind(const std::string& k) {
  return k == "crash" || k == "hang" || k == "slow" || k == "nan" || k == "ckpt-fail" ||
         k == "ckpt-corrupt" || k == "kill-in-ckpt" || k == "spike";
}

// The faults of this process's launch generation, parsed once (the spec never changes while a
// process runs); empty without TENAX_INJECT.
const std::vector<Fault>& ActiveFaults() {
  static const std::vector<Fault> faults = [] {
    std::vector<Fault> out;
    const char* spec = std::getenv("TENAX_INJECT");
    if (spec == nullptr || *spec == '\0') return out;
    const char* gen_env = std::getenv("TENAX_RESTART_COUNT");
    const int generation = gen_env ? std::atoi(gen_env) : 0;
    auto parsed = ParseFaults(spec);
    TENAX_CHECK_MSG(parsed.ok(), "TENAX_INJECT is malformed");
    for (const Fault& f : *parsed) {
      if (f.generation == generation || f.generation == Fault::kEveryGeneration) {
        out.push_back(f);
      }
    }
    return out;
  }();
  return faults;
}

bool Enabled() {
  const char* spec = std::getenv("TENAX_INJECT");
  return spec != nullptr && *spec != '\0';
}

void Say(int rank, const std::string& what) {
  std::fprintf(stderr, "[rank %d] injected fault: %s\n", rank, what.c_str());
  std::fflush(stderr);
}

double SecondsSinceLaunch() {
  const char* t = std::getenv("TENAX_LAUNCH_TIME");
  if (t == nullptr) return 0;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return now - std::atof(t);
}

[[noreturn]] void Crash(const Fault& f) {
  if (f.how == "kill") ::raise(SIGKILL);
  std::_Exit(f.code);  // a deliberate crash: no destructors, like a real one
}

}  // namespace

Result<std::vector<Fault>> ParseFaults(const std::string& spec) {
  std::vector<Fault> out;
  std::stringstream faults(spec);
  for (std::string item; std::getline(faults, item, ',');) {
    std::stringstream parts(item);
    std::string part;
    std::getline(parts, part, ':');
    if (!KnownKind(part)) {
      return InvalidArgument("--inject " + item + ": unknown fault '" + part + "' (supported: " +
                             kGrammar + ")");
    }
    Fault f;
    f.kind = part;
    bool have_rank = false, have_step = false, have_factor = false;
    while (std::getline(parts, part, ':')) {
      const size_t eq = part.find('=');
      const std::string key = part.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      const bool numeric = !value.empty() && *end == '\0' && n >= 0;
      const double x = std::strtod(value.c_str(), &end);
      const bool real = !value.empty() && *end == '\0';
      if (key == "how" && (value == "kill" || value == "exit") && f.kind == "crash") {
        f.how = value;
      } else if (key == "rank" && numeric) {
        f.rank = static_cast<int>(n);
        have_rank = true;
      } else if ((key == "step" || (key == "from" && f.kind == "slow")) && numeric && n > 0) {
        f.step = n;
        have_step = true;
      } else if (key == "time" && f.kind == "crash" && real && x > 0) {
        f.time_s = x;
      } else if (key == "factor" && f.kind == "slow" && real && x >= 1) {
        f.factor = x;
        have_factor = true;
      } else if (key == "factor" && f.kind == "spike" && real && x > 1) {
        f.factor = x;
      } else if (key == "code" && numeric && n > 0 && n < 256) {
        f.code = static_cast<int>(n);
      } else if (key == "gen" && numeric) {
        f.generation = static_cast<int>(n);
      } else if (key == "gen" && value == "all") {
        f.generation = Fault::kEveryGeneration;
      } else {
        return InvalidArgument("--inject " + item + ": bad field '" + part +
                               "' (rank=R, step=S >= 1, time=T > 0 (crash), factor=F >= 1 and "
                               "from=S (slow), factor=F > 1 (spike), how=kill|exit, code=1..255, "
                               "gen=G or gen=all)");
      }
    }
    const bool rank_optional = f.kind == "ckpt-fail" || f.kind == "ckpt-corrupt";
    if (!have_rank && !rank_optional) {
      return InvalidArgument("--inject " + item + ": a " + f.kind + " needs rank=R");
    }
    if (f.kind == "spike" && f.factor == 1) f.factor = 100;
    if (f.kind == "slow") {
      if (!have_factor) return InvalidArgument("--inject " + item + ": a slow needs factor=F");
      if (!have_step) f.step = 1;
    } else if (f.kind == "crash" && (have_step == (f.time_s > 0))) {
      return InvalidArgument("--inject " + item + ": a crash needs rank=R and step=S or time=T "
                             "(one of them)");
    } else if (f.kind != "crash" && !have_step) {
      return InvalidArgument("--inject " + item + ": a " + f.kind + " needs step=S");
    }
    out.push_back(f);
  }
  return out;
}

bool CrashDue(int rank, int64_t step) {
  if (!Enabled()) return false;
  for (const Fault& f : ActiveFaults()) {
    if (f.kind != "crash" || f.rank != rank) continue;
    if (f.step == step || (f.time_s > 0 && SecondsSinceLaunch() >= f.time_s)) return true;
  }
  return false;
}

void MaybeInjectFault(int rank, int64_t step) {
  if (!Enabled()) return;
  for (const Fault& f : ActiveFaults()) {
    if (f.kind != "crash" || f.rank != rank) continue;
    if (f.step == step) {
      Say(rank, "crash (" + f.how + ") at step " + std::to_string(step));
      Crash(f);
    }
    if (f.time_s > 0 && SecondsSinceLaunch() >= f.time_s) {
      Say(rank, "crash (" + f.how + ") at " + std::to_string(f.time_s) + "s, step " +
                    std::to_string(step));
      Crash(f);
    }
  }
}

void BeforeGradientReduce(int rank, int64_t step, double compute_s) {
  if (!Enabled()) return;
  for (const Fault& f : ActiveFaults()) {
    if (f.rank != rank) continue;
    if (f.kind == "hang" && f.step == step) {
      Say(rank, "hang at step " + std::to_string(step) + " before the gradient all-reduce");
      for (;;) ::pause();  // like a stuck kernel: alive, silent, holding its peers
    }
    if (f.kind == "slow" && step >= f.step && compute_s > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>((f.factor - 1) * compute_s));
    }
  }
}

bool PoisonLoss(int rank, int64_t step) {
  if (!Enabled()) return false;
  for (const Fault& f : ActiveFaults()) {
    if (f.kind == "nan" && f.rank == rank && f.step == step) {
      Say(rank, "NaN loss at step " + std::to_string(step));
      return true;
    }
  }
  return false;
}

double LossFactor(int rank, int64_t step) {
  if (!Enabled()) return 1;
  for (const Fault& f : ActiveFaults()) {
    if (f.kind == "spike" && f.rank == rank && f.step == step) {
      Say(rank, fmt::format("loss x {:g} at step {}", f.factor, step));
      return f.factor;
    }
  }
  return 1;
}

Status CheckpointFault(int rank, int64_t step, CheckpointPhase phase,
                       const std::string& step_dir) {
  if (!Enabled()) return Status::Ok();
  for (const Fault& f : ActiveFaults()) {
    if (f.step != step) continue;
    if (phase == CheckpointPhase::kWritten && f.kind == "ckpt-fail" && f.rank == rank) {
      Say(rank, "checkpoint write of step " + std::to_string(step) + " fails");
      return IoError("writing checkpoint step " + std::to_string(step) + " in " + step_dir +
                     " failed: injected I/O error (--inject ckpt-fail)");
    }
    if (phase == CheckpointPhase::kWritten && f.kind == "kill-in-ckpt" && f.rank == rank) {
      Say(rank, "SIGKILL while writing checkpoint step " + std::to_string(step));
      ::raise(SIGKILL);
    }
    if (phase == CheckpointPhase::kCommitted && f.kind == "ckpt-corrupt" && rank == 0) {
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
      Say(rank, "flipped a byte of " + victim + " after its commit");
    }
  }
  return Status::Ok();
}

}  // namespace tenax
