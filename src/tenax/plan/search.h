// The layout search: enumerates every way to factor the GPUs into tensor, context, pipeline
// (with virtual stages) and data parallelism (FSDP shards x replicas), every micro-batch size,
// recompute policy, precision and FSDP resharding choice; drops the layouts that are invalid or do
// not fit in memory, counting why; and keeps the K fastest.
// It is fast because the per-micro-batch cost depends on only (tp, cp, micro-batch, recompute,
// fp8, and for MoE models the expert-parallel degree) and is computed once per combination; the
// rest of a layout's cost is a few dozen flops. For MoE models every expert-parallel degree
// dividing dp_shard and the expert count is tried, and the fastest layout of each is kept so that
// the report can say why one was chosen.
// Non-goals: layouts whose axis sizes do not divide the GPU count; uneven stage splits.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tenax/plan/cost_model.h"
#include "tenax/plan/hardware.h"
#include "tenax/plan/layout.h"
#include "tenax/plan/memory_model.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

struct Candidate {
  Layout layout;
  StepTime time;
  MemoryBreakdown memory;
};

struct SearchOptions {
  int64_t gpus = 0;
  LayoutConstraints fix;
  int top_k = 5;
  // When set, only layouts it accepts are costed and ranked; the others count as dropped for
  // `reject_reason` (`tenax plan` keeps the layouts tenax train can run, support.h).
  std::function<bool(const Layout&)> accept;
  std::string reject_reason = "rejected";
  // Also try the zero-bubble schedules (zbv, dualpipev) where they can run: v = 2, an even split,
  // micro-batches >= 2 pp. Off for the validation rows, which run as their authors did.
  bool zero_bubble = false;
};

// The reason recorded for layouts that were costed but exceed the GPU's memory.
inline constexpr const char* kDoesNotFitReason = "does not fit in GPU memory";

struct SearchResult {
  std::vector<Candidate> best;  // fastest first
  int64_t evaluated = 0;        // layouts that were valid and costed
  int64_t fitting = 0;
  std::map<std::string, int64_t> dropped;      // reason -> how many layouts (all but
                                               // kDoesNotFitReason: before costing)
  std::vector<Candidate> leanest_not_fitting;  // up to 1, least memory: for "nothing fits"
  std::map<int64_t, Candidate> best_per_ep;    // MoE: the fastest fitting layout per ep
  double seconds = 0;                          // wall time of the search
};

// Fails only on bad input (no GPUs); "nothing fits" is a result with `best` empty.
Result<SearchResult> SearchLayouts(const Workload& w, const HardwareProfile& hw,
                                   const SearchOptions& options);

// Why `l` cannot run `w` at all (empty when it can): names the factors that do not divide.
std::string LayoutProblem(const Workload& w, const HardwareProfile& hw, const Layout& l);

// Costs one fully specified layout; the Status explains an invalid layout.
Result<Candidate> EvaluateLayout(const Workload& w, const HardwareProfile& hw, const Layout& l);

}  // namespace tenax::plan
