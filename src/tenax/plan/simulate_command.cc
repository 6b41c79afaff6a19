// `tenax simulate`: parse the flags, run the Monte-Carlo (simulate.h) and print it beside the
// closed-form numbers (Young, Daly) it should agree with.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include "tenax/plan/commands.h"
#include "tenax/plan/failure.h"
#include "tenax/plan/simulate.h"
#include "tenax/plan/units.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {
namespace {

nlohmann::json SummaryJson(const Summary& s) {
  return {{"mean", s.mean}, {"stddev", s.stddev}, {"ci95", {s.ci_low, s.ci_high}},
          {"p05", s.p05},   {"p50", s.p50},       {"p95", s.p95}};
}

// --sdc-overhead: "7.5%" or 0.075; the share of the computation the checks' replays add.
Result<double> ParseShare(const std::string& text, const char* flag) {
  if (text.empty()) return 0.0;
  std::string t = text;
  const bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !std::isfinite(v) || v < 0) {
    return InvalidArgument(
        fmt::format("{} {} is not a share: give e.g. 7.5% or 0.075", flag, text));
  }
  return percent ? v / 100 : v;
}

void Scale(Summary* s, double k) {
  for (double* v : {&s->mean, &s->stddev, &s->ci_low, &s->ci_high, &s->p05, &s->p50, &s->p95}) {
    *v *= k;
  }
}

std::string Line(const char* what, const Summary& s, bool as_duration) {
  auto f = [&](double v) { return as_duration ? FormatDuration(v) : fmt::format("{:.1f}", v); };
  return fmt::format("  {:<22} {:>10}   95% CI {} - {}; 5th-95th percentile {} - {}\n", what,
                     f(s.mean), f(s.ci_low), f(s.ci_high), f(s.p05), f(s.p95));
}

}  // namespace

