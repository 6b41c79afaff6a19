#include "tenax/protocol/flight_recorder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <set>

#include "tenax/core/check.h"
#include "tenax/core/log.h"

namespace tenax::protocol {
namespace {

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json RecordJson(const CollectiveRecord& r) {
  return {{"id", r.id},
          {"op", r.op},
          {"group", r.group},
          {"seq", r.seq},
          {"bytes", r.bytes},
          {"shape", r.shape},
          {"state", StateName(r.state)},
          {"enqueued_unix", r.enqueued_unix},
          {"started_unix", r.started_unix},
          {"completed_unix", r.completed_unix},
          {"step", r.step},
          {"phase", r.phase}};
}

// The signal handler's only state: the write end of the active watchdog's pipe. A handler cannot
// reach an object, so this one global is unavoidable; -1 when no watchdog handles SIGUSR1.
std::atomic<int> g_dump_pipe{-1};
struct sigaction g_previous_action;

void OnSigusr1(int) {
  const int saved = errno;
  const int fd = g_dump_pipe.load();
  if (fd >= 0) {
    const char c = 'd';
    (void)!::write(fd, &c, 1);  // async-signal-safe; a full pipe already means "dump"
  }
  errno = saved;
}

}  // namespace

const char* StateName(CollectiveState s) {
  switch (s) {
    case CollectiveState::kEnqueued:
      return "enqueued";
    case CollectiveState::kStarted:
      return "started";
    case CollectiveState::kCompleted:
      return "completed";
    case CollectiveState::kAbandoned:
      return "abandoned";
  }
  return "?";
}

FlightRecorder::FlightRecorder(int rank, size_t capacity)
    : rank_(rank), capacity_(std::max<size_t>(capacity, 1)), phase_since_unix_(NowUnix()) {}

void FlightRecorder::RegisterGroup(std::string_view group, std::vector<int> global_ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  std::sort(global_ranks.begin(), global_ranks.end());
  groups_[std::string(group)].ranks = std::move(global_ranks);
}

uint64_t FlightRecorder::Add(std::string_view op, std::string_view group, int64_t bytes,
                             std::string shape, CollectiveState state) {
  const double now = NowUnix();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) it = groups_.emplace(std::string(group), GroupInfo{}).first;
  GroupInfo& g = it->second;
  CollectiveRecord r;
  r.id = next_id_++;
  r.op = std::string(op);
  r.group = std::string(group);
  r.seq = g.next_seq++;
  r.bytes = bytes;
  r.shape = std::move(shape);
  r.state = state;
  r.enqueued_unix = now;
  if (state == CollectiveState::kStarted) {
    r.started_unix = now;
    g.last_started_seq = r.seq;
  }
  r.step = step_;
  r.phase = phase_;
  if (ring_.size() == capacity_) ring_.pop_front();
  ring_.push_back(std::move(r));
  return ring_.back().id;
}

uint64_t FlightRecorder::Begin(std::string_view op, std::string_view group, int64_t bytes,
                               std::string shape) {
  return Add(op, group, bytes, std::move(shape), CollectiveState::kStarted);
}

uint64_t FlightRecorder::Enqueue(std::string_view op, std::string_view group, int64_t bytes,
                                 std::string shape) {
  return Add(op, group, bytes, std::move(shape), CollectiveState::kEnqueued);
}

CollectiveRecord* FlightRecorder::Find(uint64_t id) {
  // Ids increase along the ring, so the position follows from the front's id.
  if (ring_.empty() || id < ring_.front().id) return nullptr;
  const uint64_t offset = id - ring_.front().id;
  return offset < ring_.size() ? &ring_[offset] : nullptr;
}

void FlightRecorder::Start(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveRecord* r = Find(id);
  if (r == nullptr || r->state != CollectiveState::kEnqueued) return;
  r->state = CollectiveState::kStarted;
  r->started_unix = NowUnix();
  GroupInfo& g = groups_[r->group];
  g.last_started_seq = std::max(g.last_started_seq, r->seq);
}

