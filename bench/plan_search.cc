// The planner's speed, without libtorch (plan/ depends only on core and config).
//
//   build/bench/bench_plan_search                 a table: each search's wall time, best of 5
//   build/bench/bench_plan_search plan ARGS...    `tenax plan ARGS...` in a torch-free process, so
//                                                 that `time` measures process start + search
//
// The goals: search cost independent of --top, and the Llama 3 405B search on 16,384 GPUs
// plus process start under 0.2 s. Timings are printed, never asserted (shared machines vary).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tenax/plan/cli.h"
#include "tenax/plan/hardware.h"
#include "tenax/plan/search.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {
namespace {

struct Scenario {
  const char* name;
  const char* model;
  const char* gpu;
  int64_t gpus, seq, batch_seqs;
  int top;
};

int Table() {
  const Scenario scenarios[] = {
      {"llama3-405b on 16,384 H100, --top 5", "llama3-405b", "h100-sxm", 16384, 8192, 2048, 5},
      {"llama3-405b on 16,384 H100, --top 100000", "llama3-405b", "h100-sxm", 16384, 8192, 2048,
       100000},
      {"llama3-70b on 2,048 H100, --top 5", "llama3-70b", "h100-sxm", 2048, 8192, 2048, 5},
      {"llama3-8b on 8 H100, --top 5", "llama3-8b", "h100-sxm", 8, 8192, 16, 5},
  };
  std::printf("| search | layouts costed | fit | best of 5 (s) |\n|---|---:|---:|---:|\n");
  for (const Scenario& s : scenarios) {
    auto hw = LoadHardwareProfile(s.gpu);
    int64_t ignored = 0;
    auto spec = LoadPlanModel(s.model, &ignored);
    if (!hw.ok() || !spec.ok()) {
      std::fprintf(stderr, "%s\n", (hw.ok() ? spec.status() : hw.status()).message().c_str());
      return 1;
    }
    auto w = MakeWorkload(*spec, s.seq, s.seq * s.batch_seqs);
    SearchOptions o;
    o.gpus = s.gpus;
    o.top_k = s.top;
    double best = 1e9;
    SearchResult last;
    for (int i = 0; i < 5; ++i) {
      auto r = SearchLayouts(*w, *hw, o);
      if (!r.ok()) return 1;
      best = std::min(best, r->seconds);
      last = std::move(*r);
    }
    std::printf("| %s | %s | %s | %.4f |\n", s.name, fmt::format("{}", last.evaluated).c_str(),
                fmt::format("{}", last.fitting).c_str(), best);
  }
  return 0;
}

}  // namespace
}  // namespace tenax::plan

int main(int argc, char** argv) {
  if (argc < 2) return tenax::plan::Table();
  CLI::App app("torch-free tenax plan driver");
  app.require_subcommand(1);
  tenax::cli::Commands commands;
  tenax::plan::AddCommands(app, commands);
  CLI11_PARSE(app, argc, argv);
  const tenax::Result<int> rc = (*commands.Parsed())();
  if (!rc.ok()) {
    std::fprintf(stderr, "tenax: %s\n", rc.status().message().c_str());
    return static_cast<int>(rc.status().code());
  }
  return *rc;
}
