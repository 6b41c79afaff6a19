#include "tenax/core/heartbeat.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace tenax {

void Heartbeat(int rank, int64_t step) {
  const char* dir = std::getenv("TENAX_HEARTBEAT_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = std::string(dir) + "/rank-" + std::to_string(rank);
  const std::string tmp = path + ".tmp";
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << step << " " << std::to_string(now) << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::optional<Beat> ReadHeartbeat(const std::string& dir, int rank) {
  std::ifstream in(dir + "/rank-" + std::to_string(rank));
  Beat b;
  if (!(in >> b.step >> b.wall_s)) return std::nullopt;
  return b;
}

}  // namespace tenax
