// The supervisor's reading of what the trainer records in the run folder (its loss spikes and
// silent-data-corruption detections) into goodput.json; apart from supervisor.cc, which is the
// supervision loop itself.
#include "tenax/launch/supervisor.h"
#include "tenax/report/run_data.h"

namespace tenax::launch {

std::vector<int> Supervisor::SdcNamedRanks(int generation) const {
  std::vector<int> out;
  for (const auto& d : goodput_.sdc()) {
    if (d.value("generation", -1) == generation && d.value("rank", -1) >= 0) {
      out.push_back(d["rank"].get<int>());
    }
  }
  return out;
}

void Supervisor::ReadTrainerRecords() {
  if (goodput_.run_dir().empty()) return;
  Result<std::optional<nlohmann::json>> spikes = report::ReadLossSpikes(goodput_.run_dir());
  if (spikes.ok() && *spikes) goodput_.SetLossSpikes(std::move(**spikes));
  Result<std::optional<nlohmann::json>> sdc = report::ReadSdcDetections(goodput_.run_dir());
  if (sdc.ok() && *sdc) goodput_.SetSdc(std::move(**sdc));
}

}  // namespace tenax::launch
