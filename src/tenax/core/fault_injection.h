// Deliberate failures for testing recovery (`tenax launch --inject SPEC`, documented in
// docs/launcher_protocol.md). The launcher validates SPEC and passes it to the ranks in
// TENAX_INJECT together with TENAX_RESTART_COUNT; the trainer calls MaybeInjectFault at the start
// of every step. A fault fires only in the launch generation it names (default 0, the first), so
// the restarted job runs clean.
// Grammar: FAULT[,FAULT...] where FAULT = crash:rank=R:step=S[:how=kill|exit][:code=N][:gen=G]
//                                       | hang:rank=R:step=S[:gen=G]
//   how=kill (default) sends SIGKILL to itself, like a GPU fault or OOM kill; how=exit exits with
//   code N (default 1), like a crash that reports.
//   hang blocks the rank forever (its peers then wait in their next collective).
// Non-goals: slow ranks, NaNs and checkpoint corruption (later, same grammar).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax {

struct Fault {
  std::string kind = "crash";
  int rank = 0;
  int64_t step = 0;
  std::string how = "kill";
  int code = 1;
  int generation = 0;
};

Result<std::vector<Fault>> ParseFaults(const std::string& spec);

// Reads TENAX_INJECT / TENAX_RESTART_COUNT; if a fault matches (rank, step), carries it out.
// A bad spec here is a bug (the launcher validated it): it aborts.
void MaybeInjectFault(int rank, int64_t step);

}  // namespace tenax
