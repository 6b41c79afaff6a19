#include "tenax/launch/goodput.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace tenax::launch {
namespace {

using protocol::FailureKind;
using protocol::FailureKindName;

// Failures found at a resume (not ones that ended a generation).
bool EndsGeneration(const std::string& kind) {
  return kind != FailureKindName(FailureKind::kCorruptCheckpoint);
}

template <typename T>
T Get(const nlohmann::json& j, const char* key, T fallback) {
  return j.is_object() ? j.value(key, fallback) : fallback;
}

}  // namespace

Goodput::Goodput(double start_unix, const nlohmann::json* previous, std::string host, int pid)
    : run_start_unix_(start_unix) {
  if (previous != nullptr && previous->is_object() && previous->contains("segments") &&
      (*previous)["segments"].is_array() && !(*previous)["segments"].empty()) {
    Load(*previous);
  }
  segment_ = static_cast<int>(segments_.size());
  Segment s;
  s.start_unix = start_unix;
  s.end_unix = start_unix;
  s.pid = pid;
  s.host = std::move(host);
  segments_.push_back(s);
  offset_s_ = start_unix - run_start_unix_;
}

void Goodput::Load(const nlohmann::json& prev) {
  for (const auto& s : prev["segments"]) {
    Segment seg;
    seg.start_unix = Get(s, "start_unix", 0.0);
    seg.end_unix = Get(s, "end_unix", seg.start_unix);
    seg.ended = Get(s, "ended", true);
    seg.exit_code = Get(s, "exit_code", 0);
    seg.pid = Get(s, "pid", 0);
    seg.host = Get(s, "host", std::string());
    segments_.push_back(seg);
  }
  run_start_unix_ = segments_.front().start_unix;
  for (const auto& g : prev.value("generations", nlohmann::json::array())) {
    Generation x;
    x.segment = Get(g, "segment", 0);
    x.generation = Get(g, "generation", 0);
    x.start_s = Get(g, "start_s", 0.0);
    x.ready_s = Get(g, "ready_s", -1.0);
    x.end_s = Get(g, "end_s", -1.0);
    x.resume_step = Get(g, "resume_step", int64_t{-1});
    x.last_step = Get(g, "last_step", int64_t{-1});
    x.last_step_at = Get(g, "last_step_at", -1.0);
    x.steps_s = Get(g, "steps_s", 0.0);
    x.checkpoint_s = Get(g, "checkpoint_s", 0.0);
    x.exit_code = Get(g, "exit_code", 0);
    generations_.push_back(x);
  }
  for (const auto& f : prev.value("failures", nlohmann::json::array())) {
    FailureRecord r;
    r.time_s = Get(f, "time_s", 0.0);
    r.segment = Get(f, "segment", 0);
    r.generation = Get(f, "generation", 0);
    r.rank = Get(f, "rank", -1);
    r.node = Get(f, "node", -1);
    r.slot = Get(f, "slot", -1);
    r.host = Get(f, "host", std::string());
    r.kind = Get(f, "kind", std::string("crash"));
    r.cause = Get(f, "cause", std::string());
    r.exit_code = Get(f, "exit_code", 0);
    r.step = Get(f, "step", int64_t{-1});
    r.detection_s = Get(f, "detection_s", 0.0);
    r.recovery_s = Get(f, "recovery_s", -1.0);
    r.resumed_from = Get(f, "resumed_from", int64_t{-1});
    r.replacement_slot = Get(f, "replacement_slot", -1);
    r.scheduled = Get(f, "scheduled", -1);
    failures_.push_back(r);
  }
  stragglers_ = prev.value("stragglers", nlohmann::json::array());
  exit_faults_ = prev.value("exit_faults", nlohmann::json::array());
  live_recoveries_ = prev.value("live_recoveries", nlohmann::json::array());
  tokens_per_s_ = prev.value("tokens_per_s", 0.0);
  run_dir_ = prev.value("run_dir", std::string());
  Segment& last = segments_.back();
  if (!last.ended) {
    // Its launcher died without closing the segment: the job stopped when it was last alive.
    const int last_segment = static_cast<int>(segments_.size()) - 1;
    FailureRecord f;
    f.time_s = last.end_unix - run_start_unix_;
    f.segment = last_segment;
    for (const Generation& g : generations_) {
      if (g.segment == last_segment) {
        f.generation = g.generation;
        f.step = std::max(g.last_step, g.resume_step);
      }
    }
    f.host = last.host;
    f.kind = FailureKindName(FailureKind::kLauncherLost);
    f.cause = fmt::format(
        "the launcher (pid {} on {}) stopped without closing its run; its ranks "
        "died with it",
        last.pid, last.host);
    f.exit_code = -1;
    failures_.push_back(f);
    for (Generation& g : generations_) {
      if (g.segment == last_segment && g.end_s < 0) g.end_s = f.time_s;
    }
    last.ended = true;
    last.exit_code = -1;
  }
}

