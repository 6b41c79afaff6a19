// A small HTTP/1.0 server for the live page and the Prometheus endpoint (live.h): one thread
// accepts one connection at a time, reads the request line, answers with what the handler
// returns and closes. Bound to one IPv4 address (127.0.0.1 unless told otherwise: the page
// shows a run's state to whoever can connect).
// Thread safety: the handler runs on the server's thread, concurrently with the owner; it must
// synchronize what it reads. The thread is owned and joined by the destructor (which returns
// within about 0.2 s plus a slow client's 1 s timeout).
// Non-goals: keep-alive, TLS, authentication, concurrency (a scrape is a few kilobytes).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tenax/core/status.h"

namespace tenax::report {

struct HttpResponse {
  int code = 200;  // 200 or 404
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const std::string& path)>;

  // Listens on `addr`:`port` ("127.0.0.1", "0.0.0.0", "localhost" or an interface's IPv4
  // address). `flag` names the option in errors ("--metrics-port").
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& addr, int port,
                                                   Handler handler, const std::string& flag);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  HttpServer(int fd, int port, Handler handler);
  void Serve();

  // Constant after construction.
  const int listen_fd_;
  const int port_;
  const Handler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tenax::report
