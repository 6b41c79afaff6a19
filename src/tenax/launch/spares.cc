#include "tenax/launch/spares.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "tenax/core/log.h"

namespace tenax::launch {
namespace {

double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s.empty() ? "none" : s;
}

}  // namespace

SlotTable::SlotTable(int ranks, int spares, int quarantine_after, SpawnFn spawn)
    : quarantine_after_(quarantine_after), spawn_(std::move(spawn)), slots_(ranks + spares) {
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

bool SlotTable::Used(int slot) const {
  for (int s : rank_slot_) {
    if (s == slot) return true;
  }
  return false;
}

std::vector<int> SlotTable::QuarantinedSlots() const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) {
    if (slots_[i].quarantined) out.push_back(i);
  }
  return out;
}

int SlotTable::ReadySpares() const {
  int n = 0;
  for (int i = 0; i < size(); ++i) {
    const SlotProcess& p = slots_[i].proc;
    if (!Used(i) && !slots_[i].quarantined && p.pid > 0 && p.local < 0) ++n;
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
  slots_[slot].proc = SlotProcess{*pid, fds[1], -1, Now()};
  return Status::Ok();
}

Status SlotTable::FillStandbys() {
  for (int i = 0; i < size(); ++i) {
    if (slots_[i].quarantined || slots_[i].proc.pid > 0) continue;
    TENAX_RETURN_IF_ERROR(Start(i));
  }
  return Status::Ok();
}

Status SlotTable::Assign(int local, const std::string& assignment) {
  const int slot = rank_slot_[local];
  SlotProcess& p = slots_[slot].proc;
  if (p.pid <= 0 || p.fd < 0) TENAX_RETURN_IF_ERROR(Start(slot));
  const std::string line = assignment + "\n";
  const ssize_t n = ::write(p.fd, line.data(), line.size());
  ::close(p.fd);
  p.fd = -1;
  if (n != static_cast<ssize_t>(line.size())) {
    return Unavailable(fmt::format("the standby process {} in slot {} did not take its "
                                   "assignment ({})",
                                   p.pid, slot, std::strerror(errno)));
  }
  p.local = local;
  return Status::Ok();
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

Result<int> SlotTable::Exclude(int slot) {
  Slot& failed = slots_[slot];
  int local = -1;
  for (size_t r = 0; r < rank_slot_.size(); ++r) {
    if (rank_slot_[r] == slot) local = static_cast<int>(r);
  }
  if (local < 0) return slot;
  ++failed.failures;
  if (failed.failures >= quarantine_after_ && !failed.quarantined) {
    failed.quarantined = true;
    log::Warn("launch: slot {} failed {} time(s): quarantined", slot, failed.failures);
  }
  for (int i = 0; i < size(); ++i) {
    const SlotProcess& p = slots_[i].proc;
    if (Used(i) || slots_[i].quarantined || p.pid <= 0 || p.local >= 0) continue;
    rank_slot_[local] = i;
    log::Info("launch: slot {} excluded; the spare in slot {} (pid {}, ready for {:.1f}s) takes "
              "its rank",
              slot, i, p.pid, Now() - p.started_s);
    return i;
  }
  if (!failed.quarantined) return slot;  // no spare: run again in place
  return Unavailable(fmt::format(
      "local rank {} has nowhere to run: its slot {} is quarantined after {} failure(s) and no "
      "spare is left (quarantined slots: {}; --spares adds standby slots, --quarantine-after "
      "raises the limit)",
      local, slot, failed.failures, Join(QuarantinedSlots())));
}

}  // namespace tenax::launch
