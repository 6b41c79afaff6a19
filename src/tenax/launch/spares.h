// Slots and the processes in them, for `tenax launch --spares K`. A slot is a local rank position
// (on GPU, a device): slots 0..N-1 start as the ranks' slots, N..N+K-1 as spare slots. Every
// process is started as a standby (TENAX_STANDBY_FD, see parallel/dist_env.h): it does its
// start-up and blocks until Assign writes its rank on the pipe, so a spare started long before a
// failure joins within the time of one assignment instead of a fork-exec-initialise.
// A slot whose rank failed is excluded: its rank moves to a spare slot with a ready standby, and
// the failed slot (if not quarantined) becomes a spare itself. A slot that failed
// `quarantine_after` times is quarantined for good.
// Thread safety: none; the launcher's supervision loop owns it.
// Non-goals: spares on other nodes (slots are local).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::launch {

struct SlotProcess {
  pid_t pid = -1;    // -1: no process in the slot
  int fd = -1;       // write end of the standby pipe; -1 once assigned
  int local = -1;    // local rank once assigned; -1 while standby
  double started_s = 0;
};

class SlotTable {
 public:
  // `spawn(slot, read_fd)` forks and execs a standby for `slot` whose assignment arrives on
  // `read_fd`; returns its pid.
  using SpawnFn = std::function<Result<pid_t>(int slot, int read_fd)>;
  SlotTable(int ranks, int spares, int quarantine_after, SpawnFn spawn);
  ~SlotTable();  // kills and reaps every process still running
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  int size() const { return static_cast<int>(slots_.size()); }
  int SlotOf(int local) const { return rank_slot_[local]; }
  const SlotProcess& process(int slot) const { return slots_[slot].proc; }
  int failures(int slot) const { return slots_[slot].failures; }
  bool quarantined(int slot) const { return slots_[slot].quarantined; }
  std::vector<int> QuarantinedSlots() const;
  int ReadySpares() const;  // standby processes in slots no rank uses

  // Starts a standby in every usable slot that has none (refilling the spare pool).
  Status FillStandbys();
  // Gives local rank `local` (in its slot) the environment line `assignment`, starting a process
  // there first if the slot has no standby.
  Status Assign(int local, const std::string& assignment);
  // A process ended (reaped by the caller): its slot (-1: not ours) and local rank (-1: it was a
  // standby).
  struct ReapedProcess {
    int slot = -1;
    int local = -1;
  };
  ReapedProcess Reaped(pid_t pid);
  // Signals every assigned process (not the standbys).
  void SignalRanks(int sig);
  int RanksAlive() const;

  // Records a failure of `slot`'s rank and moves the rank elsewhere. Returns the slot now holding
  // the rank, or an error naming the slots when the rank has nowhere left to run.
  Result<int> Exclude(int slot);

 private:
  struct Slot {
    SlotProcess proc;
    int failures = 0;
    bool quarantined = false;
  };
  Status Start(int slot);
  bool Used(int slot) const;

  int quarantine_after_;
  SpawnFn spawn_;
  std::vector<Slot> slots_;
  std::vector<int> rank_slot_;  // local rank -> slot
};

}  // namespace tenax::launch
