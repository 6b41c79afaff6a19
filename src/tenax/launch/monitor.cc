#include "tenax/launch/monitor.h"

#include <fmt/format.h>

#include <chrono>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/report/live.h"
#include "tenax/report/run_data.h"

namespace tenax::launch {
namespace {

double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
double UnixNow() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<std::unique_ptr<Monitor>> Monitor::Start(const std::string& status_file,
                                                const std::string& addr, int port) {
  std::unique_ptr<Monitor> m(new Monitor(status_file));
  if (port > 0) {
    Monitor* self = m.get();
    TENAX_ASSIGN_OR_RETURN(m->server_, report::HttpServer::Start(
                                           addr, port,
                                           [self](const std::string& path) {
                                             std::lock_guard<std::mutex> lock(self->mu_);
                                             return report::ServeLive(path, self->status_);
                                           },
                                           "--metrics-port"));
    log::Info("launch: live page at http://{}:{}/ (Prometheus metrics at /metrics)", addr, port);
  }
  return m;
}

Monitor::Monitor(std::string status_file) : status_file_(std::move(status_file)) {}

Monitor::~Monitor() { server_.reset(); }

nlohmann::json Monitor::Complete(nlohmann::json s, const nlohmann::json& training,
                                 double now_unix) {
  s["source"] = "tenax launch";
  s["now_unix"] = now_unix;
  const nlohmann::json& g = s.contains("goodput") ? s["goodput"] : nlohmann::json();
  if (g.is_object() && g.contains("segments") && !g["segments"].empty()) {
    s["run_start_unix"] = g["segments"][0].value("start_unix", 0.0);
  }
  if (!training.is_object() || training.empty()) return s;
  s["training"] = training;
  // Tokens processed by this launch: every step its generations ran, redone ones included, so
  // the counter never goes down (the trajectory's token count does, after a rollback).
  const int64_t step = training.value("step", int64_t{0});
  const int64_t tokens = training.value("tokens", int64_t{0});
  if (step > 0 && g.is_object() && g.contains("generations")) {
    const int segment = static_cast<int>(g.value("segments", nlohmann::json::array()).size()) - 1;
    int64_t steps = 0;
    for (const auto& gen : g["generations"]) {
      if (gen.value("segment", 0) != segment) continue;
      steps += std::max<int64_t>(
          0, gen.value("last_step", int64_t{-1}) - gen.value("resume_step", int64_t{-1}));
    }
    s["tokens_total"] = steps * (tokens / step);
  }
  return s;
}

void Monitor::Update(const nlohmann::json& status, bool force) {
  if (!server_ && status_file_.empty()) return;
  const std::string run_dir =
      status.contains("goodput") ? status["goodput"].value("run_dir", std::string()) : "";
  if (!run_dir.empty() && (force || Now() - last_training_read_ >= 1.0)) {
    last_training_read_ = Now();
    training_ = report::ReadLiveTraining(run_dir);
  }
  const nlohmann::json full = Complete(status, training_, UnixNow());
  // The page first, then the file: whoever reads the file and then asks the page never gets an
  // older status from the page (a test that did, between the file's rename and this update, saw
  // a checkpoint in the file that the page did not have yet).
  if (server_) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = full;
  }
  if (!status_file_.empty() && (force || Now() - last_write_ >= 1.0)) {
    last_write_ = Now();
    Status st = LocalFs().WriteFileAtomic(status_file_, full.dump(2) + "\n");
    if (!st.ok()) log::Warn("launch: cannot write the status file: {}", st.message());
  }
}

}  // namespace tenax::launch
