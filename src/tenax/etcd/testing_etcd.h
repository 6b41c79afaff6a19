// Test helper (tests only; library tenax_launch_testing): a real etcd (Debian's etcd-server)
// that a test starts itself, as one member or a cluster of several, on free ports of one address
// (loopback by default), in a fresh folder under /tmp. Optionally the client port serves TLS with
// client-certificate auth (etcd --client-cert-auth); the CA, the server's and a client's
// certificates are made with `openssl`, plus a client certificate from another CA that the
// cluster does not trust. Start returns once every member answers a linearizable read (polled,
// not slept for), so the cluster has a leader and serves. The destructor kills every member and
// removes the folder (kept when TENAX_KEEP_TEST_DIRS is set).
//
// The members die with the thread that started them (PR_SET_PDEATHSIG), so a test that crashes
// leaves no etcd behind: start it from the test's main thread.
//
// Non-goals: TLS between members (peers talk plain HTTP on the same address), restarting a
// killed member, etcd's user/password auth.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/etcd/client.h"

namespace tenax::etcd::testing {

struct TestingEtcdOptions {
  int members = 1;
  // TLS with client-certificate auth on the client port.
  bool tls = false;
  // The address members listen on, for clients and peers. Tests with network namespaces pass the
  // bridge's address (tests/netns_util.h) so that every host reaches etcd.
  std::string host = "127.0.0.1";
  // How long Start waits for the cluster to serve.
  std::chrono::milliseconds start_timeout{std::chrono::seconds(60)};
};

// Thread safety: none; one test thread owns it.
class TestingEtcd {
 public:
  // Fails with the reason (and the end of a member's log) when etcd is missing or does not come
  // up; retries on new ports when one was taken meanwhile.
  static Result<std::unique_ptr<TestingEtcd>> Start(TestingEtcdOptions options = {});
  ~TestingEtcd();
  TestingEtcd(const TestingEtcd&) = delete;
  TestingEtcd& operator=(const TestingEtcd&) = delete;

  int members() const { return static_cast<int>(members_.size()); }
  // Every member's client "HOST:PORT", killed ones included.
  std::vector<std::string> endpoints() const;
  // "etcd://HOST:PORT,..." for --rdzv.
  std::string url() const;
  // The endpoints, and under TLS the CA and the trusted client certificate.
  EtcdOptions client_options() const;
  const std::string& dir() const { return dir_; }

  // TLS only: the CA the cluster trusts and a client certificate it signed; and a client
  // certificate signed by another CA, which the cluster must refuse.
  const std::string& ca_file() const { return ca_file_; }
  const std::string& client_cert_file() const { return client_cert_; }
  const std::string& client_key_file() const { return client_key_; }
  const std::string& untrusted_cert_file() const { return untrusted_cert_; }
  const std::string& untrusted_key_file() const { return untrusted_key_; }

  // Kills member `i` with SIGKILL and reaps it.
  Status KillMember(int i);
  // Freezes member `i` (SIGSTOP) / lets it go on (SIGCONT): a member that hangs without closing
  // its connections, like one behind a partition.
  Status PauseMember(int i);
  Status ResumeMember(int i);
  bool running(int i) const { return members_[i].pid > 0; }
  // The index of the member that is leader now, asked of the running members; NotFound while
  // there is none.
  Result<int> Leader() const;
  // The last `bytes` of member `i`'s log (for failure messages).
  std::string LogTail(int i, size_t bytes = 2000) const;

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
    std::string log;
  };

  explicit TestingEtcd(TestingEtcdOptions options) : options_(std::move(options)) {}
  Status MakeCertificates();
  // Picks ports, starts every member and waits until each serves.
  Status Launch();
  Status WaitServing(std::chrono::steady_clock::time_point deadline);
  void KillAll();
  std::string ClientEndpoint(const Member& m) const;

  const TestingEtcdOptions options_;
  std::string dir_;
  std::vector<Member> members_;
  std::string ca_file_, server_cert_, server_key_, client_cert_, client_key_;
  std::string untrusted_cert_, untrusted_key_;
};

}  // namespace tenax::etcd::testing
