#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

}  // namespace tenax::testing
