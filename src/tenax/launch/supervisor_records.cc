// The supervisor's records, apart from supervisor.cc, which is the supervision loop itself: the
// status the live page shows (Publish), goodput.json (WriteGoodput), and its reading of what the
// trainer records in the run folder (its loss spikes and silent-data-corruption detections).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/launch/supervisor.h"
#include "tenax/report/run_data.h"

namespace tenax::launch {

void Supervisor::Publish(int gen, bool force) {
  if (monitor_) {
    nlohmann::json ranks = nlohmann::json::array();
    int alive = 0;
    for (int local = 0; local < o_.nproc_per_node; ++local) {
      const int slot = slots_->SlotOf(local);
      const SlotProcess& p = slots_->process(slot);
      const bool up = p.pid > 0 && p.local == local;
      alive += up;
      const protocol::Beat& b = g_.beats[local];
      ranks.push_back({{"rank", Rank(local)},
                       {"slot", slot},
                       {"pid", up ? p.pid : -1},
                       {"alive", up},
                       {"step", b.step},
                       {"phase", protocol::PhaseName(b.phase)},
                       {"host", b.host},
                       {"tokens_per_s", b.tokens_per_s}});
    }
    const double wall = Elapsed();
    nlohmann::json status = {{"time_s", wall},
                             {"generation", gen},
                             {"ranks_alive", alive},
                             {"ranks", ranks},
                             {"step", goodput_.step()},
                             {"tokens_per_s", goodput_.tokens_per_s()},
                             {"restarts", goodput_.restarts()},
                             {"failures", goodput_.failure_count()},
                             {"spares_ready", slots_->ReadySpares()},
                             {"quarantined_slots", slots_->QuarantinedSlots()},
                             {"stragglers", straggler_count_},
                             {"goodput", goodput_.Report(wall, 0, false)}};
    monitor_->Update(status, force);
  }
  // goodput.json follows the run while it runs, so a launcher that is killed leaves its part
  // behind for the next launch of the run (goodput.h).
  if (force || Elapsed() - last_goodput_write_ >= 1.0) WriteGoodput(false, 0);
}

void Supervisor::WriteGoodput(bool ended, int exit_code) {
  if (schedule_) goodput_.SetFaultSchedule(schedule_->Report());
  if (job_.goodput_path.empty()) return;
  last_goodput_write_ = Elapsed();
  Status st = LocalFs().WriteFileAtomic(
      job_.goodput_path, goodput_.Report(Elapsed(), exit_code, ended).dump(2) + "\n");
  if (!st.ok()) log::Warn("launch: could not write {}: {}", job_.goodput_path, st.message());
}

std::vector<int> Supervisor::SdcNamedRanks(int generation) const {
  std::vector<int> out;
  for (const auto& d : goodput_.sdc()) {
    if (d.value("generation", -1) == generation && d.value("rank", -1) >= 0) {
      out.push_back(d["rank"].get<int>());
    }
  }
  return out;
}

void Supervisor::NameSdcRankFromRecords(int gen, Verdict* verdict) {
  Verdict& v = *verdict;
  if (v.kind != protocol::FailureKind::kSilentCorruption) return;
  // Only the named ranks' peers ended within the window (the named ones were slower to exit,
  // as on a loaded machine): the check's records, written before any rank exits, name them.
  // Only this node's: a rank named on another node is that node's verdict (its agent names it;
  // this node's ranks only stopped with it).
  ReadTrainerRecords();
  std::vector<int> named;
  for (int r : SdcNamedRanks(gen)) {
    if (Local(r) >= 0 && Local(r) < o_.nproc_per_node) named.push_back(r);
  }
  if (!named.empty()) {
    v.rank = named.front();
    v.host = g_.beats[Local(v.rank)].host;
    v.reasoning += fmt::format("{}rank {} named by the check's record (its peers ended first)",
                               v.reasoning.empty() ? "" : "; ", fmt::join(named, ", "));
  }
}

void Supervisor::ReadTrainerRecords() {
  if (goodput_.run_dir().empty()) return;
  Result<std::optional<nlohmann::json>> spikes = report::ReadLossSpikes(goodput_.run_dir());
  if (spikes.ok() && *spikes) goodput_.SetLossSpikes(std::move(**spikes));
  Result<std::optional<nlohmann::json>> sdc = report::ReadSdcDetections(goodput_.run_dir());
  if (sdc.ok() && *sdc) goodput_.SetSdc(std::move(**sdc));
}

}  // namespace tenax::launch
