#include "tenax/launch/spares.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tenax/core/log.h"

namespace tenax::launch {

SlotTable::SlotTable(int ranks, int spares, QuarantinePolicy policy, SpawnFn spawn, ClockFn now)
    : policy_(policy), spawn_(std::move(spawn)), now_(std::move(now)), slots_(ranks + spares) {
  for (int i = 0; i < ranks; ++i) rank_slot_.push_back(i);
}

SlotTable::~SlotTable() {
  // Kill before closing the pipes: a standby that reads end of file says so on stderr.
  for (Slot& s : slots_) {
    if (s.proc.pid > 0) {
      ::kill(s.proc.pid, SIGKILL);
      ::waitpid(s.proc.pid, nullptr, 0);
    }
    if (s.proc.fd >= 0) ::close(s.proc.fd);
  }
}

int SlotTable::recent_failures(int slot) const {
  const double now = now_();
  int n = 0;
  for (double t : slots_[slot].failures) n += now - t < policy_.window_s;
  return n;
}

bool SlotTable::Used(int slot) const {
  for (int s : rank_slot_) {
    if (s == slot) return true;
  }
  return false;
}

std::vector<int> SlotTable::QuarantinedSlots() const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) {
    if (quarantined(i)) out.push_back(i);
  }
  return out;
}

int SlotTable::ReadySpares() const {
  int n = 0;
  for (int i = 0; i < size(); ++i) {
    const SlotProcess& p = slots_[i].proc;
    if (!Used(i) && !quarantined(i) && p.pid > 0 && p.local < 0) ++n;
  }
  return n;
}

Status SlotTable::Start(int slot) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return IoError(std::string("pipe for a standby process: ") + std::strerror(errno));
  }
  Result<pid_t> pid = spawn_(slot, fds[0]);
  ::close(fds[0]);
  if (!pid.ok()) {
    ::close(fds[1]);
    return pid.status();
  }
  slots_[slot].proc = SlotProcess{*pid, fds[1], -1, now_()};
  return Status::Ok();
}

Status SlotTable::FillStandbys() {
  for (int i = 0; i < size(); ++i) {
    // A quarantined slot no rank uses gets no standby: nobody would take it while it heals.
    if (slots_[i].proc.pid > 0 || (quarantined(i) && !Used(i))) continue;
    TENAX_RETURN_IF_ERROR(Start(i));
  }
  return Status::Ok();
}

Result<pid_t> SlotTable::Assign(int local, const std::string& assignment) {
  const int slot = rank_slot_[local];
  SlotProcess& p = slots_[slot].proc;
  if (p.pid <= 0 || p.fd < 0) TENAX_RETURN_IF_ERROR(Start(slot));
  const std::string line = assignment + "\n";
  const ssize_t n = ::write(p.fd, line.data(), line.size());
  ::close(p.fd);
  p.fd = -1;
  if (n != static_cast<ssize_t>(line.size())) {
    return Unavailable(
        fmt::format("the standby process {} in slot {} did not take its "
                    "assignment ({})",
                    p.pid, slot, std::strerror(errno)));
  }
  p.local = local;
  return p.pid;
}

SlotTable::ReapedProcess SlotTable::Reaped(pid_t pid) {
  for (int i = 0; i < size(); ++i) {
    SlotProcess& p = slots_[i].proc;
    if (p.pid != pid) continue;
    if (p.fd >= 0) ::close(p.fd);
    const ReapedProcess r{i, p.local};
    p = SlotProcess{};
    return r;
  }
  return {};
}

void SlotTable::SignalRanks(int sig) {
  for (const Slot& s : slots_) {
    if (s.proc.pid > 0 && s.proc.local >= 0) ::kill(s.proc.pid, sig);
  }
}

int SlotTable::RanksAlive() const {
  int n = 0;
  for (const Slot& s : slots_) n += s.proc.pid > 0 && s.proc.local >= 0;
  return n;
}

std::vector<pid_t> SlotTable::RankPids() const {
  std::vector<pid_t> out;
  for (const Slot& s : slots_) {
    if (s.proc.pid > 0 && s.proc.local >= 0) out.push_back(s.proc.pid);
  }
  return out;
}

int SlotTable::LocalIn(int slot) const {
  int local = -1;
  for (size_t r = 0; r < rank_slot_.size(); ++r) {
    if (rank_slot_[r] == slot) local = static_cast<int>(r);
  }
  return local;
}

int SlotTable::ReadySpare() const {
  for (int i = 0; i < size(); ++i) {
    const SlotProcess& p = slots_[i].proc;
    if (!Used(i) && !quarantined(i) && p.pid > 0 && p.local < 0) return i;
  }
  return -1;
}

int SlotTable::TakeReadySpare(int slot) {
  const int local = LocalIn(slot);
  const SlotProcess& own = slots_[slot].proc;
  if (local < 0 || (own.pid > 0 && own.fd >= 0)) return slot;  // a standby waits there already
  const int i = ReadySpare();
  if (i < 0) return slot;
  rank_slot_[local] = i;
  const SlotProcess& p = slots_[i].proc;
  log::Info("launch: the spare in slot {} (pid {}, ready for {:.1f}s) takes slot {}'s rank", i,
            p.pid, now_() - p.started_s, slot);
  return i;
}

int SlotTable::Exclude(int slot, bool at_once) {
  const int local = LocalIn(slot);
  if (local < 0) return slot;
  slots_[slot].failures.push_back(now_());
  while (at_once && !quarantined(slot)) slots_[slot].failures.push_back(now_());
  if (at_once) {
    log::Warn("launch: slot {} computed wrong results (found by replay): quarantined at once",
              slot);
  } else if (quarantined(slot)) {
    log::Warn(
        "launch: slot {} failed {} time(s) in the last {:g}s (--quarantine-after {}, "
        "--quarantine-window): quarantined",
        slot, recent_failures(slot), policy_.window_s, policy_.after);
  }
  if (const int i = ReadySpare(); i >= 0) {
    rank_slot_[local] = i;
    const SlotProcess& p = slots_[i].proc;
    log::Info(
        "launch: slot {} excluded; the spare in slot {} (pid {}, ready for {:.1f}s) takes "
        "its rank",
        slot, i, p.pid, now_() - p.started_s);
    return i;
  }
  if (quarantined(slot)) {
    log::Warn(
        "launch: local rank {} has no healthy slot left (quarantined: {}); it runs again "
        "in slot {}: the restart policy decides when the job stops",
        local, fmt::join(QuarantinedSlots(), ", "), slot);
  }
  return slot;  // no ready spare: run again in place
}

}  // namespace tenax::launch
