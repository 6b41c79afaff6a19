// Slots and the processes in them, for `tenax launch --spares K`. A slot is a local rank position
// (on GPU, a device): slots 0..N-1 start as the ranks' slots, N..N+K-1 as spare slots. Every
// process is started as a standby (protocol/rank_context.h): it does its start-up and blocks
// until Assign writes its rank on the pipe, so a spare started long before a failure joins within
// the time of one assignment instead of a fork-exec-initialise.
//
// Quarantine that helps: a slot is excluded only on evidence that it caused a failure (the
// caller decides; attribution.h), its rank moves to a ready spare, and the failed slot, if still
// healthy, becomes a spare itself. Failures count only while they are recent: a slot with
// `quarantine_after` failures within the last `window_s` seconds is quarantined, and heals when
// they age out of the window. When a rank has no healthy slot left, it keeps running in its own
// slot with a warning: only --max-restarts ends a job, never the slot table.
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
  pid_t pid = -1;  // -1: no process in the slot
  int fd = -1;     // write end of the standby pipe; -1 once assigned
  int local = -1;  // local rank once assigned; -1 while standby
  double started_s = 0;
};

struct QuarantinePolicy {
  int after = 2;           // failures within the window that quarantine a slot
  double window_s = 3600;  // how long a failure counts
};

class SlotTable {
 public:
  // `spawn(slot, read_fd)` forks and execs a standby for `slot` whose assignment arrives on
  // `read_fd`; returns its pid. `now()` is the clock failure ages are measured on (seconds).
  using SpawnFn = std::function<Result<pid_t>(int slot, int read_fd)>;
  using ClockFn = std::function<double()>;
  SlotTable(int ranks, int spares, QuarantinePolicy policy, SpawnFn spawn, ClockFn now);
  ~SlotTable();  // kills and reaps every process still running
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  int size() const { return static_cast<int>(slots_.size()); }
  int SlotOf(int local) const { return rank_slot_[local]; }
  const SlotProcess& process(int slot) const { return slots_[slot].proc; }
  int recent_failures(int slot) const;  // failures within the window, now
  bool quarantined(int slot) const { return recent_failures(slot) >= policy_.after; }
  std::vector<int> QuarantinedSlots() const;
  int ReadySpares() const;  // standby processes in healthy slots no rank uses

  // Starts a standby in every usable slot that has none (refilling the spare pool).
  Status FillStandbys();
  // Gives local rank `local` (in its slot) the assignment line, starting a process there first
  // if the slot has no standby. Returns the pid that took it.
  Result<pid_t> Assign(int local, const std::string& assignment);
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
  // Pids of the assigned processes still running.
  std::vector<pid_t> RankPids() const;

  // Records a failure caused by `slot`'s rank and moves the rank to a ready spare in a healthy
  // slot. Returns the slot now holding the rank: a spare's, or `slot` itself when no spare is
  // ready (run in place; also when `slot` is quarantined and nothing else is left).
  // `at_once`: the failure is proof enough (silent data corruption found by replay): the slot is
  // quarantined now, as if it had failed --quarantine-after times.
  int Exclude(int slot, bool at_once = false);
  // The rank of `slot`, whose process ended through no fault of the slot (live recovery: killed
  // with its replica), starts again sooner in a standby that is already up: moves it to a ready
  // spare in a healthy slot no rank uses, counting no failure against `slot`. Returns the slot now
  // holding the rank (`slot` when it still has a standby, or no spare is ready).
  int TakeReadySpare(int slot);

 private:
  struct Slot {
    SlotProcess proc;
    std::vector<double> failures;  // when each failure happened (ClockFn seconds)
  };
  Status Start(int slot);
  bool Used(int slot) const;
  int LocalIn(int slot) const;  // the local rank in `slot`, or -1
  int ReadySpare() const;       // a standby in a healthy slot no rank uses, or -1

  const QuarantinePolicy policy_;
  SpawnFn spawn_;
  ClockFn now_;
  std::vector<Slot> slots_;
  std::vector<int> rank_slot_;  // local rank -> slot
};

}  // namespace tenax::launch
