#include "tenax/protocol/rank_context.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace tenax::protocol {
namespace {

Result<long long> ParseInteger(const char* name, const char* value, long long min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || errno != 0 || v < min) {
    return InvalidArgument(
        fmt::format("environment variable {}={} is not an integer >= {}", name, value, min));
  }
  return v;
}

Result<double> ParseSeconds(const char* name, const char* value) {
  char* end = nullptr;
  const double v = std::strtod(value, &end);
  if (end == value || *end != '\0' || !std::isfinite(v) || v < 0) {
    return InvalidArgument(fmt::format(
        "environment variable {}={} is not a finite number of seconds >= 0", name, value));
  }
  return v;
}

// Blocks until the launcher assigns this standby process its rank, then exports the assignment.
// Runs before any thread that reads the environment exists.
Status WaitForAssignment(const char* fd_text) {
  TENAX_ASSIGN_OR_RETURN(const long long fd, ParseInteger(kEnvStandbyFd, fd_text, 0));
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(static_cast<int>(fd), &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return IoError(std::string("reading the standby assignment: ") + std::strerror(errno));
    }
    if (n == 0 || c == '\n') break;
    line.push_back(c);
  }
  ::close(static_cast<int>(fd));
  ::unsetenv(kEnvStandbyFd);
  if (line.empty()) {
    return Unavailable("standby process released by the launcher without a rank assignment");
  }
  std::stringstream words(line);
  for (std::string kv; words >> kv;) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("standby assignment '" + line + "': expected KEY=VALUE words");
    }
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  return Status::Ok();
}

Result<LiveStoreAddress> ParseLiveStore(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format(
        "{}={}: {}; expected etcd://HOST:PORT[,HOST:PORT...]/PREFIX/ (set by tenax launch)",
        kEnvLiveStore, url, why));
  };
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) return bad("not an etcd:// address");
  const size_t slash = url.find('/', scheme.size());
  if (slash == std::string::npos || slash + 1 >= url.size() || url.back() != '/') {
    return bad("no key prefix ending in '/'");
  }
  LiveStoreAddress a;
  a.prefix = url.substr(slash);
  std::string hosts = url.substr(scheme.size(), slash - scheme.size());
  size_t at = 0;
  while (at <= hosts.size()) {
    const size_t comma = std::min(hosts.find(',', at), hosts.size());
    const std::string e = hosts.substr(at, comma - at);
    const size_t colon = e.rfind(':');
    char* end = nullptr;
    const long port = colon == std::string::npos ? 0 : std::strtol(e.c_str() + colon + 1, &end, 10);
    if (colon == std::string::npos || colon == 0 || end == e.c_str() + colon + 1 || *end != '\0' ||
        port < 1 || port > 65535) {
      return bad("endpoint '" + e + "' is not HOST:PORT");
    }
    a.endpoints.push_back(e);
    at = comma + 1;
  }
  return a;
}

}  // namespace

std::string LiveStoreUrl(const LiveStoreAddress& a) {
  return fmt::format("etcd://{}{}", fmt::join(a.endpoints, ","), a.prefix);
}

Result<RankContext> ReadRankContext(const GetEnv& getenv) {
  auto get = [&](const char* n) -> const char* {
    const char* v = getenv(n);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  RankContext ctx;
  if (const char* v = get(kEnvLauncherPid)) {
    TENAX_ASSIGN_OR_RETURN(const long long pid, ParseInteger(kEnvLauncherPid, v, 1));
    ctx.launcher_pid = static_cast<int>(pid);
    ctx.supervised = true;
  }
  if (const char* v = get(kEnvLauncherFd)) {
    TENAX_ASSIGN_OR_RETURN(const long long fd, ParseInteger(kEnvLauncherFd, v, 0));
    ctx.launcher_fd = static_cast<int>(fd);
  }
  if (const char* v = get(kEnvRunLockFd)) {
    TENAX_ASSIGN_OR_RETURN(const long long fd, ParseInteger(kEnvRunLockFd, v, 0));
    ctx.run_lock_fd = static_cast<int>(fd);
  }
  if (const char* v = get(kEnvSlot)) {
    TENAX_ASSIGN_OR_RETURN(const long long slot, ParseInteger(kEnvSlot, v, 0));
    ctx.slot = static_cast<int>(slot);
  }
  if (const char* v = get(kEnvRestartCount)) {
    TENAX_ASSIGN_OR_RETURN(const long long gen, ParseInteger(kEnvRestartCount, v, 0));
    ctx.generation = static_cast<int>(gen);
  }
  if (const char* v = get(kEnvLaunchTime)) {
    TENAX_ASSIGN_OR_RETURN(ctx.launch_time_unix, ParseSeconds(kEnvLaunchTime, v));
  }
  if (const char* v = get(kEnvRunElapsed)) {
    TENAX_ASSIGN_OR_RETURN(ctx.run_elapsed_s, ParseSeconds(kEnvRunElapsed, v));
  }
  if (const char* v = get(kEnvHeartbeatDir)) ctx.heartbeat_dir = v;
  if (const char* v = get(kEnvInject)) ctx.inject = v;
  if (const char* v = get(kEnvAgentSocket)) ctx.agent_socket = v;
  if (const char* v = get(kEnvRamFolder)) ctx.ram_folder = v;
  if (const char* v = get(kEnvJobSecret)) ctx.job_secret = v;
  if (const char* v = get(kEnvLiveJoin)) {
    char* end = nullptr;
    const long k = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || k < 1 || k > 1000000) {
      return InvalidArgument(fmt::format(
          "{}={}: expected a replica incarnation >= 1 (set by tenax launch)", kEnvLiveJoin, v));
    }
    ctx.live_join = true;
    ctx.live_incarnation = static_cast<int>(k);
  }
  if (const char* v = get(kEnvLiveStore)) {
    TENAX_ASSIGN_OR_RETURN(ctx.live_store, ParseLiveStore(v));
    if (const char* f = get(kEnvLiveStoreCa)) ctx.live_store.ca_file = f;
    if (const char* f = get(kEnvLiveStoreCert)) ctx.live_store.cert_file = f;
    if (const char* f = get(kEnvLiveStoreKey)) ctx.live_store.key_file = f;
  }
  return ctx;
}

