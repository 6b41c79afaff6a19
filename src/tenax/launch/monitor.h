// Live state of a launch for monitoring: `--status-file PATH` (the status JSON, rewritten
// atomically at most once a second) and `--metrics-port P` on `--metrics-addr A` (default
// 127.0.0.1): the live page at /, the status at /status.json and Prometheus metrics at /metrics
// (report/live.h), served by a small HTTP server on its own thread (report/http_server.h).
// The status the supervision loop publishes (docs/launcher_protocol.md) is completed here with
// the training series of the run folder (the tail of metrics.jsonl and the newest committed
// checkpoint, report/run_data.h, read at most once a second) and the tokens this launch has
// processed (a counter: redone steps count again).
// Thread safety: Update is called from the supervision loop; the server thread reads the status
// under mu_. The server is owned and stopped by the destructor.
// Non-goals: TLS, authentication (keep the default loopback address, or bind a trusted network).
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "tenax/core/status.h"
#include "tenax/report/http_server.h"

namespace tenax::launch {

class Monitor {
 public:
  // `status_file` empty and `port` 0: a monitor that does nothing.
  static Result<std::unique_ptr<Monitor>> Start(const std::string& status_file,
                                                const std::string& addr, int port);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // `status` as documented in docs/launcher_protocol.md. `force`: write the file now.
  void Update(const nlohmann::json& status, bool force = false);

  // `status` with the training series and the token counter added (what is served and written).
  // `training`: report::ReadLiveTraining of the run folder (may be empty).
  static nlohmann::json Complete(nlohmann::json status, const nlohmann::json& training,
                                 double now_unix);

 private:
  explicit Monitor(std::string status_file);

  // Constant after construction.
  const std::string status_file_;
  // Only the supervision loop touches these.
  double last_write_ = 0;
  double last_training_read_ = -1;
  nlohmann::json training_ = nlohmann::json::object();
  // Guarded by mu_.
  std::mutex mu_;
  nlohmann::json status_ = nlohmann::json::object();
  // Last: stopped (joined) before the members its handler reads.
  std::unique_ptr<report::HttpServer> server_;
};

}  // namespace tenax::launch
