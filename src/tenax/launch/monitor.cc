#include "tenax/launch/monitor.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"

namespace tenax::launch {
namespace {

double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<std::unique_ptr<Monitor>> Monitor::Start(const std::string& status_file, int port) {
  int fd = -1;
  if (port > 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return IoError(std::string("metrics socket: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(fd, 16) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return Unavailable(fmt::format("--metrics-port {}: cannot listen ({}); choose a free port",
                                     port, why));
    }
  }
  return std::unique_ptr<Monitor>(new Monitor(status_file, fd));
}

Monitor::Monitor(std::string status_file, int listen_fd)
    : status_file_(std::move(status_file)), listen_fd_(listen_fd) {
  if (listen_fd_ >= 0) server_ = std::thread([this] { Serve(); });
}

Monitor::~Monitor() {
  stop_ = true;
  if (server_.joinable()) server_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Monitor::Update(const nlohmann::json& status, bool force) {
  if (listen_fd_ >= 0) {
    std::string text = PrometheusText(status);
    std::lock_guard<std::mutex> lock(mu_);
    metrics_ = std::move(text);
  }
  if (status_file_.empty() || (!force && Now() - last_write_ < 1.0)) return;
  last_write_ = Now();
  Status st = LocalFs().WriteFileAtomic(status_file_, status.dump(2) + "\n");
  if (!st.ok()) log::Warn("launch: cannot write the status file: {}", st.message());
}

std::string Monitor::PrometheusText(const nlohmann::json& s) {
  std::string out;
  auto gauge = [&](const char* name, const char* help, double value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, value);
  };
  const auto& g = s["goodput"];
  gauge("tenax_ranks_alive", "ranks of this node running", s["ranks_alive"].get<double>());
  gauge("tenax_ranks", "ranks this node should run", s["ranks"].size());
  gauge("tenax_step", "newest training step finished", s["step"].get<double>());
  gauge("tenax_tokens_per_second", "global training throughput, last step",
        s["tokens_per_s"].get<double>());
  gauge("tenax_generation", "launch generation (restarts so far)", s["generation"].get<double>());
  gauge("tenax_restarts_total", "restarts so far", s["restarts"].get<double>());
  gauge("tenax_failures_total", "failures so far", s["failures"].get<double>());
  gauge("tenax_spares_ready", "standby processes ready to take a failed slot",
        s["spares_ready"].get<double>());
  gauge("tenax_quarantined_slots", "slots excluded for good", s["quarantined_slots"].size());
  gauge("tenax_stragglers_total", "straggler reports so far", s["stragglers"].get<double>());
  gauge("tenax_wall_seconds", "seconds since the launch started", g["wall_s"].get<double>());
  gauge("tenax_effective_training_ratio", "productive training time / wall time",
        g["effective_training_ratio"].get<double>());
  out += "# HELP tenax_time_seconds wall time split for goodput\n# TYPE tenax_time_seconds gauge\n";
  for (const auto& [bucket, secs] : g["time_s"].items()) {
    out += fmt::format("tenax_time_seconds{{bucket=\"{}\"}} {}\n", bucket, secs.get<double>());
  }
  return out;
}

void Monitor::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    timeval tv{1, 0};  // a silent client cannot stall the server (or its join) for long
    ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char request[2048];
    const ssize_t n = ::recv(conn, request, sizeof(request) - 1, 0);
    std::string body, code = "200 OK";
    if (n > 0) {
      request[n] = '\0';
      const bool metrics = std::strncmp(request, "GET /metrics", 12) == 0 ||
                           std::strncmp(request, "GET / ", 6) == 0;
      if (metrics) {
        std::lock_guard<std::mutex> lock(mu_);
        body = metrics_;
      } else {
        code = "404 Not Found";
        body = "tenax launch serves GET /metrics\n";
      }
    }
    const std::string response = fmt::format(
        "HTTP/1.0 {}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n{}",
        code, body.size(), body);
    for (size_t sent = 0; sent < response.size();) {
      const ssize_t w = ::send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += static_cast<size_t>(w);
    }
    ::close(conn);
  }
}

}  // namespace tenax::launch
