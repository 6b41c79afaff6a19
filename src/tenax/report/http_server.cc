#include "tenax/report/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tenax::report {

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& addr, int port,
                                                      Handler handler, const std::string& flag) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  const std::string host = addr == "localhost" ? "127.0.0.1" : addr;
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return InvalidArgument(
        fmt::format("{} address '{}' is not an IPv4 address; use 127.0.0.1 (this machine only, the "
                    "default), 0.0.0.0 (every interface) or one interface's address",
                    flag, addr));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(fmt::format("{}: socket: {}", flag, std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd, 16) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Unavailable(
        fmt::format("{} {} on {}: cannot listen ({}); choose a free port", flag, port, addr, why));
  }
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return std::unique_ptr<HttpServer>(new HttpServer(fd, ntohs(sa.sin_port), std::move(handler)));
}

HttpServer::HttpServer(int fd, int port, Handler handler)
    : listen_fd_(fd), port_(port), handler_(std::move(handler)) {
  thread_ = std::thread([this] { Serve(); });
}

HttpServer::~HttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

void HttpServer::Serve() {
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
    HttpResponse r;
    if (n > 0) {
      request[n] = '\0';
      // "GET /path?query HTTP/1.1": the path without the query.
      std::string line(request, strcspn(request, "\r\n"));
      if (line.rfind("GET ", 0) == 0) {
        std::string path = line.substr(4, line.find(' ', 4) - 4);
        path = path.substr(0, path.find('?'));
        r = handler_(path);
      } else {
        r.code = 404;
        r.body = "only GET is served\n";
      }
    }
    const std::string response = fmt::format(
        "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
        "Connection: close\r\n\r\n{}",
        r.code == 200 ? "200 OK" : "404 Not Found", r.content_type, r.body.size(), r.body);
    for (size_t sent = 0; sent < response.size();) {
      const ssize_t w = ::send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += static_cast<size_t>(w);
    }
    ::close(conn);
  }
}

}  // namespace tenax::report
