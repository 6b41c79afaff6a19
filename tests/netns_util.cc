#include "netns_util.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

namespace tenax::testing {
namespace {

// Single-quotes `s` for /bin/sh.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::atomic<int> instances{0};

}  // namespace

Result<std::unique_ptr<NetnsHosts>> NetnsHosts::Create(int hosts) {
  if (hosts < 1 || hosts > 200) return InvalidArgument("NetnsHosts: 1 to 200 hosts");
  if (::geteuid() != 0) {
    return Unavailable("network namespaces need root (this test runs as uid " +
                       std::to_string(::geteuid()) + ")");
  }
  // Names and the subnet come from the pid and a per-process counter: interface names have at
  // most 15 characters ("tnx" + 7 pid digits + counter + "r" + host = at most 14).
  const int counter = instances.fetch_add(1) % 10;
  const std::string id = std::to_string(::getpid()) + std::to_string(counter);
  const long key = static_cast<long>(::getpid()) * 10 + counter;
  // 10.101.0.0 - 10.250.255.0: clear of the 10.77.0.0/24 of two_node_test.
  const std::string subnet =
      "10." + std::to_string(101 + key % 150) + "." + std::to_string((key / 150) % 256) + ".";
  std::unique_ptr<NetnsHosts> net(new NetnsHosts());
  net->bridge_ = "tnx" + id + "br";
  net->bridge_address_ = subnet + "1";
  std::string script = "ip link add " + net->bridge_ + " type bridge && ip addr add " +
                       net->bridge_address_ + "/24 dev " + net->bridge_ + " && ip link set " +
                       net->bridge_ + " up";
  for (int i = 0; i < hosts; ++i) {
    Host h;
    h.ns = "tnx" + id + "h" + std::to_string(i);
    h.interface = "tnx" + id + "h" + std::to_string(i);
    h.bridge_port = "tnx" + id + "r" + std::to_string(i);
    h.address = subnet + std::to_string(11 + i);
    script += " && ip netns add " + h.ns + " && ip link add " + h.bridge_port +
              " type veth peer name " + h.interface + " && ip link set " + h.interface + " netns " +
              h.ns + " && ip link set " + h.bridge_port + " master " + net->bridge_ +
              " && ip link set " + h.bridge_port + " up && ip -n " + h.ns + " addr add " +
              h.address + "/24 dev " + h.interface + " && ip -n " + h.ns + " link set " +
              h.interface + " up && ip -n " + h.ns + " link set lo up";
    net->hosts_.push_back(h);
  }
  auto r = tenax::testing::Run(script);
  if (r.exit_code != 0) {
    // The destructor removes whatever part was made.
    return Unavailable("cannot create network namespaces here: " + r.output);
  }
  return net;
}

NetnsHosts::~NetnsHosts() { Remove(); }

void NetnsHosts::Remove() {
  for (const auto& h : hosts_) {
    // Processes the test started in the namespace keep it alive after `ip netns del`: end them.
    auto pids = tenax::testing::Run("ip netns pids " + h.ns + " 2>/dev/null");
    std::istringstream in(pids.output);
    for (long pid; in >> pid;) {
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }
  std::string script;
  for (const auto& h : hosts_) {
    // Deleting one end of a veth deletes the other.
    script +=
        "ip link del " + h.bridge_port + " 2>/dev/null; ip netns del " + h.ns + " 2>/dev/null; ";
  }
  if (!bridge_.empty()) script += "ip link del " + bridge_ + " 2>/dev/null; ";
  if (!script.empty()) tenax::testing::Run(script + "true");
}

std::string NetnsHosts::Prefix(int host) const {
  return "ip netns exec " + hosts_[host].ns + " env GLOO_SOCKET_IFNAME=" + hosts_[host].interface +
         " ";
}

CommandResult NetnsHosts::Run(int host, const std::string& command) const {
  return tenax::testing::Run(Prefix(host) + "sh -c " + ShellQuote(command));
}

Status NetnsHosts::RunIn(int host, const std::function<void()>& fn) const {
  const std::string path = "/var/run/netns/" + hosts_[host].ns;
  Status st;
  std::thread thread([&] {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      st = InvalidArgument("cannot enter network namespace " + path + ": " + std::strerror(errno));
      if (fd >= 0) ::close(fd);
      return;
    }
    ::close(fd);
    fn();
  });
  thread.join();
  return st;
}

Status NetnsHosts::Cut(int host) {
  auto r = tenax::testing::Run("ip link set " + hosts_[host].bridge_port + " down");
  if (r.exit_code != 0) return Internal("cutting host " + std::to_string(host) + ": " + r.output);
  return Status::Ok();
}

Status NetnsHosts::Restore(int host) {
  auto r = tenax::testing::Run("ip link set " + hosts_[host].bridge_port + " up");
  if (r.exit_code != 0) {
    return Internal("restoring host " + std::to_string(host) + ": " + r.output);
  }
  return Status::Ok();
}

}  // namespace tenax::testing
