#include "tenax/core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tenax/core/fs.h"
#include "tenax/core/sigpipe.h"

extern char** environ;

namespace tenax {
namespace {

// Closes the fds it owns on every exit path.
struct Pipes {
  int fd[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};  // stdin, stdout, stderr: {read, write}
  ~Pipes() {
    for (auto& p : fd) {
      for (int& f : p) {
        if (f >= 0) ::close(f);
        f = -1;
      }
    }
  }
  static void Close(int& f) {
    if (f >= 0) ::close(f);
    f = -1;
  }
};

}  // namespace

Result<ProcessResult> RunProcess(const std::vector<std::string>& argv, std::string_view input) {
  if (argv.empty()) return InvalidArgument("RunProcess: empty argv");
  Pipes pipes;
  for (auto& p : pipes.fd) {
    if (::pipe2(p, O_CLOEXEC) != 0) return IoError("pipe: " + ErrnoText(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipes.fd[0][0], 0);
  posix_spawn_file_actions_adddup2(&actions, pipes.fd[1][1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipes.fd[2][1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child must not inherit our blocked SIGPIPE (or any other blocked signal).
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = argv[0].find('/') == std::string::npos
                     ? ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ)
                     : ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return IoError("cannot run " + argv[0] + ": " + ErrnoText(rc));
  Pipes::Close(pipes.fd[0][0]);
  Pipes::Close(pipes.fd[1][1]);
  Pipes::Close(pipes.fd[2][1]);
  // Our ends must not block: poll() promises only *some* room or data, and a blocking write
  // larger than the free space would wait for a child that is itself waiting for us to read.
  for (int fd : {pipes.fd[0][1], pipes.fd[1][0], pipes.fd[2][0]}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  ProcessResult result;
  {
    ScopedBlockSigpipe guard;
    size_t written = 0;
    int& in = pipes.fd[0][1];
    int& out = pipes.fd[1][0];
    int& err = pipes.fd[2][0];
    if (input.empty()) Pipes::Close(in);
    char buf[1 << 16];
    while (in >= 0 || out >= 0 || err >= 0) {
      struct pollfd fds[3];
      int n = 0;
      if (in >= 0) fds[n++] = {in, POLLOUT, 0};
      if (out >= 0) fds[n++] = {out, POLLIN, 0};
      if (err >= 0) fds[n++] = {err, POLLIN, 0};
      if (::poll(fds, static_cast<nfds_t>(n), -1) < 0) {
        if (errno == EINTR) continue;
        break;  // the pipes are closed below; waitpid still reaps the child
      }
      for (int i = 0; i < n; ++i) {
        if (fds[i].revents == 0) continue;
        if (fds[i].fd == in) {
          const ssize_t w = ::write(in, input.data() + written, input.size() - written);
          if (w > 0) written += static_cast<size_t>(w);
          // EPIPE: the child stopped reading (it failed); its stderr says why.
          if ((w < 0 && errno != EINTR && errno != EAGAIN) || written == input.size()) {
            Pipes::Close(in);
          }
        } else {
          int& fd = fds[i].fd == out ? out : err;
          const ssize_t r = ::read(fd, buf, sizeof(buf));
          if (r > 0) {
            (fds[i].fd == out ? result.out : result.err).append(buf, static_cast<size_t>(r));
          } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
            Pipes::Close(fd);
          }
        }
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return IoError("waitpid " + argv[0] + ": " + ErrnoText(errno));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string ExecutableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return ParentDir(std::string(buf, static_cast<size_t>(n)));
}

Result<std::string> FindHelperProgram(const std::string& name, const char* env_var,
                                      const std::string& help) {
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') {
    if (::access(env, X_OK) == 0) return std::string(env);
    return NotFound(std::string(env_var) + "=" + env + " is not an executable file; " + help);
  }
  const std::string dir = ExecutableDir();
  for (const std::string& d : {dir, ParentDir(dir)}) {
    const std::string candidate = JoinPath(d, name);
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    const std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      const std::string candidate = JoinPath(p.substr(start, end - start), name);
      if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
      start = end + 1;
    }
  }
  return NotFound(name + " was not found beside this program or in PATH; " + help);
}

}  // namespace tenax
