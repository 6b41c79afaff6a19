#include "tenax/core/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "tenax/core/check.h"

namespace tenax {

Result<std::vector<Fault>> ParseFaults(const std::string& spec) {
  std::vector<Fault> out;
  std::stringstream faults(spec);
  for (std::string item; std::getline(faults, item, ',');) {
    std::stringstream parts(item);
    std::string part;
    std::getline(parts, part, ':');
    if (part != "crash" && part != "hang") {
      return InvalidArgument("--inject " + item + ": unknown fault '" + part +
                             "' (supported: crash:rank=R:step=S[:how=kill|exit][:code=N][:gen=G], "
                             "hang:rank=R:step=S[:gen=G])");
    }
    Fault f;
    f.kind = part;
    bool have_rank = false, have_step = false;
    while (std::getline(parts, part, ':')) {
      const size_t eq = part.find('=');
      const std::string key = part.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      const bool numeric = !value.empty() && *end == '\0' && n >= 0;
      if (key == "how" && (value == "kill" || value == "exit")) {
        f.how = value;
      } else if (key == "rank" && numeric) {
        f.rank = static_cast<int>(n);
        have_rank = true;
      } else if (key == "step" && numeric && n > 0) {
        f.step = n;
        have_step = true;
      } else if (key == "code" && numeric && n > 0 && n < 256) {
        f.code = static_cast<int>(n);
      } else if (key == "gen" && numeric) {
        f.generation = static_cast<int>(n);
      } else {
        return InvalidArgument("--inject " + item + ": bad field '" + part +
                               "' (rank=R, step=S >= 1, how=kill|exit, code=1..255, gen=G)");
      }
    }
    if (!have_rank || !have_step) {
      return InvalidArgument("--inject " + item + ": a " + f.kind + " needs rank=R and step=S");
    }
    out.push_back(f);
  }
  return out;
}

void MaybeInjectFault(int rank, int64_t step) {
  const char* spec = std::getenv("TENAX_INJECT");
  if (spec == nullptr || *spec == '\0') return;
  const char* gen_env = std::getenv("TENAX_RESTART_COUNT");
  const int generation = gen_env ? std::atoi(gen_env) : 0;
  auto faults = ParseFaults(spec);
  TENAX_CHECK_MSG(faults.ok(), "TENAX_INJECT is malformed");
  for (const Fault& f : *faults) {
    if (f.rank != rank || f.step != step || f.generation != generation) continue;
    if (f.kind == "hang") {
      std::fprintf(stderr, "[rank %d] injected fault: hang at step %lld\n", rank,
                   static_cast<long long>(step));
      std::fflush(stderr);
      for (;;) ::pause();  // like a stuck kernel: alive, silent, holding its peers
    }
    std::fprintf(stderr, "[rank %d] injected fault: crash (%s) at step %lld\n", rank,
                 f.how.c_str(), static_cast<long long>(step));
    std::fflush(stderr);
    if (f.how == "kill") ::raise(SIGKILL);
    std::_Exit(f.code);  // a deliberate crash: no destructors, like a real one
  }
}

}  // namespace tenax
