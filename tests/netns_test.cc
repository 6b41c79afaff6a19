// The multi-node test bed itself (netns_util.h + testing_etcd.h): two hosts in their own network
// namespaces reach each other and an etcd in the test's namespace; pulling one host's cable cuts
// it off from both, while the other host keeps going; plugging it back restores it. Needs root
// (skipped otherwise, with the reason).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "netns_util.h"
#include "tenax/etcd/client.h"
#include "tenax/etcd/testing_etcd.h"

namespace tenax::testing {
namespace {

using std::chrono::milliseconds;

// Opens a TCP connection to address:port from the calling thread's namespace, giving up after
// `timeout`; true once connected.
bool CanConnect(const std::string& address, int port, milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      connected = err == 0;
    }
  }
  ::close(fd);
  return connected;
}

// A listening socket on `address` (port chosen by the kernel), in the calling thread's namespace.
int Listen(const std::string& address, int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

// Polls `condition` until it holds or 30 s pass (a passing run never waits that long).
template <typename F>
bool Eventually(F condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

TEST(Netns, HostsReachEachOtherAndEtcdUntilTheirCableIsPulled) {
  if (!etcd::EtcdClientAvailable()) GTEST_SKIP() << "built without cpp-httplib";
  auto made = NetnsHosts::Create(2);
  if (!made.ok()) GTEST_SKIP() << made.status().message();
  NetnsHosts& net = **made;

  // Each host sees its own address and not the other's.
  for (int h = 0; h < 2; ++h) {
    auto r = net.Run(h, "ip -4 -o addr show");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(net.address(h) + "/24"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(net.address(1 - h) + "/"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(net.interface(h)), std::string::npos) << r.output;
  }

  etcd::testing::TestingEtcdOptions options;
  options.host = net.bridge_address();
  auto etcd = etcd::testing::TestingEtcd::Start(options);
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  etcd::EtcdOptions client_options = (*etcd)->client_options();
  client_options.attempt_timeout = milliseconds(1000);

  int port = 0;
  int listener = -1;
  ASSERT_TRUE(net.RunIn(0, [&] { listener = Listen(net.address(0), &port); }).ok());
  ASSERT_GE(listener, 0);

  // From host `h`: can it reach host 0's listener, and write and read its key in etcd?
  auto reaches = [&](int h, bool* peer, bool* etcd_ok) {
    Status st = net.RunIn(h, [&] {
      *peer = CanConnect(net.address(0), port, milliseconds(1000));
      auto client = etcd::EtcdClient::Create(client_options);
      const std::string key = "/netns/host" + std::to_string(h);
      *etcd_ok = client.ok() && (*client)->Put(key, "here").ok() && (*client)->Get(key).ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
  };
  bool peer = false, etcd_ok = false;
  reaches(1, &peer, &etcd_ok);
  EXPECT_TRUE(peer) << "host 1 cannot reach host 0";
  EXPECT_TRUE(etcd_ok) << "host 1 cannot reach etcd at " << net.bridge_address();
  reaches(0, &peer, &etcd_ok);
  EXPECT_TRUE(etcd_ok) << "host 0 cannot reach etcd";

  // Pull host 1's cable: it reaches neither host 0 nor etcd; host 0 still reaches etcd.
  ASSERT_TRUE(net.Cut(1).ok());
  reaches(1, &peer, &etcd_ok);
  EXPECT_FALSE(peer) << "host 1 still reaches host 0 after its cable was pulled";
  EXPECT_FALSE(etcd_ok) << "host 1 still reaches etcd after its cable was pulled";
  reaches(0, &peer, &etcd_ok);
  EXPECT_TRUE(etcd_ok) << "host 0 lost etcd when host 1's cable was pulled";

  // Plug it back: both work again (once the bridge and ARP have caught up).
  ASSERT_TRUE(net.Restore(1).ok());
  EXPECT_TRUE(Eventually([&] {
    reaches(1, &peer, &etcd_ok);
    return peer && etcd_ok;
  })) << "host 1 did not come back: peer "
      << peer << ", etcd " << etcd_ok;
  ::close(listener);
}

// An etcd with TLS and client-certificate auth on the bridge: its certificate names the bridge's
// address, so a host with the client certificate gets in, and one without it does not.
TEST(Netns, HostsReachATlsEtcdOnTheBridgeOnlyWithTheCertificate) {
  if (!etcd::EtcdClientAvailable()) GTEST_SKIP() << "built without cpp-httplib";
  auto made = NetnsHosts::Create(1);
  if (!made.ok()) GTEST_SKIP() << made.status().message();
  NetnsHosts& net = **made;
  etcd::testing::TestingEtcdOptions options;
  options.host = net.bridge_address();
  options.tls = true;
  auto etcd = etcd::testing::TestingEtcd::Start(options);
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  etcd::EtcdOptions with_cert = (*etcd)->client_options();
  etcd::EtcdOptions without_cert = with_cert;
  without_cert.cert_file.clear();
  without_cert.key_file.clear();
  Status put_with, put_without;
  ASSERT_TRUE(
      net.RunIn(0,
                [&] {
                  put_with = (*etcd::EtcdClient::Create(with_cert))->Put("/tls", "in").status();
                  put_without =
                      (*etcd::EtcdClient::Create(without_cert))->Put("/tls2", "in").status();
                })
          .ok());
  EXPECT_TRUE(put_with.ok()) << put_with.ToString();
  EXPECT_FALSE(put_without.ok());
  auto check = etcd::EtcdClient::Create(with_cert);
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE((*check)->Get("/tls")->has_value());
  EXPECT_FALSE((*check)->Get("/tls2")->has_value());
}

}  // namespace
}  // namespace tenax::testing
