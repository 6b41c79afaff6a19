#include "tenax/launch/goodput.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace tenax::launch {
namespace {

// Failures found at a resume (not ones that ended a generation).
bool EndsGeneration(const std::string& kind) { return kind != "corrupt-checkpoint"; }

}  // namespace

void Goodput::GenerationStarted(int generation, double now) {
  Generation g;
  g.generation = generation;
  g.start_s = now;
  generations_.push_back(g);
}

void Goodput::LeadBeat(const Beat& beat, double now, double wall_now) {
  if (generations_.empty()) return;
  Generation& g = generations_.back();
  if (beat.generation != g.generation) return;  // a stale file
  const double at = now - std::max(0.0, wall_now - beat.wall_s);
  if (!beat.run_dir.empty()) run_dir_ = beat.run_dir;
  if (g.ready_s < 0) {
    // A missed "ready" beat: step back over the work this process has reported since.
    g.ready_s = beat.phase == "ready" ? at : at - beat.steps_s - beat.checkpoint_s;
    g.ready_s = std::max(g.ready_s, g.start_s);
    g.resume_step = beat.resume_step;
    for (FailureRecord& f : failures_) {
      if (f.recovery_s < 0 && f.generation < g.generation && EndsGeneration(f.kind)) {
        f.recovery_s = g.ready_s - f.time_s;
        f.resumed_from = beat.resume_step;
      }
    }
    if (beat.set_aside > 0) {
      FailureRecord f;
      f.time_s = g.ready_s;
      f.generation = g.generation;
      f.rank = 0;
      f.host = beat.host;
      f.kind = "corrupt-checkpoint";
      f.cause = fmt::format("the resume skipped {} committed checkpoint(s) newer than step {} "
                            "that did not verify (moved aside)",
                            beat.set_aside, beat.resume_step);
      f.step = beat.resume_step;
      f.recovery_s = 0;  // the fall-back is part of the resume already counted as restart
      f.resumed_from = beat.resume_step;
      failures_.push_back(f);
    }
  }
  if (beat.phase != "ready" && beat.step > g.last_step) {
    g.last_step = beat.step;
    g.last_step_at = at;
  }
  g.steps_s = beat.steps_s;
  g.checkpoint_s = beat.checkpoint_s;
  if (beat.tokens_per_s > 0) tokens_per_s_ = beat.tokens_per_s;
}

void Goodput::GenerationEnded(double now, int exit_code) {
  if (generations_.empty()) return;
  generations_.back().end_s = now;
  generations_.back().exit_code = exit_code;
}

void Goodput::AddFailure(FailureRecord failure) {
  if (failure.step < 0 && !generations_.empty()) {
    failure.step = std::max(generations_.back().last_step, generations_.back().resume_step);
  }
  failures_.push_back(std::move(failure));
}

int64_t Goodput::step() const {
  int64_t s = 0;
  for (const Generation& g : generations_) s = std::max({s, g.last_step, g.resume_step});
  return s;
}

