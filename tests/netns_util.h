// Hosts in network namespaces, for multi-node tests on one machine. A bridge in the test's own
// network namespace, and N "hosts": each a network namespace with a veth pair whose one end
// (the host's interface, with the host's address) is in the namespace and whose other end is a
// port of the bridge. Hosts reach each other through the bridge, and the bridge's own address is
// reachable from every host: a service the test runs in its own namespace (etcd, see
// src/tenax/etcd/testing_etcd.h) listens there. Cut(host) sets the host's bridge port down, as if
// its cable were pulled: its processes keep running, and whatever they send is lost (no error
// comes back quickly: connects and reads time out, as on a real partition). Restore(host) plugs
// it back.
//
// Names carry the test's pid (and a counter), and every instance gets its own /24 in 10.0.0.0/8,
// so tests in different processes do not collide. The destructor kills whatever still runs in
// the namespaces (processes the test started there) and removes the namespaces, the veths and the
// bridge.
//
// Needs root and iproute2; Create fails with the reason elsewhere, and tests GTEST_SKIP with it.
// Non-goals: routing between subnets, latency or loss shaping (tc), IPv6.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "test_util.h"

namespace tenax::testing {

// Thread safety: none; one test thread owns it (RunIn's threads are joined before it returns).
class NetnsHosts {
 public:
  static Result<std::unique_ptr<NetnsHosts>> Create(int hosts);
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  // The bridge's address, in the test's own namespace: where services for every host listen.
  const std::string& bridge_address() const { return bridge_address_; }
  const std::string& address(int host) const { return hosts_[host].address; }
  // The host's namespace and its interface there (for GLOO_SOCKET_IFNAME).
  const std::string& name(int host) const { return hosts_[host].ns; }
  const std::string& interface(int host) const { return hosts_[host].interface; }

  // A shell prefix that runs the command after it in `host`, with GLOO_SOCKET_IFNAME set to the
  // host's interface: Prefix(1) + "tenax launch ...".
  std::string Prefix(int host) const;
  // Runs `command` through /bin/sh in `host`, capturing its output.
  CommandResult Run(int host, const std::string& command) const;
  // Runs `fn` on a thread that entered `host`'s network namespace (so the sockets it opens, e.g.
  // an EtcdClient's, are the host's), and waits for it. InvalidArgument if the namespace cannot
  // be entered.
  Status RunIn(int host, const std::function<void()>& fn) const;

  // Pulls / plugs back the host's cable (its bridge port down / up).
  Status Cut(int host);
  Status Restore(int host);

 private:
  struct Host {
    std::string ns, interface, bridge_port, address;
  };
  NetnsHosts() = default;
  void Remove();

  std::string bridge_;
  std::string bridge_address_;
  std::vector<Host> hosts_;
};

}  // namespace tenax::testing