Result<RankContext> ReadRankContext() {
  if (const char* fd = std::getenv(kEnvStandbyFd); fd != nullptr && *fd != '\0') {
    TENAX_RETURN_IF_ERROR(WaitForAssignment(fd));
  }
  return ReadRankContext([](const char* n) { return std::getenv(n); });
}

std::optional<int> StandbySlot() {
  const char* fd = std::getenv(kEnvStandbyFd);
  if (fd == nullptr || *fd == '\0') return std::nullopt;
  const char* slot = std::getenv(kEnvSlot);
  Result<long long> n = ParseInteger(kEnvSlot, slot != nullptr ? slot : "", 0);
  return n.ok() ? static_cast<int>(*n) : -1;
}

std::vector<std::string> StandbyEnvironment(const StandbySetup& s) {
  std::vector<std::string> env = {
      fmt::format("{}={}", kEnvSlot, s.slot),
      fmt::format("{}={}", kEnvLauncherPid, s.launcher_pid),
      fmt::format("{}={:.3f}", kEnvLaunchTime, s.launch_time_unix),
  };
  if (s.standby_fd >= 0) env.push_back(fmt::format("{}={}", kEnvStandbyFd, s.standby_fd));
  if (s.launcher_fd >= 0) env.push_back(fmt::format("{}={}", kEnvLauncherFd, s.launcher_fd));
  if (s.run_lock_fd >= 0) env.push_back(fmt::format("{}={}", kEnvRunLockFd, s.run_lock_fd));
  if (!s.heartbeat_dir.empty()) {
    env.push_back(fmt::format("{}={}", kEnvHeartbeatDir, s.heartbeat_dir));
  }
  if (!s.inject.empty()) env.push_back(fmt::format("{}={}", kEnvInject, s.inject));
  if (!s.agent_socket.empty()) {
    env.push_back(fmt::format("{}={}", kEnvAgentSocket, s.agent_socket));
  }
  if (!s.ram_folder.empty()) env.push_back(fmt::format("{}={}", kEnvRamFolder, s.ram_folder));
  if (!s.job_secret.empty()) env.push_back(fmt::format("{}={}", kEnvJobSecret, s.job_secret));
  if (!s.live_store.empty()) {
    env.push_back(fmt::format("{}={}", kEnvLiveStore, LiveStoreUrl(s.live_store)));
    for (const auto& [name, file] : {std::pair{kEnvLiveStoreCa, &s.live_store.ca_file},
                                     std::pair{kEnvLiveStoreCert, &s.live_store.cert_file},
                                     std::pair{kEnvLiveStoreKey, &s.live_store.key_file}}) {
      if (!file->empty()) env.push_back(fmt::format("{}={}", name, *file));
    }
  }
  return env;
}

std::string AssignmentLine(const Assignment& a) {
  return fmt::format(
             "RANK={} WORLD_SIZE={} LOCAL_RANK={} LOCAL_WORLD_SIZE={} MASTER_ADDR={} "
             "MASTER_PORT={} "
             "{}={} {}={:.3f}",
             a.rank, a.world, a.local_rank, a.local_world, a.master_addr, a.master_port,
             kEnvRestartCount, a.generation, kEnvRunElapsed, a.run_elapsed_s) +
         (a.live_incarnation > 0 ? fmt::format(" {}={}", kEnvLiveJoin, a.live_incarnation) : "");
}

}  // namespace tenax::protocol