nlohmann::json Goodput::Report(double wall, int exit_code) const {
  double productive = 0, checkpoint = 0, lost = 0, detection = 0, restart = 0;
  int64_t redone = 0;
  nlohmann::json gens = nlohmann::json::array();
  for (size_t i = 0; i < generations_.size(); ++i) {
    const Generation& g = generations_[i];
    const double end = g.end_s >= 0 ? g.end_s : wall;
    const FailureRecord* failure = nullptr;
    for (const FailureRecord& f : failures_) {
      if (f.generation == g.generation && EndsGeneration(f.kind)) failure = &f;
    }
    if (i > 0) {
      const Generation& prev = generations_[i - 1];
      double detected = prev.end_s >= 0 ? prev.end_s : end;
      for (const FailureRecord& f : failures_) {
        if (f.generation == prev.generation && EndsGeneration(f.kind)) detected = f.time_s;
      }
      restart += std::max(0.0, (g.ready_s >= 0 ? g.ready_s : end) - detected);
    }
    if (g.ready_s >= 0 && g.last_step > g.resume_step) {
      int64_t kept_until = g.last_step;
      for (size_t j = i + 1; j < generations_.size(); ++j) {
        if (generations_[j].ready_s >= 0) kept_until = std::min(kept_until, generations_[j].resume_step);
      }
      const int64_t n = g.last_step - g.resume_step;
      const int64_t r = std::clamp<int64_t>(g.last_step - kept_until, 0, n);
      redone += r;
      productive += g.steps_s * static_cast<double>(n - r) / static_cast<double>(n);
      lost += g.steps_s * static_cast<double>(r) / static_cast<double>(n);
    }
    checkpoint += g.checkpoint_s;
    if (failure != nullptr) {
      detection += failure->detection_s;
      // The step in flight when the rank failed was lost too.
      const double since = std::max(g.ready_s, g.last_step_at);
      if (g.ready_s >= 0) lost += std::max(0.0, failure->time_s - failure->detection_s - since);
    }
    gens.push_back({{"generation", g.generation},
                    {"start_s", g.start_s},
                    {"ready_s", g.ready_s},
                    {"end_s", g.end_s},
                    {"resume_step", g.resume_step},
                    {"last_step", g.last_step},
                    {"steps_s", g.steps_s},
                    {"checkpoint_s", g.checkpoint_s},
                    {"exit_code", g.exit_code}});
  }
  const double idle = std::max(0.0, wall - productive - checkpoint - lost - detection - restart);
  nlohmann::json failures = nlohmann::json::array();
  std::map<std::string, int> by_kind;
  for (const FailureRecord& f : failures_) {
    ++by_kind[f.kind];
    failures.push_back({{"time_s", f.time_s},
                        {"generation", f.generation},
                        {"rank", f.rank},
                        {"slot", f.slot},
                        {"host", f.host},
                        {"kind", f.kind},
                        {"cause", f.cause},
                        {"exit_code", f.exit_code},
                        {"step", f.step},
                        {"detection_s", f.detection_s},
                        {"recovery_s", f.recovery_s},
                        {"resumed_from", f.resumed_from},
                        {"replacement_slot", f.replacement_slot}});
  }
  return {{"wall_s", wall},
          {"exit_code", exit_code},
          {"restarts", restarts()},
          {"step", step()},
          {"tokens_per_s", tokens_per_s_},
          {"effective_training_ratio", wall > 0 ? productive / wall : 0.0},
          {"time_s",
           {{"productive", productive},
            {"checkpoint", checkpoint},
            {"lost", lost},
            {"detection", detection},
            {"restart", restart},
            {"idle", idle}}},
          {"steps_redone", redone},
          {"failures_by_kind", by_kind},
          {"failures", failures},
          {"stragglers", stragglers_},
          {"loss_spikes", loss_spikes_},
          {"generations", gens}};
}

std::string Goodput::Summary(const nlohmann::json& r) {
  const double wall = r["wall_s"].get<double>();
  auto row = [&](const char* name, const char* key) {
    const double s = r["time_s"][key].get<double>();
    return fmt::format("  {:<22} {:8.1f} s {:6.1f} %\n", name, s, wall > 0 ? 100 * s / wall : 0.0);
  };
  std::string out = fmt::format("goodput: wall time {:.1f} s, {} restart(s), final step {}\n",
                                wall, r["restarts"].get<int>(), r["step"].get<int64_t>());
  out += row("productive training", "productive");
  out += row("checkpoint stalls", "checkpoint");
  out += row("lost work (redone)", "lost");
  out += row("failure detection", "detection");
  out += row("restart", "restart");
  out += row("idle / other", "idle");
  out += fmt::format("  effective training time ratio {:.3f} ({} step(s) redone)\n",
                     r["effective_training_ratio"].get<double>(), r["steps_redone"].get<int64_t>());
  if (!r["failures"].empty()) {
    out += "  interruptions by kind:";
    for (const auto& [kind, n] : r["failures_by_kind"].items()) {
      out += fmt::format(" {} {}", kind, n.get<int>());
    }
    out += fmt::format("\n  {:>7} {:>4} {:>5} {:>5} {:<20} {:>10} {:>10}  cause\n", "time_s",
                       "gen", "rank", "slot", "kind", "detect_s", "recover_s");
    for (const auto& f : r["failures"]) {
      out += fmt::format("  {:7.1f} {:4} {:5} {:5} {:<20} {:10.2f} {:10.2f}  {}\n",
                         f["time_s"].get<double>(), f["generation"].get<int>(),
                         f["rank"].get<int>(), f["slot"].get<int>(),
                         f["kind"].get<std::string>(), f["detection_s"].get<double>(),
                         f["recovery_s"].get<double>(), f["cause"].get<std::string>());
    }
  }
  for (const auto& s : r["stragglers"]) {
    out += fmt::format("  straggler: rank {} on {} (compute {:.3f}s vs median {:.3f}s at step {})\n",
                       s["rank"].get<int>(), s["host"].get<std::string>(),
                       s["compute_s"].get<double>(), s["median_s"].get<double>(),
                       s["step"].get<int64_t>());
  }
  for (const auto& s : r.value("loss_spikes", nlohmann::json::array())) {
    out += fmt::format("  loss spike: step {} loss {:.4g} vs median {:.4g} ({})\n",
                       s.value("step", int64_t{0}), s.value("loss", 0.0), s.value("median", 0.0),
                       s.value("action", std::string()));
  }
  return out;
}

}  // namespace tenax::launch
