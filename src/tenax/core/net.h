// Small network helpers shared by the launcher and multi-rank tests.
#pragma once

#include <string>
#include <utility>

#include "tenax/core/status.h"

namespace tenax {

// A TCP port that was free on `address` (an IPv4 address; any interface when it is not one) a
// moment ago, drawn at random between kFirstChosenPort and 65535 outside the kernel's ephemeral
// range (EphemeralPortRange), so that no outgoing connection or listener on port 0 can be given
// it before the caller binds it; the kernel's choice (port 0) only where that leaves no room.
// Callers use it for rendezvous (a c10d store, a test's etcd).
int FreeTcpPort(const std::string& address = "127.0.0.1");

inline constexpr int kFirstChosenPort = 10000;

// The ports the kernel hands out itself (/proc/sys/net/ipv4/ip_local_port_range; Linux's
// default 32768-60999 where it cannot be read).
std::pair<int, int> EphemeralPortRange();

// Waits until something accepts TCP connections at host:port (a probe connection, closed at
// once), retrying every few milliseconds; Unavailable after `timeout_s`. Used before creating a
// c10d store client, whose own retry sleeps a whole second when the server is not up yet.
Status WaitForTcpListener(const std::string& host, int port, double timeout_s);

}  // namespace tenax
