// Progress heartbeats from ranks to the launcher: after every step a rank overwrites
// $TENAX_HEARTBEAT_DIR/rank-R with "STEP WALL_SECONDS" (temp file + rename, no fsync: losing a
// beat on a machine crash is harmless, a torn one is not). The launcher reads the files to tell
// a hang (no rank progresses) from a slow step. Absent variable: beats are no-ops.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tenax {

void Heartbeat(int rank, int64_t step);

struct Beat {
  int64_t step = 0;
  double wall_s = 0;  // the rank's clock (seconds since the epoch)
};
std::optional<Beat> ReadHeartbeat(const std::string& dir, int rank);

}  // namespace tenax
