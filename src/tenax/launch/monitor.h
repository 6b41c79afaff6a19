// Live state of a launch for monitoring: `--status-file PATH` (the status JSON, rewritten
// atomically at most once a second) and `--metrics-port P` (the same numbers in Prometheus text
// format at http://HOST:P/metrics, served by a small HTTP/1.0 server on its own thread).
// Thread safety: Update is called from the supervision loop; the server thread reads the metrics
// text under mu_. The server thread is owned and joined by the destructor.
// Non-goals: HTTP keep-alive, TLS, authentication (bind it to a trusted network).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tenax/core/status.h"

namespace tenax::launch {

class Monitor {
 public:
  // `status_file` empty and `port` 0: a monitor that does nothing.
  static Result<std::unique_ptr<Monitor>> Start(const std::string& status_file, int port);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // `status` as documented in docs/launcher_protocol.md. `force`: write the file now.
  void Update(const nlohmann::json& status, bool force = false);

  static std::string PrometheusText(const nlohmann::json& status);

 private:
  Monitor(std::string status_file, int listen_fd);
  void Serve();

  // Constant after construction.
  const std::string status_file_;
  const int listen_fd_;  // -1: no server
  // Only the supervision loop touches this.
  double last_write_ = 0;
  // Guarded by mu_.
  std::mutex mu_;
  std::string metrics_;
  std::atomic<bool> stop_{false};
  std::thread server_;
};

}  // namespace tenax::launch
