#include "tenax/protocol/heartbeat.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tenax::protocol {
namespace {

constexpr size_t kRecentSteps = 16;  // enough for the launcher's 4 polls per second to miss none

void WriteBeatFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

std::optional<Beat> ReadHeartbeat(const std::string& dir, int rank) {
  std::ifstream in(HeartbeatPath(dir, rank));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("step")) return std::nullopt;
  Beat b;
  b.step = j.value("step", int64_t{0});
  b.wall_s = j.value("wall_s", 0.0);
  b.phase = ParsePhase(j.value("phase", std::string("train"))).value_or(Phase::kTrain);
  b.generation = j.value("generation", 0);
  b.pid = j.value("pid", 0);
  b.host = j.value("host", std::string());
  b.writing_checkpoint = j.value("writing_checkpoint", int64_t{-1});
  b.work = j.value("work", int64_t{0});
  b.resume_step = j.value("resume_step", int64_t{0});
  b.set_aside = j.value("set_aside", 0);
  b.run_dir = j.value("run_dir", std::string());
  b.steps_s = j.value("steps_s", 0.0);
  b.checkpoint_s = j.value("checkpoint_s", 0.0);
  b.step_s = j.value("step_s", 0.0);
  b.compute_s = j.value("compute_s", 0.0);
  b.tokens_per_s = j.value("tokens_per_s", 0.0);
  b.live_epoch = j.value("live_epoch", -1);
  b.healed_bytes = j.value("healed_bytes", int64_t{0});
  b.healed_s = j.value("healed_s", 0.0);
  b.healed_from = j.value("healed_from", -1);
  b.healed_step = j.value("healed_step", int64_t{-1});
  if (j.contains("recent") && j["recent"].is_array()) {
    for (const auto& r : j["recent"]) {
      if (r.is_array() && r.size() == 2) {
        b.recent.emplace_back(r[0].get<int64_t>(), r[1].get<double>());
      }
    }
  }
  return b;
}

HeartbeatWriter::HeartbeatWriter(std::string dir, int rank, int generation)
    : rank_(rank), dir_(std::move(dir)) {
  if (dir_.empty()) return;
  beat_.generation = generation;
  beat_.pid = static_cast<int>(::getpid());
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) beat_.host = host;
}

void HeartbeatWriter::Ready(int64_t resume_step, int set_aside, const std::string& run_dir) {
  beat_.run_dir = run_dir;
  beat_.resume_step = resume_step;
  beat_.set_aside = set_aside;
  Write(resume_step, Phase::kReady);
}

void HeartbeatWriter::StepDone(int64_t step, double step_s, double compute_s, double tokens_per_s) {
  beat_.steps_s += step_s;
  beat_.step_s = step_s;
  beat_.compute_s = compute_s;
  beat_.tokens_per_s = tokens_per_s;
  recent_.emplace_back(step, compute_s);
  if (recent_.size() > kRecentSteps) recent_.pop_front();
  Write(step, Phase::kTrain);
}

void HeartbeatWriter::CheckpointBegin(int64_t step) { Write(step, Phase::kCheckpoint); }

void HeartbeatWriter::EvalProgress(int64_t step) {
  ++beat_.work;
  if (last_phase_ != Phase::kEval || MonotonicNow() - last_write_s_ >= 0.2) {
    Write(step, Phase::kEval);
  }
}

void HeartbeatWriter::CheckpointDone(int64_t step, double seconds) {
  beat_.checkpoint_s += seconds;
  Write(step, Phase::kTrain);
}

void HeartbeatWriter::NonFinite(int64_t step) { Write(step, Phase::kNonFinite); }

void HeartbeatWriter::LossSpike(int64_t step) { Write(step, Phase::kLossSpike); }

void HeartbeatWriter::Finished(int64_t step) { Write(step, Phase::kFinish); }

void HeartbeatWriter::Refresh() { Write(last_step_, last_phase_); }

void HeartbeatWriter::Write(int64_t step, Phase phase) {
  if (dir_.empty()) return;
  last_step_ = step;
  last_phase_ = phase;
  last_write_s_ = MonotonicNow();
  nlohmann::json recent = nlohmann::json::array();
  for (const auto& [s, c] : recent_) recent.push_back({s, c});
  const nlohmann::json j = {{"step", step},
                            {"wall_s", WallNow()},
                            {"phase", PhaseName(phase)},
                            {"generation", beat_.generation},
                            {"writing_checkpoint", beat_.writing_checkpoint},
                            {"work", beat_.work},
                            {"pid", beat_.pid},
                            {"host", beat_.host},
                            {"resume_step", beat_.resume_step},
                            {"set_aside", beat_.set_aside},
                            {"run_dir", beat_.run_dir},
                            {"steps_s", beat_.steps_s},
                            {"checkpoint_s", beat_.checkpoint_s},
                            {"step_s", beat_.step_s},
                            {"compute_s", beat_.compute_s},
                            {"tokens_per_s", beat_.tokens_per_s},
                            {"recent", recent},
                            {"live_epoch", beat_.live_epoch},
                            {"healed_bytes", beat_.healed_bytes},
                            {"healed_s", beat_.healed_s},
                            {"healed_from", beat_.healed_from},
                            {"healed_step", beat_.healed_step}};
  WriteBeatFile(HeartbeatPath(dir_, rank_), j.dump() + "\n");
}

}  // namespace tenax::protocol