void Goodput::GenerationStarted(int generation, double now) {
  Generation g;
  g.segment = segment_;
  g.generation = generation;
  g.start_s = Run(now);
  generations_.push_back(g);
}

void Goodput::LeadBeat(const Beat& beat, double now, double wall_now) {
  if (generations_.empty()) return;
  Generation& g = generations_.back();
  if (g.segment != segment_ || beat.generation != g.generation) return;  // a stale file
  const double at = Run(now) - std::max(0.0, wall_now - beat.wall_s);
  if (!beat.run_dir.empty()) run_dir_ = beat.run_dir;
  if (g.ready_s < 0) {
    // A missed "ready" beat: step back over the work this process has reported since.
    g.ready_s = beat.phase == protocol::Phase::kReady ? at : at - beat.steps_s - beat.checkpoint_s;
    g.ready_s = std::max(g.ready_s, g.start_s);
    g.resume_step = beat.resume_step;
    for (FailureRecord& f : failures_) {
      const bool before =
          f.segment < g.segment || (f.segment == g.segment && f.generation < g.generation);
      if (f.recovery_s < 0 && before && EndsGeneration(f.kind)) {
        f.recovery_s = g.ready_s - f.time_s;
        f.resumed_from = beat.resume_step;
      }
    }
    if (beat.set_aside > 0) {
      FailureRecord f;
      f.time_s = g.ready_s;
      f.segment = segment_;
      f.generation = g.generation;
      f.rank = 0;
      f.host = beat.host;
      f.kind = FailureKindName(FailureKind::kCorruptCheckpoint);
      f.cause = fmt::format(
          "the resume skipped {} committed checkpoint(s) newer than step {} "
          "that did not verify (moved aside)",
          beat.set_aside, beat.resume_step);
      f.step = beat.resume_step;
      f.recovery_s = 0;  // the fall-back is part of the resume already counted as restart
      f.resumed_from = beat.resume_step;
      failures_.push_back(f);
    }
  }
  if (beat.phase != protocol::Phase::kReady && beat.step > g.last_step) {
    g.last_step = beat.step;
    g.last_step_at = at;
  }
  // Never backwards: with live recovery the lead may become another process of the same
  // generation (supervisor_live.cc), whose counters cover less.
  g.steps_s = std::max(g.steps_s, beat.steps_s);
  g.checkpoint_s = std::max(g.checkpoint_s, beat.checkpoint_s);
  if (beat.tokens_per_s > 0) tokens_per_s_ = beat.tokens_per_s;
}

void Goodput::GenerationEnded(double now, int exit_code) {
  if (generations_.empty() || generations_.back().segment != segment_) return;
  generations_.back().end_s = Run(now);
  generations_.back().exit_code = exit_code;
}

void Goodput::AddFailure(FailureRecord failure) {
  failure.time_s = Run(failure.time_s);
  failure.segment = segment_;
  if (failure.step < 0 && !generations_.empty()) {
    failure.step = std::max(generations_.back().last_step, generations_.back().resume_step);
  }
  failures_.push_back(std::move(failure));
}

