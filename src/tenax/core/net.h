// Small network helpers shared by the launcher and multi-rank tests.
#pragma once

#include <string>

#include "tenax/core/status.h"

namespace tenax {

// A TCP port that was free on `address` (an IPv4 address; any interface when it is not one) a
// moment ago: bind to port 0 and read it back. Another process may take it before the caller
// binds it; callers use it for short-lived rendezvous (a c10d store, a test's etcd).
int FreeTcpPort(const std::string& address = "127.0.0.1");

// Waits until something accepts TCP connections at host:port (a probe connection, closed at
// once), retrying every few milliseconds; Unavailable after `timeout_s`. Used before creating a
// c10d store client, whose own retry sleeps a whole second when the server is not up yet.
Status WaitForTcpListener(const std::string& host, int port, double timeout_s);

}  // namespace tenax
