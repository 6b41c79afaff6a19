#include "tenax/core/net.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace tenax {
namespace {

// One connection attempt to any address of host:port; 0 on success, else errno.
int TryConnect(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0) return EHOSTUNREACH;
  int err = ECONNREFUSED;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    err = rc == 0 ? 0 : errno;
    ::close(fd);
    if (rc == 0) break;
  }
  ::freeaddrinfo(found);
  return err;
}

}  // namespace

std::pair<int, int> EphemeralPortRange() {
  int lo = 32768, hi = 60999;  // Linux's default
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int a = 0, b = 0;
    if (std::fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && b >= a) lo = a, hi = b;
    std::fclose(f);
  }
  return {lo, hi};
}

namespace {

// Binds a socket to address:port (port 0: one the kernel picks) and returns the port bound, or
// 0 when it is taken.
int BindAndRelease(const std::string& address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = INADDR_ANY;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      bound = ntohs(addr.sin_port);
    }
  }
  ::close(fd);
  return bound;
}

}  // namespace

int FreeTcpPort(const std::string& address) {
  // Outside the kernel's ephemeral range: a port the kernel hands out (to every outgoing
  // connection, and to every listener bound to port 0, as gloo's are) can be taken by any
  // process between this check and the caller's bind, and on a machine busy with connections it
  // was (a launcher's store port, EADDRINUSE). A port outside it is taken only by another
  // process choosing it on purpose, among some 27,000 (Linux's default range) drawn at random.
  const auto [lo, hi] = EphemeralPortRange();
  std::vector<std::pair<int, int>> spans;  // [first, last] outside the range, from kFirstChosenPort
  if (lo - 1 >= kFirstChosenPort) spans.emplace_back(kFirstChosenPort, lo - 1);
  if (hi + 1 <= 65535) spans.emplace_back(std::max(hi + 1, kFirstChosenPort), 65535);
  int64_t size = 0;
  for (const auto& [a, b] : spans) size += b - a + 1;
  if (size > 0) {
    std::mt19937_64 rng(
        std::random_device{}() ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(::getpid()) << 32));
    for (int attempt = 0; attempt < 64; ++attempt) {
      int64_t k = static_cast<int64_t>(rng() % static_cast<uint64_t>(size));
      for (const auto& [a, b] : spans) {
        if (k <= b - a) {
          if (BindAndRelease(address, static_cast<int>(a + k)) > 0) return static_cast<int>(a + k);
          break;
        }
        k -= b - a + 1;
      }
    }
  }
  return BindAndRelease(address, 0);  // no room outside the range (or all taken): the kernel's
}

Status WaitForTcpListener(const std::string& host, int port, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    const int err = TryConnect(host, port);
    if (err == 0) return Status::Ok();
    if (Clock::now() >= deadline) {
      return Unavailable(fmt::format("nothing accepts connections at {}:{} after {:.0f}s ({})",
                                     host, port, timeout_s, std::strerror(err)));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace tenax