void FlightRecorder::End(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveRecord* r = Find(id);
  if (r == nullptr || r->state == CollectiveState::kCompleted ||
      r->state == CollectiveState::kAbandoned) {
    return;
  }
  const double now = NowUnix();
  if (r->started_unix == 0) r->started_unix = now;
  r->state = CollectiveState::kCompleted;
  r->completed_unix = now;
  GroupInfo& g = groups_[r->group];
  g.last_started_seq = std::max(g.last_started_seq, r->seq);
  g.last_completed_seq = std::max(g.last_completed_seq, r->seq);
}

void FlightRecorder::EndWhen(uint64_t id, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(probes_mu_);
  probes_.emplace_back(id, std::move(done));
}

size_t FlightRecorder::Poll() {
  std::vector<std::pair<uint64_t, std::function<bool()>>> probes;
  {
    std::lock_guard<std::mutex> lock(probes_mu_);
    probes.swap(probes_);
  }
  std::vector<std::pair<uint64_t, std::function<bool()>>> waiting;
  for (auto& p : probes) {
    bool ended = false;  // by End meanwhile (the caller waited for it), or evicted from the ring
    {
      std::lock_guard<std::mutex> lock(mu_);
      const CollectiveRecord* r = Find(p.first);
      ended = r == nullptr || r->state == CollectiveState::kCompleted ||
              r->state == CollectiveState::kAbandoned;
    }
    if (ended || p.second()) {
      End(p.first);
    } else {
      waiting.push_back(std::move(p));
    }
  }
  std::lock_guard<std::mutex> lock(probes_mu_);
  // Probes added while these were asked come after them: the list stays in issue order.
  waiting.insert(waiting.end(), std::make_move_iterator(probes_.begin()),
                 std::make_move_iterator(probes_.end()));
  probes_.swap(waiting);
  return probes_.size();
}

void FlightRecorder::SetPhase(int64_t step, std::string_view phase) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
  if (phase_ != phase) {
    phase_ = std::string(phase);
    phase_since_unix_ = NowUnix();
  }
}

std::optional<CollectiveRecord> FlightRecorder::OldestPending() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : ring_) {
    if (r.state != CollectiveState::kCompleted && r.state != CollectiveState::kAbandoned) return r;
  }
  return std::nullopt;
}

size_t FlightRecorder::AbandonPending() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& r : ring_) {
    if (r.state == CollectiveState::kCompleted || r.state == CollectiveState::kAbandoned) continue;
    r.state = CollectiveState::kAbandoned;
    ++n;
  }
  return n;
}

std::vector<CollectiveRecord> FlightRecorder::Records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {ring_.begin(), ring_.end()};
}

nlohmann::json FlightRecorder::ToJson(std::string_view reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json collectives = nlohmann::json::array();
  for (const auto& r : ring_) collectives.push_back(RecordJson(r));
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [name, g] : groups_) {
    groups[name] = {{"ranks", g.ranks},
                    {"last_started_seq", g.last_started_seq},
                    {"last_completed_seq", g.last_completed_seq}};
  }
  return {{"format", "tenax-flight-record"},
          {"format_version", 1},
          {"rank", rank_},
          {"pid", static_cast<int64_t>(::getpid())},
          {"reason", std::string(reason)},
          {"dumped_unix", NowUnix()},
          {"step", step_},
          {"phase", phase_},
          {"phase_since_unix", phase_since_unix_},
          {"groups", groups},
          {"collectives", collectives}};
}

Status FlightRecorder::Dump(FileSystem& fs, const std::string& path,
                            std::string_view reason) const {
  const std::string parent = ParentDir(path);
  if (!parent.empty()) TENAX_RETURN_IF_ERROR(fs.CreateDirs(parent));
  return fs.WriteFileAtomic(path, ToJson(reason).dump(1) + "\n");
}