Status RunSimulate(const SimulateFlags& f) {
  SimulationConfig c;
  c.gpus = f.gpus;
  c.gpus_per_node = f.gpus_per_node;
  if (f.gpus_per_node < 1) return InvalidArgument("--gpus-per-node must be >= 1");
  TENAX_ASSIGN_OR_RETURN(c.rate, ParseFailureRate(f.failure_rate, f.gpus_per_node));
  std::string checkpoint_source;  // how the checkpoint cost was derived, when it was
  if (!f.checkpoint_bandwidth.empty() || !f.model.empty()) {
    if (f.checkpoint_bandwidth.empty() || f.model.empty() || !f.checkpoint_cost.empty()) {
      return InvalidArgument(
          "give either --checkpoint-cost, or --model and --checkpoint-bandwidth (the cost is then "
          "the model's checkpoint size / bandwidth)");
    }
    int64_t ignored = 0;
    TENAX_ASSIGN_OR_RETURN(ModelSpec model, LoadPlanModel(f.model, &ignored));
    TENAX_ASSIGN_OR_RETURN(c.checkpoint_cost, CheckpointCostFromModel(model, f.checkpoint_bandwidth,
                                                                      &checkpoint_source));
  } else {
    if (f.checkpoint_cost.empty()) {
      return InvalidArgument(
          "--checkpoint-cost is required (or --model and --checkpoint-bandwidth)");
    }
    TENAX_ASSIGN_OR_RETURN(c.checkpoint_cost,
                           ParseDuration(f.checkpoint_cost, "--checkpoint-cost"));
  }
  TENAX_ASSIGN_OR_RETURN(c.restart_cost, ParseDuration(f.restart_cost, "--restart-cost"));
  TENAX_ASSIGN_OR_RETURN(c.detect_time, ParseDuration(f.detect_time, "--detect-time"));
  TENAX_ASSIGN_OR_RETURN(c.swap_time, ParseDuration(f.swap_time, "--swap-time"));
  TENAX_ASSIGN_OR_RETURN(c.repair_time, ParseDuration(f.repair_time, "--repair-time"));
  TENAX_ASSIGN_OR_RETURN(c.duration, ParseDuration(f.duration, "--duration"));
  c.spares = f.spares;
  c.replica_groups = f.replica_groups;
  TENAX_ASSIGN_OR_RETURN(c.heal_time, ParseDuration(f.heal_time, "--heal-time"));
  c.short_handed_share = f.short_handed_share;
  c.runs = f.runs;
  // Silent-data-corruption checks: their replays lengthen the computation, and count as time
  // lost in the effective training time (duration below stays the useful computation).
  TENAX_ASSIGN_OR_RETURN(const double sdc, ParseShare(f.sdc_overhead, "--sdc-overhead"));
  const double useful = c.duration;
  c.duration *= 1 + sdc;
  c.seed = f.seed;
  const double mtbf = JobMtbfSeconds(c.rate, c.nodes());
  const double young = YoungInterval(c.checkpoint_cost, mtbf);
  const double daly = DalyInterval(c.checkpoint_cost, mtbf);
  std::string interval_source;
  if (f.interval == "auto" || f.interval == "daly") {
    c.interval = daly;
    interval_source = "Daly";
  } else if (f.interval == "young") {
    c.interval = young;
    interval_source = "Young";
  } else {
    TENAX_ASSIGN_OR_RETURN(c.interval, ParseDuration(f.interval, "--interval"));
    interval_source = "given";
  }
  if (!std::isfinite(c.interval)) c.interval = c.duration;  // no failures: one checkpoint at most
  TENAX_ASSIGN_OR_RETURN(SimulationResult r, Simulate(c));
  Scale(&r.efficiency, 1 / (1 + sdc));
  // Live recovery is printed beside restart recovery of the same job.
  std::optional<SimulationResult> restart_only;
  if (c.replica_groups > 0) {
    SimulationConfig rc = c;
    rc.replica_groups = 0;
    TENAX_ASSIGN_OR_RETURN(restart_only, Simulate(rc));
    Scale(&restart_only->efficiency, 1 / (1 + sdc));
  }

  // Daly's closed form for the same job; a failure costs the restart plus the swap (or, without
  // spares, the repair wait), which Daly's model folds into one restart time.
  const double restart =
      c.detect_time + c.restart_cost + (c.spares > 0 ? c.swap_time : c.repair_time);
  const double analytic =
      DalyExpectedWallTime(c.duration, c.interval, c.checkpoint_cost, restart, mtbf);
  const double gpu_hour_price = f.price_per_gpu_hour;
  const double gpus = static_cast<double>(c.gpus);
  const double lost_cost = (r.wall.mean - useful) / kHour * gpus * gpu_hour_price;
  if (f.json) {
    nlohmann::json j = {
        {"gpus", c.gpus},
        {"nodes", c.nodes()},
        {"failure_rate_per_node_hour", c.rate.per_node_hour},
        {"mtbf_s", mtbf},
        {"observed_mtbf_s", r.observed_mtbf},
        {"interval_s", c.interval},
        {"interval_source", interval_source},
        {"young_interval_s", young},
        {"daly_interval_s", daly},
        {"duration_s", useful},
        {"sdc_overhead", sdc},
        {"runs", c.runs},
        {"seed", c.seed},
        {"wall_s", SummaryJson(r.wall)},
        {"effective", SummaryJson(r.efficiency)},
        {"failures", SummaryJson(r.failures)},
        {"lost_s", SummaryJson(r.lost)},
        {"checkpointing_s", SummaryJson(r.checkpointing)},
        {"restarting_s", SummaryJson(r.restarting)},
        {"waiting_s", SummaryJson(r.waiting)},
        {"daly_expected_wall_s", c.spares > 0 ? nlohmann::json(analytic) : nlohmann::json(nullptr)},
        {"lost_cost", lost_cost},
        {"recovery", c.replica_groups > 0 ? "live" : "restart"},
        {"replica_groups", c.replica_groups},
        {"heal_time_s", c.heal_time},
        {"short_handed_share", c.short_handed_share},
        {"short_handed_s", SummaryJson(r.short_handed)}};
    if (restart_only) {
      j["restart_recovery"] = {{"wall_s", SummaryJson(restart_only->wall)},
                               {"effective", SummaryJson(restart_only->efficiency)}};
    }
    if (!checkpoint_source.empty()) j["checkpoint_cost_from"] = checkpoint_source;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::string out = fmt::format(
      "tenax simulate: {} GPUs ({} nodes of {}), failure rate {:.3g} per node-hour ({})\n"
      "  job MTBF {}: {:.1f} failures expected in {} of computation\n"
      "  checkpoint every {} of computation ({}; Young {}, Daly {}), stall {}, detection {}, "
      "restart {}\n"
      "  spares {} (swap {}), repair {}\n\n"
      "over {} runs (seed {}):\n",
      c.gpus, c.nodes(), c.gpus_per_node, c.rate.per_node_hour, c.rate.text, FormatDuration(mtbf),
      c.duration / mtbf, FormatDuration(c.duration), FormatDuration(c.interval), interval_source,
      FormatDuration(young), FormatDuration(daly), FormatDuration(c.checkpoint_cost),
      FormatDuration(c.detect_time), FormatDuration(c.restart_cost), c.spares,
      FormatDuration(c.swap_time), FormatDuration(c.repair_time), c.runs, c.seed);
  if (!checkpoint_source.empty()) {
    out.insert(out.find("\n\nover"), "\n  checkpoint " + checkpoint_source);
  }
  out += Line("wall-clock time", r.wall, true);
  Summary pct = r.efficiency;
  for (double* v : {&pct.mean, &pct.ci_low, &pct.ci_high, &pct.p05, &pct.p95}) *v *= 100;
  out += Line("effective training %", pct, false);
  out += Line("failures", r.failures, false);
  out += Line("lost computation", r.lost, true);
  out += Line("checkpoint stalls", r.checkpointing, true);
  out +=
      Line(c.replica_groups > 0 ? "detection, restarts" : "restarts and swaps", r.restarting, true);
  out += Line("waiting for repairs", r.waiting, true);
  if (c.replica_groups > 0) out += Line("short-handed", r.short_handed, true);
  out += fmt::format("  observed MTBF          {:>10}\n", FormatDuration(r.observed_mtbf));
  if (sdc > 0) {
    out += fmt::format("  silent-data-corruption checks {:.1f}%: {} of replays\n", 100 * sdc,
                       FormatDuration(useful * sdc));
  }
  out += fmt::format("  time lost              {:>10}", FormatDuration(r.wall.mean - useful));
  if (gpu_hour_price > 0) {
    out += fmt::format(" = {} of {} at ${}/GPU-hour", FormatMoney(lost_cost),
                       FormatMoney(r.wall.mean / kHour * gpus * gpu_hour_price), gpu_hour_price);
  }
  if (restart_only) {
    out += fmt::format(
        "\n\nlive recovery ({} replica groups, heal {}): {:.2f}% effective; restart recovery of "
        "the same job: {:.2f}% ({} wall-clock, 5th-95th percentile {:.2f} - {:.2f}%)",
        c.replica_groups, FormatDuration(c.heal_time), 100 * r.efficiency.mean,
        100 * restart_only->efficiency.mean, FormatDuration(restart_only->wall.mean),
        100 * restart_only->efficiency.p05, 100 * restart_only->efficiency.p95);
  }
  out += fmt::format(
      "\n\nDaly (2006) closed form for the same job{}: {} expected wall-clock, {:.1f}% "
      "effective\n",
      c.replica_groups > 0 ? " with restart recovery" : "", FormatDuration(analytic),
      100 * useful / analytic);
  std::printf("%s", out.c_str());
  return Status::Ok();
}

}  // namespace tenax::plan