void Goodput::SetFaultSchedule(nlohmann::json schedule) {
  for (auto& a : schedule["injected"]) a["time_s"] = Run(a["time_s"].get<double>());
  schedule["segment"] = segment_;
  fault_schedule_ = std::move(schedule);
}

void Goodput::AddStraggler(nlohmann::json straggler) {
  if (straggler.contains("time_s")) straggler["time_s"] = Run(straggler["time_s"].get<double>());
  straggler["segment"] = segment_;
  stragglers_.push_back(std::move(straggler));
}

void Goodput::AddExitFault(nlohmann::json fault) {
  if (fault.contains("time_s")) fault["time_s"] = Run(fault["time_s"].get<double>());
  fault["segment"] = segment_;
  exit_faults_.push_back(std::move(fault));
}

void Goodput::DropLiveRecovery(int index) {
  if (index < 0 || index >= static_cast<int>(live_recoveries_.size())) return;
  live_recoveries_.erase(static_cast<size_t>(index));
}

int Goodput::AddLiveRecovery(nlohmann::json r, int index) {
  for (const char* key : {"time_s", "ready_at_s", "healed_at_s"}) {
    // -1: not yet (healed_at_s)
    if (r.contains(key) && r[key].is_number() && r[key].get<double>() >= 0) {
      r[key] = Run(r[key].get<double>());
    }
  }
  r["segment"] = segment_;
  if (index >= 0 && index < static_cast<int>(live_recoveries_.size())) {
    live_recoveries_[static_cast<size_t>(index)] = std::move(r);
    return index;
  }
  live_recoveries_.push_back(std::move(r));
  return static_cast<int>(live_recoveries_.size()) - 1;
}

int Goodput::restarts() const {
  int n = 0;
  for (size_t i = 1; i < generations_.size(); ++i) {
    n += generations_[i].segment == generations_[i - 1].segment;
  }
  return n;
}

int64_t Goodput::step() const {
  int64_t s = 0;
  for (const Generation& g : generations_) s = std::max({s, g.last_step, g.resume_step});
  return s;
}

