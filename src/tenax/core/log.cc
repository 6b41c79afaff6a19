#include "tenax/core/log.h"

#include <cstdio>
#include <mutex>

namespace tenax::log {
namespace {
std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
int g_rank = -1;     // written once at start-up, before threads exist
int g_standby = -1;  // likewise, before the assignment
}  // namespace

void SetRank(int rank) { g_rank = rank; }
void SetStandby(int slot) { g_standby = slot; }
int Rank() { return g_rank; }

void Write(const std::string& level, const std::string& message) {
  std::lock_guard<std::mutex> lock(Mu());
  if (g_rank >= 0) {
    std::fprintf(stderr, "[rank %d] %s%s\n", g_rank, level.c_str(), message.c_str());
  } else if (g_standby >= 0) {
    std::fprintf(stderr, "[standby in slot %d] %s%s\n", g_standby, level.c_str(), message.c_str());
  } else {
    std::fprintf(stderr, "%s%s\n", level.c_str(), message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace tenax::log
