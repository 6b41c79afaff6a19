#include "tenax/etcd/testing_etcd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "tenax/core/fs.h"
#include "tenax/core/net.h"
#include "tenax/core/subprocess.h"
#include "tenax/etcd/internal.h"

namespace tenax::etcd::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

Status RunTool(const std::vector<std::string>& argv) {
  auto r = RunProcess(argv, "");
  if (!r.ok()) {
    return r.status().WithContext("running " + argv[0] + " (scripts/setup installs it)");
  }
  if (r->exit_code != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    return Internal(fmt::format("'{}' exited {}: {}{}", cmd, r->exit_code, r->out, r->err));
  }
  return Status::Ok();
}

// A fresh P-256 key and a certificate for it, signed by `ca` (self-signed when `ca` is empty),
// with the X.509 extensions in `ext` (openssl config lines).
Status MakeCert(const std::string& dir, const std::string& name, const std::string& subject,
                const std::string& ca, const std::string& ext) {
  const std::string key = dir + "/" + name + ".key", crt = dir + "/" + name + ".crt";
  if (ca.empty()) {
    return RunTool({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt, "-days",
                    "2", "-subj", subject});
  }
  const std::string csr = dir + "/" + name + ".csr", extfile = dir + "/" + name + ".ext";
  TENAX_RETURN_IF_ERROR(
      RunTool({"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
               "-nodes", "-keyout", key, "-out", csr, "-subj", subject}));
  TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(extfile, ext));
  return RunTool({"openssl", "x509", "-req", "-in", csr, "-CA", dir + "/" + ca + ".crt", "-CAkey",
                  dir + "/" + ca + ".key", "-CAcreateserial", "-out", crt, "-days", "2", "-extfile",
                  extfile});
}

}  // namespace

Result<std::unique_ptr<TestingEtcd>> TestingEtcd::Start(TestingEtcdOptions options) {
  if (!EtcdClientAvailable()) return InvalidArgument(internal::kNoHttplib);
  if (options.members < 1) return InvalidArgument("TestingEtcd: members must be >= 1");
  std::unique_ptr<TestingEtcd> etcd(new TestingEtcd(std::move(options)));
  char tmpl[] = "/tmp/tenax-etcd-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return IoError("mkdtemp /tmp/tenax-etcd-*: " + std::string(std::strerror(errno)));
  etcd->dir_ = tmpl;
  if (etcd->options_.tls) TENAX_RETURN_IF_ERROR(etcd->MakeCertificates());
  // A port picked free may be taken before etcd binds it: then etcd exits, and we try again.
  Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    st = etcd->Launch();
    if (st.ok()) return etcd;
    etcd->KillAll();
    if (st.message().find("address already in use") == std::string::npos) break;
  }
  return st;
}

TestingEtcd::~TestingEtcd() {
  KillAll();
  if (!dir_.empty() && std::getenv("TENAX_KEEP_TEST_DIRS") == nullptr) {
    (void)LocalFs().RemoveAll(dir_);
  }
}

Status TestingEtcd::MakeCertificates() {
  const std::string ca = "ca";
  TENAX_RETURN_IF_ERROR(MakeCert(dir_, ca, "/CN=tenax-test-ca", "", ""));
  // etcd 3.4's gateway dials the member's own gRPC port with the server certificate as its
  // client certificate, so with --client-cert-auth the server certificate needs clientAuth too.
  std::string san = "IP:127.0.0.1,DNS:localhost";
  if (options_.host != "127.0.0.1") san += ",IP:" + options_.host;
  TENAX_RETURN_IF_ERROR(
      MakeCert(dir_, "server", "/CN=etcd", ca,
               "subjectAltName=" + san + "\nextendedKeyUsage=serverAuth,clientAuth\n"));
  TENAX_RETURN_IF_ERROR(
      MakeCert(dir_, "client", "/CN=tenax-agent", ca, "extendedKeyUsage=clientAuth\n"));
  TENAX_RETURN_IF_ERROR(MakeCert(dir_, "other-ca", "/CN=untrusted-ca", "", ""));
  TENAX_RETURN_IF_ERROR(
      MakeCert(dir_, "untrusted", "/CN=intruder", "other-ca", "extendedKeyUsage=clientAuth\n"));
  ca_file_ = dir_ + "/ca.crt";
  server_cert_ = dir_ + "/server.crt";
  server_key_ = dir_ + "/server.key";
  client_cert_ = dir_ + "/client.crt";
  client_key_ = dir_ + "/client.key";
  untrusted_cert_ = dir_ + "/untrusted.crt";
  untrusted_key_ = dir_ + "/untrusted.key";
  return Status::Ok();
}