// ---------------------------------------------------------------------------------------------

FlightRecorderWatchdog::FlightRecorderWatchdog(FlightRecorder& recorder, FileSystem& fs,
                                               WatchdogOptions options)
    : recorder_(recorder), fs_(fs), options_(std::move(options)) {
  TENAX_CHECK(::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) == 0);
  if (options_.handle_sigusr1) {
    int expected = -1;
    // Two handlers would race for one signal: a bug in the caller.
    TENAX_CHECK(g_dump_pipe.compare_exchange_strong(expected, pipe_[1]));
    struct sigaction sa {};
    sa.sa_handler = OnSigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // interrupted syscalls in the training threads resume
    TENAX_CHECK(::sigaction(SIGUSR1, &sa, &g_previous_action) == 0);
  }
  thread_ = std::thread([this] { Loop(); });
}

FlightRecorderWatchdog::~FlightRecorderWatchdog() {
  if (options_.handle_sigusr1) {
    (void)::sigaction(SIGUSR1, &g_previous_action, nullptr);
    g_dump_pipe.store(-1);
  }
  const char quit = 'q';
  (void)!::write(pipe_[1], &quit, 1);
  thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void FlightRecorderWatchdog::DumpNow(std::string_view reason) {
  recorder_.Poll();  // what has finished by now is recorded as finished
  Status st = recorder_.Dump(fs_, options_.dump_path, reason);
  if (!st.ok()) {
    log::Error("flight recorder: could not write {}: {}", options_.dump_path, st.message());
    return;
  }
  dumps_.fetch_add(1);
  log::Warn("flight recorder: dumped the last collectives to {} ({})", options_.dump_path, reason);
}

void FlightRecorderWatchdog::Loop() {
  const int timeout_ms = static_cast<int>(std::max<int64_t>(options_.poll_interval.count(), 1));
  // While EndWhen probes wait, they are asked every few milliseconds: each holds its collective's
  // work, and with it the tensors c10d keeps until the collective is done.
  constexpr int kProbeMs = 5;
  int wait_ms = timeout_ms;
  while (true) {
    pollfd p{pipe_[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    wait_ms = recorder_.Poll() > 0 ? std::min(kProbeMs, timeout_ms) : timeout_ms;
    if (ready > 0) {
      char buf[64];
      const ssize_t n = ::read(pipe_[0], buf, sizeof(buf));
      bool quit = false, dump = false;
      for (ssize_t i = 0; i < n; ++i) {
        quit |= buf[i] == 'q';
        dump |= buf[i] == 'd';
      }
      if (quit) return;
      if (dump) DumpNow("SIGUSR1");
    }
    if (options_.collective_timeout.count() <= 0) continue;
    std::optional<CollectiveRecord> oldest = recorder_.OldestPending();
    if (!oldest || oldest->id == timed_out_id_) continue;
    const double since = oldest->started_unix > 0 ? oldest->started_unix : oldest->enqueued_unix;
    const double age_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
        since;
    const double limit_s = std::chrono::duration<double>(options_.collective_timeout).count();
    if (age_s < limit_s) continue;
    timed_out_id_ = oldest->id;
    DumpNow("collective timeout");
    if (options_.on_timeout) {
      options_.on_timeout(*oldest);
    } else {
      log::Error(
          "collective timeout: {} on group {} (seq {}, {} bytes, issued in step {} {}) has not "
          "completed after {:.0f} s (limit {:.0f} s); flight record in {}; exiting with code {} "
          "so the launcher restarts the job",
          oldest->op, oldest->group, oldest->seq, oldest->bytes, oldest->step, oldest->phase, age_s,
          limit_s, options_.dump_path, ToInt(ExitCode::kCollectiveTimeout));
      // Other threads are blocked inside the collective: no destructor could finish.
      std::_Exit(ToInt(ExitCode::kCollectiveTimeout));
    }
  }
}

}  // namespace tenax::protocol
