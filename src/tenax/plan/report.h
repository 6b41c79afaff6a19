// What `tenax plan` prints: the ranked table of layouts (text or JSON), the per-layout breakdown
// behind --explain, and the training-time lines for --tokens and --failure-rate.
// Non-goals: any modelling; this file only formats what search.h and training_time.h computed.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tenax/plan/hardware.h"
#include "tenax/plan/search.h"
#include "tenax/plan/training_time.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

struct PlanReport {
  const Workload* workload = nullptr;
  const HardwareProfile* hardware = nullptr;
  int64_t gpus = 0;
  const SearchResult* search = nullptr;
  std::optional<double> tokens;   // --tokens
  double price_per_gpu_hour = 0;  // 0: no cost column
  std::optional<FailureCosts> failures;
  // `tenax plan` ranks only what tenax train can run unless --all: then `search` holds runnable
  // layouts and `unrunnable` the fastest of all (some of which tenax train cannot run yet).
  bool runnable_only = false;
  const SearchResult* unrunnable = nullptr;
  std::string all_reason;  // why every layout is ranked although --all was not given
  std::string batch_note;  // where the batch came from, when not from the flags
  // How the printed `tenax launch` command names the model: "--config c.toml", or
  // "--config YOUR.toml" plus model.* --set words.
  std::string config_arg;
  std::vector<std::string> model_sets;
  // resilience.sdc_check_interval (0: no checks): their replays lengthen the training time.
  int64_t sdc_check_interval = 0;
};

std::string PlanText(const PlanReport& r);
// The whole report as JSON; `with_layouts` = false leaves "layouts" empty.
nlohmann::json PlanJson(const PlanReport& r, bool with_layouts = true);
// One ranked layout: its degrees, tenax train support, time (per layer, per stage, per step) and
// memory breakdown, training time and cost.
nlohmann::json LayoutJson(const PlanReport& r, const Candidate& c);
// PlanJson streamed to `out`, one layout per line: --top 100000 prints without building one huge
// document in memory. `explain` (when not empty) is included as "explain".
void WritePlanJson(const PlanReport& r, const std::string& explain, std::FILE* out);
// The breakdown of one candidate: time per layer and per step, memory per GPU, and why.
std::string ExplainText(const Workload& w, const HardwareProfile& hw, const Candidate& c);
// MoE models: why the search chose its expert-parallel degree: the fastest fitting layout for
// every degree it tried, with its all-to-all and FSDP traffic and expert memory. Empty for dense
// models.
std::string ExpertChoiceText(const PlanReport& r);

}  // namespace tenax::plan
