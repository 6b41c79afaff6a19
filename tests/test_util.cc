#include "test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tenax::testing {
namespace {
std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}
}  // namespace

std::string SourceDir() { return Env("TENAX_SOURCE_DIR", TENAX_SOURCE_DIR_DEFAULT); }
std::string TenaxBinary() { return Env("TENAX_BINARY", TENAX_BINARY_DEFAULT); }
std::string Python() { return Env("TENAX_PYTHON", TENAX_PYTHON_DEFAULT); }

CommandResult Run(const std::string& command, const std::string& cwd) {
  const std::string full = "cd '" + cwd + "' && " + command + " 2>&1";
  CommandResult r;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

CommandResult RunTenax(const std::string& args, const std::string& cwd) {
  return Run("'" + TenaxBinary() + "' " + args, cwd);
}

CommandResult RunTenaxStdout(const std::string& args, const std::string& cwd) {
  return Run("{ '" + TenaxBinary() + "' " + args + " 2>/dev/null; }", cwd);
}

Background::Background(const std::vector<std::string>& args, const std::string& cwd,
                       std::string log)
    : Background(
          Program{},
          [&] {
            std::vector<std::string> argv = {TenaxBinary()};
            argv.insert(argv.end(), args.begin(), args.end());
            return argv;
          }(),
          cwd, std::move(log)) {}

Background::Background(Program, const std::vector<std::string>& program, const std::string& cwd,
                       std::string log)
    : log_(std::move(log)) {
  std::vector<std::string> argv_s = program;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
}

Background::~Background() {
  if (pid_ > 0 && exit_code_ < 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

int Background::Wait(double timeout_s) {
  if (exit_code_ >= 0) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Background::output() const { return ReadFile(log_); }

bool WaitFor(const std::function<bool()>& condition, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> Descendants(pid_t pid) {
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {pid};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    std::error_code ec;
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(p) + "/task", ec)) {
      std::stringstream children(ReadFile(task.path().string() + "/children"));
      for (pid_t c; children >> c;) {
        out.push_back(c);
        todo.push_back(c);
      }
    }
  }
  return out;
}

bool Alive(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<double> ReadMetric(const std::string& metrics_jsonl, const std::string& key) {
  std::vector<double> out;
  for (const auto& j : ReadJsonl(metrics_jsonl)) {
    if (j.contains(key)) out.push_back(j[key].get<double>());
  }
  return out;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  }
  ::close(fd);
  return out;
}

std::string ResilienceTrain(const std::string& dump, const std::string& name,
                            const std::string& extra) {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 "
         "--set metrics.eval_interval=5 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=3 --set training.steps=12 --set training.local_batch_size=4 "
         "--set job.dump_folder=" +
         dump + " --set job.name=" + name + " " + extra;
}

std::string MultiNodeTrain(const std::string& dump, const std::string& name, int steps) {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=80000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=1024 "
         "--set metrics.eval_interval=1000 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=4 --set training.steps=" +
         std::to_string(steps) +
         " --set training.local_batch_size=2 --set job.dump_folder=" + dump +
         " --set job.name=" + name;
}

std::string MultiNodeShard(const std::string& dump, const std::string& run, int step, int shard) {
  char name[160];
  std::snprintf(name, sizeof(name), "/%s/checkpoints/step_%08d/model-rank%05d-of-00004.safetensors",
                run.c_str(), step, shard);
  return ReadFile(dump + name);
}

}  // namespace tenax::testing