std::string TestingEtcd::ClientEndpoint(const Member& m) const {
  return options_.host + ":" + std::to_string(m.client_port);
}

std::vector<std::string> TestingEtcd::endpoints() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(ClientEndpoint(m));
  return out;
}

std::string TestingEtcd::url() const {
  std::string s = "etcd://";
  for (const auto& e : endpoints()) s += (s.size() > 7 ? "," : "") + e;
  return s;
}

EtcdOptions TestingEtcd::client_options() const {
  EtcdOptions o;
  o.endpoints = endpoints();
  if (options_.tls) {
    o.ca_file = ca_file_;
    o.cert_file = client_cert_;
    o.key_file = client_key_;
  }
  return o;
}

Status TestingEtcd::Launch() {
  const int n = options_.members;
  members_.assign(n, Member{});
  std::set<int> ports;
  auto fresh_port = [&] {
    int p;
    do {
      p = FreeTcpPort();
    } while (!ports.insert(p).second);
    return p;
  };
  const std::string scheme = options_.tls ? "https" : "http";
  std::string cluster;
  for (int i = 0; i < n; ++i) {
    Member& m = members_[i];
    m.name = "m" + std::to_string(i);
    m.client_port = fresh_port();
    m.peer_port = fresh_port();
    m.log = fmt::format("{}/{}.log", dir_, m.name);
    cluster += fmt::format("{}{}=http://{}:{}", i ? "," : "", m.name, options_.host, m.peer_port);
  }
  for (int i = 0; i < n; ++i) {
    Member& m = members_[i];
    const std::string client_url = fmt::format("{}://{}:{}", scheme, options_.host, m.client_port);
    const std::string peer_url = fmt::format("http://{}:{}", options_.host, m.peer_port);
    std::vector<std::string> args = {"etcd",
                                     "--name",
                                     m.name,
                                     "--data-dir",
                                     fmt::format("{}/{}.data", dir_, m.name),
                                     "--listen-client-urls",
                                     client_url,
                                     "--advertise-client-urls",
                                     client_url,
                                     "--listen-peer-urls",
                                     peer_url,
                                     "--initial-advertise-peer-urls",
                                     peer_url,
                                     "--initial-cluster",
                                     cluster,
                                     "--initial-cluster-state",
                                     "new",
                                     "--initial-cluster-token",
                                     fmt::format("tenax-test-{}", ::getpid()),
                                     "--logger",
                                     "zap",
                                     "--log-outputs",
                                     "stderr"};
    if (options_.tls) {
      for (const auto& a :
           {"--client-cert-auth", "--trusted-ca-file", ca_file_.c_str(), "--cert-file",
            server_cert_.c_str(), "--key-file", server_key_.c_str()}) {
        args.push_back(a);
      }
    }
    // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log_fd = ::open(m.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return IoError("cannot create " + m.log + ": " + std::strerror(errno));
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(log_fd);
      return IoError(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log_fd);
    m.pid = pid;
  }
  return WaitServing(Clock::now() + options_.start_timeout);
}

