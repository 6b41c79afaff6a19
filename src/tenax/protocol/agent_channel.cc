#include "tenax/protocol/agent_channel.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace tenax::protocol {
namespace {

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("agent socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Reads one line (without the newline) within the deadline; the peer closing ends it too.
Result<std::string> ReadLine(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string line;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Unavailable("timed out waiting for the node agent");
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return line;
    line.append(buf, static_cast<size_t>(got));
    const size_t nl = line.find('\n');
    if (nl != std::string::npos) return line.substr(0, nl);
  }
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Status RequestCommit(const std::string& socket_path, int64_t generation, int64_t step,
                     const nlohmann::json& manifest, double timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::duration<double>(timeout_s));
  TENAX_ASSIGN_OR_RETURN(sockaddr_un addr, Address(socket_path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return Unavailable(fmt::format("cannot reach the node agent at {} to commit step {}: {}",
                                   socket_path, step, std::strerror(err)));
  }
  const nlohmann::json request = {
      {"op", "commit"}, {"generation", generation}, {"step", step}, {"manifest", manifest}};
  Status st = Status::Ok();
  if (!WriteAll(fd, request.dump() + "\n")) {
    st = Unavailable("the node agent closed the channel before the commit request was sent");
  } else {
    Result<std::string> line = ReadLine(fd, deadline);
    if (!line.ok()) {
      st = line.status().WithContext(fmt::format("committing step {}", step));
    } else {
      const auto answer = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
      if (!answer.is_object()) {
        st = Unavailable(
            fmt::format("the node agent gave no answer to the commit of step {}", step));
      } else if (!answer.value("ok", false)) {
        st = Unavailable(fmt::format("the node agent refused to commit step {}: {}", step,
                                     answer.value("error", std::string("no reason given"))));
      }
    }
  }
  ::close(fd);
  return st;
}

Result<std::unique_ptr<AgentChannelServer>> AgentChannelServer::Start(
    const std::string& socket_path, CommitFn on_commit) {
  TENAX_ASSIGN_OR_RETURN(sockaddr_un addr, Address(socket_path));
  ::unlink(socket_path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(std::string("socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError(fmt::format("cannot listen on {}: {}", socket_path, std::strerror(err)));
  }
  return std::unique_ptr<AgentChannelServer>(
      new AgentChannelServer(fd, socket_path, std::move(on_commit)));
}

AgentChannelServer::AgentChannelServer(int listen_fd, std::string path, CommitFn on_commit)
    : listen_fd_(listen_fd), path_(std::move(path)), on_commit_(std::move(on_commit)) {
  if (stop_.ok()) thread_ = std::thread([this] { Loop(); });
}

AgentChannelServer::~AgentChannelServer() {
  StopAndJoin(stop_, thread_);
  ::close(listen_fd_);
  ::unlink(path_.c_str());
}

void AgentChannelServer::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_.read_fd(), POLLIN, 0}};
  for (;;) {
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    ::close(fd);
  }
}

void AgentChannelServer::Serve(int fd) {
  Result<std::string> line =
      ReadLine(fd, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  nlohmann::json answer = {{"ok", false}, {"error", "malformed request"}};
  if (line.ok()) {
    const auto request = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
    if (request.is_object() && request.value("op", std::string()) == "commit") {
      const Status st =
          on_commit_(request.value("generation", int64_t{-1}), request.value("step", int64_t{-1}),
                     request.value("manifest", nlohmann::json::object()));
      answer = st.ok() ? nlohmann::json{{"ok", true}}
                       : nlohmann::json{{"ok", false}, {"error", st.message()}};
    }
  }
  WriteAll(fd, answer.dump() + "\n");
}

}  // namespace tenax::protocol
