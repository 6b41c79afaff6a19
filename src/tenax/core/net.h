// Small network helpers shared by the launcher and multi-rank tests.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tenax/core/status.h"

namespace tenax {

// A loopback TCP port that was free a moment ago (bind to port 0 and read it back). Another
// process may take it before the caller binds it; callers use it for short-lived rendezvous.
inline int FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// Waits until something accepts TCP connections at host:port (a probe connection, closed at
// once), retrying every few milliseconds; Unavailable after `timeout_s`. Used before creating a
// c10d store client, whose own retry sleeps a whole second when the server is not up yet.
Status WaitForTcpListener(const std::string& host, int port, double timeout_s);

}  // namespace tenax