Status TestingEtcd::WaitServing(Clock::time_point deadline) {
  for (int i = 0; i < members(); ++i) {
    EtcdOptions o = client_options();
    o.endpoints = {ClientEndpoint(members_[i])};
    o.attempt_timeout = milliseconds(1000);
    TENAX_ASSIGN_OR_RETURN(auto client, EtcdClient::Create(o));
    Status last;
    while (true) {
      int wstatus = 0;
      if (::waitpid(members_[i].pid, &wstatus, WNOHANG) == members_[i].pid) {
        members_[i].pid = -1;
        const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
        return Unavailable(fmt::format(
            "etcd member {} exited with {} before serving{}; its log ends:\n{}", i, code,
            code == 127 ? " (is Debian's etcd-server installed? scripts/setup installs it)" : "",
            LogTail(i)));
      }
      // A linearizable read succeeds only once the cluster has a leader and this member has
      // caught up with it.
      auto r = client->Get("/tenax-testing/health");
      if (r.ok()) break;
      last = r.status();
      if (Clock::now() > deadline) {
        return Unavailable(
            fmt::format("etcd member {} did not serve in time ({}); its log ends:\n{}", i,
                        last.message(), LogTail(i)));
      }
      std::this_thread::sleep_for(milliseconds(20));  // polling the member's health
    }
  }
  return Status::Ok();
}

Status TestingEtcd::KillMember(int i) {
  if (i < 0 || i >= members()) return InvalidArgument(fmt::format("no etcd member {}", i));
  Member& m = members_[i];
  if (m.pid <= 0) return Status::Ok();
  ::kill(m.pid, SIGKILL);
  int wstatus = 0;
  while (::waitpid(m.pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  m.pid = -1;
  return Status::Ok();
}

Status TestingEtcd::PauseMember(int i) {
  if (i < 0 || i >= members() || members_[i].pid <= 0) {
    return InvalidArgument(fmt::format("no running etcd member {}", i));
  }
  ::kill(members_[i].pid, SIGSTOP);
  // Returns once it is stopped (its state in /proc), so that nothing it answers comes after.
  const std::string stat = fmt::format("/proc/{}/stat", members_[i].pid);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    std::ifstream in(stat);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close != std::string::npos && close + 2 < text.size() &&
        (text[close + 2] == 'T' || text[close + 2] == 't')) {
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Internal(fmt::format("etcd member {} (pid {}) did not stop within 30 s of SIGSTOP", i,
                              members_[i].pid));
}

Status TestingEtcd::ResumeMember(int i) {
  if (i < 0 || i >= members() || members_[i].pid <= 0) {
    return InvalidArgument(fmt::format("no running etcd member {}", i));
  }
  ::kill(members_[i].pid, SIGCONT);
  return Status::Ok();
}

void TestingEtcd::KillAll() {
  for (int i = 0; i < members(); ++i) (void)KillMember(i);
}

Result<int> TestingEtcd::Leader() const {
  std::vector<std::string> errors;
  for (int i = 0; i < members(); ++i) {
    if (members_[i].pid <= 0) continue;
    EtcdOptions o = client_options();
    o.endpoints = {ClientEndpoint(members_[i])};
    o.attempt_timeout = milliseconds(1000);
    std::atomic<size_t> preferred{0};
    auto r = internal::Call(o, preferred, "/v3/maintenance/status", nlohmann::json::object(),
                            internal::CallKind::kRead);
    if (!r.ok()) {
      errors.push_back(r.status().message());
      continue;
    }
    // Member IDs are uint64 (beyond int64): compare them as the strings the gateway writes.
    auto text = [](const nlohmann::json& o, const char* key) {
      const auto it = o.find(key);
      return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const std::string leader = text(*r, "leader");
    const auto header = r->find("header");
    const std::string self = header != r->end() ? text(*header, "member_id") : std::string();
    if (!leader.empty() && leader == self) return i;
  }
  return NotFound("no running etcd member is leader now" +
                  (errors.empty() ? std::string() : " (" + errors.front() + ")"));
}

std::string TestingEtcd::LogTail(int i, size_t bytes) const {
  std::ifstream in(members_[i].log, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

}  // namespace tenax::etcd::testing