nlohmann::json Goodput::Report(double now, int exit_code, bool ended) const {
  const double wall = Run(now);
  double productive = 0, checkpoint = 0, lost = 0, detection = 0, restart = 0, down = 0;
  int64_t redone = 0;
  nlohmann::json segs = nlohmann::json::array();
  for (size_t i = 0; i < segments_.size(); ++i) {
    Segment s = segments_[i];
    if (static_cast<int>(i) == segment_) {
      s.end_unix = run_start_unix_ + wall;
      s.ended = ended;
      s.exit_code = exit_code;
    }
    if (i > 0) down += std::max(0.0, s.start_unix - segments_[i - 1].end_unix);
    segs.push_back({{"start_unix", s.start_unix},
                    {"end_unix", s.end_unix},
                    {"ended", s.ended},
                    {"exit_code", s.exit_code},
                    {"pid", s.pid},
                    {"host", s.host}});
  }
  auto failure_of = [&](const Generation& g) -> const FailureRecord* {
    const FailureRecord* out = nullptr;
    for (const FailureRecord& f : failures_) {
      if (f.segment == g.segment && f.generation == g.generation && EndsGeneration(f.kind)) {
        out = &f;
      }
    }
    return out;
  };
  nlohmann::json gens = nlohmann::json::array();
  for (size_t i = 0; i < generations_.size(); ++i) {
    const Generation& g = generations_[i];
    const double end = g.end_s >= 0 ? g.end_s : wall;
    const FailureRecord* failure = failure_of(g);
    if (i > 0) {
      const Generation& prev = generations_[i - 1];
      const double ready = g.ready_s >= 0 ? g.ready_s : end;
      if (prev.segment == g.segment) {
        const FailureRecord* pf = failure_of(prev);
        const double detected = pf ? pf->time_s : (prev.end_s >= 0 ? prev.end_s : end);
        restart += std::max(0.0, ready - detected);
      } else {
        // A new launch: from its start until it trains again (the gap before it is down time).
        restart += std::max(0.0, ready - (segments_[g.segment].start_unix - run_start_unix_));
      }
    }
    if (g.ready_s >= 0 && g.last_step > g.resume_step) {
      int64_t kept_until = g.last_step;
      for (size_t j = i + 1; j < generations_.size(); ++j) {
        if (generations_[j].ready_s >= 0) {
          kept_until = std::min(kept_until, generations_[j].resume_step);
        }
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
    gens.push_back({{"segment", g.segment},
                    {"generation", g.generation},
                    {"start_s", g.start_s},
                    {"ready_s", g.ready_s},
                    {"end_s", g.end_s},
                    {"resume_step", g.resume_step},
                    {"last_step", g.last_step},
                    {"last_step_at", g.last_step_at},
                    {"steps_s", g.steps_s},
                    {"checkpoint_s", g.checkpoint_s},
                    {"exit_code", g.exit_code}});
  }
  const double idle =
      std::max(0.0, wall - productive - checkpoint - lost - detection - restart - down);
  nlohmann::json failures = nlohmann::json::array();
  std::map<std::string, int> by_kind;
  for (const FailureRecord& f : failures_) {
    ++by_kind[f.kind];
    failures.push_back({{"time_s", f.time_s},
                        {"segment", f.segment},
                        {"generation", f.generation},
                        {"rank", f.rank},
                        {"node", f.node},
                        {"slot", f.slot},
                        {"host", f.host},
                        {"kind", f.kind},
                        {"cause", f.cause},
                        {"exit_code", f.exit_code},
                        {"step", f.step},
                        {"detection_s", f.detection_s},
                        {"recovery_s", f.recovery_s},
                        {"resumed_from", f.resumed_from},
                        {"replacement_slot", f.replacement_slot},
                        {"scheduled", f.scheduled}});
  }
  return {{"format", "tenax-goodput"},
          {"version", 2},
          {"run_dir", run_dir_},
          {"wall_s", wall},
          {"exit_code", exit_code},
          {"restarts", restarts()},
          {"launches", segments_.size()},
          {"step", step()},
          {"tokens_per_s", tokens_per_s_},
          {"effective_training_ratio", wall > 0 ? productive / wall : 0.0},
          {"time_s",
           {{"productive", productive},
            {"checkpoint", checkpoint},
            {"lost", lost},
            {"detection", detection},
            {"restart", restart},
            {"down", down},
            {"idle", idle}}},
          {"steps_redone", redone},
          {"failures_by_kind", by_kind},
          {"failures", failures},
          {"stragglers", stragglers_},
          {"exit_faults", exit_faults_},
          {"live_recoveries", live_recoveries_},
          {"loss_spikes", loss_spikes_},
          {"sdc", sdc_},
          {"fault_schedule", fault_schedule_},
          {"generations", gens},
          {"segments", segs}};
}

std::string Goodput::Summary(const nlohmann::json& r) {
  const double wall = r["wall_s"].get<double>();
  auto row = [&](const char* name, const char* key) {
    const double s = r["time_s"][key].get<double>();
    return fmt::format("  {:<22} {:8.1f} s {:6.1f} %\n", name, s, wall > 0 ? 100 * s / wall : 0.0);
  };
  const size_t launches = r.value("launches", size_t{1});
  std::string out =
      fmt::format("goodput: wall time {:.1f} s{}, {} restart(s), final step {}\n", wall,
                  launches > 1 ? fmt::format(" over {} launches", launches) : "",
                  r["restarts"].get<int>(), r["step"].get<int64_t>());
  out += row("productive training", "productive");
  out += row("checkpoint stalls", "checkpoint");
  out += row("lost work (redone)", "lost");
  out += row("failure detection", "detection");
  out += row("restart", "restart");
  if (launches > 1) out += row("down (no launcher)", "down");
  out += row("idle / other", "idle");
  out += fmt::format("  effective training time ratio {:.3f} ({} step(s) redone)\n",
                     r["effective_training_ratio"].get<double>(), r["steps_redone"].get<int64_t>());
  if (!r["failures"].empty()) {
    out += "  interruptions by kind:";
    for (const auto& [kind, n] : r["failures_by_kind"].items()) {
      out += fmt::format(" {} {}", kind, n.get<int>());
    }
    out += fmt::format("\n  {:>7} {:>4} {:>5} {:>5} {:<20} {:>10} {:>10}  cause\n", "time_s", "gen",
                       "rank", "slot", "kind", "detect_s", "recover_s");
    for (const auto& f : r["failures"]) {
      out += fmt::format("  {:7.1f} {:4} {:5} {:5} {:<20} {:10.2f} {:10.2f}  {}\n",
                         f["time_s"].get<double>(), f["generation"].get<int>(),
                         f["rank"].get<int>(), f["slot"].get<int>(), f["kind"].get<std::string>(),
                         f["detection_s"].get<double>(), f["recovery_s"].get<double>(),
                         f["cause"].get<std::string>());
    }
  }
  for (const auto& s : r["stragglers"]) {
    out +=
        fmt::format("  straggler: rank {} on {} (compute {:.3f}s vs median {:.3f}s at step {})\n",
                    s.value("rank", -1), s.value("host", std::string()), s.value("compute_s", 0.0),
                    s.value("median_s", 0.0), s.value("step", int64_t{0}));
  }
  for (const auto& f : r.value("exit_faults", nlohmann::json::array())) {
    out += fmt::format("  after finishing: rank {} on {} (step {}): {}, {}\n", f.value("rank", -1),
                       f.value("host", std::string()), f.value("step", int64_t{0}),
                       f.value("kind", std::string()), f.value("detail", std::string()));
  }
  for (const auto& l : r.value("live_recoveries", nlohmann::json::array())) {
    out += fmt::format(
        "  live recovery: rank {} {} at step {}; the other {} rank(s) trained on{}\n",
        l.value("rank", -1), l.value("kind", std::string()), l.value("step", int64_t{0}),
        l.value("members", nlohmann::json::array()).size(),
        l.value("healed_at_s", -1.0) >= 0
            ? fmt::format(", healed {:.2f}s later{} from rank {} ({} bytes)",
                          l.value("healed_at_s", 0.0) - l.value("time_s", 0.0),
                          l.value("ready_at_s", -1.0) >= 0
                              ? fmt::format(" (its replacement ready after {:.2f}s)",
                                            l.value("ready_at_s", 0.0) - l.value("time_s", 0.0))
                              : "",
                          l.value("healed_from", -1), l.value("healed_bytes", int64_t{0}))
            : "");
  }
  for (const auto& d : r.value("sdc", nlohmann::json::array())) {
    const int rank = d.value("rank", -1);
    out += fmt::format(
        "  silent data corruption at step {}: {} (own {}; replayed by rank {}: {}; by rank {}: "
        "{})\n",
        d.value("step", int64_t{0}),
        rank >= 0 ? fmt::format("rank {} on {} computed wrong results", rank,
                                d.value("host", std::string("?")))
                  : std::string("no rank could be named"),
        d.value("own", std::string()), d.value("replayed_by", -1), d.value("replay", std::string()),
        d.value("third_by", -1), d.value("third", std::string()));
  }
  for (const auto& s : r.value("loss_spikes", nlohmann::json::array())) {
    out += fmt::format("  loss spike: step {} loss {:.4g} vs median {:.4g} ({})\n",
                       s.value("step", int64_t{0}), s.value("loss", 0.0), s.value("median", 0.0),
                       s.value("action", std::string()));
  }
  return out;
}

void CloseHealedLiveRecovery(const protocol::Beat& healed, int joined_epoch, double healed_at_s,
                             nlohmann::json* e) {
  nlohmann::json& r = *e;
  r["healed_at_s"] = healed_at_s;
  r["healed_from"] = healed.healed_from;
  r["healed_bytes"] = healed.healed_bytes;
  r["transfer_s"] = healed.healed_s;
  r["joined_epoch"] = joined_epoch;
  r["joined_at_step"] = healed.healed_step;
  r["steps_short_handed"] = healed.healed_step - r.at("step").get<int64_t>();
}

}  // namespace tenax::launch
