// The launcher's reading of flight records (flight_recorder.h writes them): given every rank's
// dump after a hang, which rank(s) are the others waiting for. Torch-free and independent of the
// recorder's process, so the launcher links it without the rank side.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/core/status.h"

namespace tenax::protocol {

// What the ranks' dumps say about a hang.
struct FlightAnalysis {
  std::vector<int> waited_on;         // the rank(s) the others wait for, ascending
  std::vector<int> absent;            // ranks without a dump (crashed, or too stuck to dump)
  std::vector<std::string> findings;  // one human-readable line per observation
  std::string Summary() const;        // findings joined, ending with the verdict
};

// `dumps[r]` is rank r's dump (null when it has none). For each group: the newest sequence
// number some member is blocked in; members that have not started it are behind. The verdict
// names the ranks that are behind and not themselves blocked in a collective (stuck outside
// one, e.g. in a long backward or a dead loop), plus ranks that left no dump.
FlightAnalysis AnalyzeFlightRecords(const std::vector<nlohmann::json>& dumps);

// Reads FlightRecordPath(dir, r) for r in [0, world_size); a missing file is a null entry.
Result<std::vector<nlohmann::json>> ReadFlightRecords(FileSystem& fs, const std::string& dir,
                                                      int world_size);

}  // namespace tenax::protocol
