#include "tenax/parallel/live_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "tenax/core/check.h"
#include "tenax/core/crc32.h"
#include "tenax/core/sha256.h"

namespace tenax::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The record's JSON travels in a fixed-size buffer: every member must pass the same shape.
constexpr int64_t kRecordBytes = 4096;

}  // namespace

LiveGroup::LiveGroup(Options options) : options_(std::move(options)) {}

LiveGroup::~LiveGroup() = default;

Status LiveGroup::Form(const protocol::LiveMembership& m) {
  Leave();
  const auto me = std::find(m.members.begin(), m.members.end(), options_.slot);
  if (me == m.members.end()) {
    return Internal(
        fmt::format("slot {} is not a member of live epoch {}", options_.slot, m.epoch));
  }
  const int rank = static_cast<int>(me - m.members.begin());
  const int size = static_cast<int>(m.members.size());
  if (options_.etcd && !etcd_) {
    TENAX_ASSIGN_OR_RETURN(etcd_, etcd::EtcdClient::Create(*options_.etcd));
  }
  const std::string path =
      etcd_ ? fmt::format("{}{}-epoch-{}/", options_.etcd_prefix, options_.name, m.epoch)
            : fmt::format("{}/{}-epoch-{}", options_.store_dir, options_.name, m.epoch);
  if (etcd_ && std::find(met_.begin(), met_.end(), path) == met_.end()) met_.push_back(path);
  const auto t0 = Clock::now();
  TENAX_RETURN_IF_ERROR(AwaitCheckIns(m, path));
  const auto checked_in = Clock::now();
  GroupOptions o = options_.group;
  // One member alone still gets a real group: the code path stays the same.
  o.c10d_for_one_rank = true;
  // A member that checked in and died before it connected: the launcher's next epoch ends the
  // others' wait for it.
  // (A record unreadable at the moment is read again at the next poll.)
  o.give_up = [this, m]() -> std::optional<std::string> {
    Result<std::optional<std::string>> newer = Superseded(m);
    return newer.ok() ? *newer : std::nullopt;
  };
  // A collective waiting on a member the launcher dropped since (its node cut off: its
  // connections neither answer nor close) gives up then, not at the group's timeout.
  o.abandon = [this, m]() -> std::optional<std::string> {
    Result<std::optional<std::string>> dropped = Dropped(m);
    return dropped.ok() ? *dropped : std::nullopt;
  };
  Result<std::unique_ptr<Communicator>> formed =
      etcd_ ? ConnectEtcdStoreGroup(*options_.etcd, path + "store/", rank, size, o)
            : ConnectFileStoreGroup(path, rank, size, o);
  if (!formed.ok()) {
    Result<std::optional<std::string>> newer = Superseded(m);
    if (newer.ok() && *newer) {
      return PeerLost(
          fmt::format("{} while its members connected ({})", **newer, formed.status().message()));
    }
    return formed.status();
  }
  comm_ = std::move(*formed);
  last_form_ = {std::chrono::duration<double>(checked_in - t0).count(), Since(checked_in)};
  if (etcd_) {
    // The older epochs' keys: every member of this one has left them (best effort: a key left
    // behind is only a few bytes in etcd).
    for (const std::string& old : met_) {
      if (old != path) (void)etcd_->DeletePrefix(old);
    }
    met_ = {path};
  }
  membership_ = m;
  return Status::Ok();
}

Status LiveGroup::CheckIn(const std::string& path) {
  const std::string mark = etcd_ ? fmt::format("{}in-{}", path, options_.slot)
                                 : fmt::format("{}.in-{}", path, options_.slot);
  if (etcd_) return etcd_->Put(mark, "1").status();
  std::ofstream out(mark);
  if (!out) return IoError("cannot write " + mark);
  return Status::Ok();
}

Result<bool> LiveGroup::AllCheckedIn(const protocol::LiveMembership& m, const std::string& path) {
  if (etcd_) {
    TENAX_ASSIGN_OR_RETURN(etcd::RangeResponse in, etcd_->GetPrefix(path + "in-"));
    for (int slot : m.members) {
      const std::string key = fmt::format("{}in-{}", path, slot);
      if (std::none_of(in.kvs.begin(), in.kvs.end(),
                       [&](const etcd::KeyValue& kv) { return kv.key == key; }))
        return false;
    }
    return true;
  }
  std::error_code ec;
  for (int slot : m.members) {
    if (!std::filesystem::exists(fmt::format("{}.in-{}", path, slot), ec)) return false;
  }
  return true;
}

Result<std::optional<protocol::LiveMembership>> LiveGroup::Newer(
    const protocol::LiveMembership& m) const {
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> now,
                         protocol::ReadLiveMembership(options_.store_dir));
  if (!now || now->generation != m.generation || now->epoch <= m.epoch)
    return std::optional<protocol::LiveMembership>();
  return now;
}

Result<std::optional<std::string>> LiveGroup::Superseded(const protocol::LiveMembership& m) const {
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> now, Newer(m));
  if (!now) return std::optional<std::string>();
  return std::optional<std::string>(
      fmt::format("live epoch {} was superseded by epoch {}", m.epoch, now->epoch));
}

Result<std::optional<std::string>> LiveGroup::Dropped(const protocol::LiveMembership& m) const {
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> now, Newer(m));
  if (!now) return std::optional<std::string>();
  const protocol::LiveMembership seen =
      options_.ranks_per_replica > 1
          ? protocol::ReplicaView(*now, options_.ranks_per_replica, options_.position)
          : *now;
  std::vector<int> gone;
  for (int slot : m.members) {
    if (!seen.Has(slot)) gone.push_back(slot);
  }
  if (gone.empty()) return std::optional<std::string>();
  return std::optional<std::string>(
      fmt::format("live epoch {} leaves out {} {} of epoch {} (the launcher judged {} lost)",
                  now->epoch, options_.ranks_per_replica > 1 ? "replica(s)" : "rank(s)",
                  fmt::join(gone, ","), m.epoch, gone.size() > 1 ? "them" : "it"));
}

Status LiveGroup::AwaitCheckIns(const protocol::LiveMembership& m, const std::string& path) {
  TENAX_RETURN_IF_ERROR(CheckIn(path));
  const auto t0 = Clock::now();
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    TENAX_ASSIGN_OR_RETURN(const bool all, AllCheckedIn(m, path));
    if (all) return Status::Ok();
    TENAX_ASSIGN_OR_RETURN(std::optional<std::string> newer, Superseded(m));
    if (newer) {
      return PeerLost(fmt::format("{} before all of its members ({}) checked in", *newer,
                                  fmt::join(m.members, ",")));
    }
    if (Since(t0) * 1000 > static_cast<double>(options_.group.timeout.count())) {
      return PeerLost(fmt::format("live epoch {}: not every member of {} checked in within {}s",
                                  m.epoch, fmt::join(m.members, ","),
                                  options_.group.timeout.count() / 1000));
    }
    if (options_.on_wait) options_.on_wait();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

Status LiveGroup::FormAlone() {
  Leave();
  alone_path_ = fmt::format("{}/{}-alone-{}-{}", options_.store_dir, options_.name, options_.slot,
                            ::getpid());
  GroupOptions o = options_.group;
  o.c10d_for_one_rank = true;
  TENAX_ASSIGN_OR_RETURN(comm_, ConnectFileStoreGroup(alone_path_, 0, 1, o));
  membership_ = protocol::LiveMembership{};
  membership_.epoch = -1;
  membership_.world = options_.world;
  membership_.members = {options_.slot};
  return Status::Ok();
}

void LiveGroup::Leave() {
  comm_.reset();
  if (!alone_path_.empty()) {
    std::error_code ec;
    std::filesystem::remove(std::exchange(alone_path_, std::string()), ec);
  }
}

Communicator& LiveGroup::comm() {
  TENAX_CHECK_MSG(comm_ != nullptr, "LiveGroup::comm() before Form()");
  return *comm_;
}

namespace {

// LiveGroup::NewProxy's communicator. Each call goes to the group of the moment; the bytes it
// moved are added to this object's own counters, and the flight recorder set on it is passed on.
class LiveProxy final : public Communicator {
 public:
  explicit LiveProxy(LiveGroup& group) : group_(group) {}
  int rank() const override { return group_.formed() ? Inner().rank() : group_.slot(); }
  int size() const override { return group_.formed() ? Inner().size() : group_.world(); }
  int nominal_size() const override { return group_.world(); }
  at::Device device() const override { return at::kCPU; }
  void AllReduceSum(at::Tensor& t) override {
    Call([&](Communicator& c) { c.AllReduceSum(t); });
  }
  at::Tensor AllGather(const at::Tensor& shard) override {
    at::Tensor r;
    Call([&](Communicator& c) { r = c.AllGather(shard); });
    return r;
  }
  at::Tensor ReduceScatterSum(const at::Tensor& full) override {
    at::Tensor r;
    Call([&](Communicator& c) { r = c.ReduceScatterSum(full); });
    return r;
  }
  void Broadcast(at::Tensor& t, int root) override {
    Call([&](Communicator& c) { c.Broadcast(t, root); });
  }
  void Barrier() override {
    Call([&](Communicator& c) { c.Barrier(); });
  }
  void Send(const at::Tensor& t, int peer, int tag) override {
    Call([&](Communicator& c) { c.Send(t, peer, tag); });
  }
  void Recv(at::Tensor& t, int peer, int tag) override {
    Call([&](Communicator& c) { c.Recv(t, peer, tag); });
  }
  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                      const std::vector<int64_t>& output_splits) override {
    at::Tensor r;
    Call([&](Communicator& c) { r = c.AllToAll(input, input_splits, output_splits); });
    return r;
  }
  // The asynchronous variants: issued on the group of the moment; their Wait throws if it was
  // lost meanwhile (the caller then recovers as from any failed collective).
  PendingCollective AllReduceSumAsync(at::Tensor t) override {
    PendingCollective p;
    Call([&](Communicator& c) { p = c.AllReduceSumAsync(t); });
    return p;
  }
  PendingCollective AllGatherAsync(const at::Tensor& shard, at::Tensor out) override {
    PendingCollective p;
    Call([&](Communicator& c) { p = c.AllGatherAsync(shard, out); });
    return p;
  }
  PendingCollective ReduceScatterSumAsync(const at::Tensor& full) override {
    PendingCollective p;
    Call([&](Communicator& c) { p = c.ReduceScatterSumAsync(full); });
    return p;
  }

 private:
  Communicator& Inner() const { return group_.comm(); }
  template <typename F>
  void Call(F&& f) {
    Communicator& c = Inner();
    c.SetFlightRecorder(recorder_, name_);
    const CommStats before = c.stats();
    f(c);
    stats_ += c.stats() - before;
  }

  LiveGroup& group_;
};

}  // namespace

std::unique_ptr<Communicator> LiveGroup::NewProxy() { return std::make_unique<LiveProxy>(*this); }

Result<std::optional<protocol::LiveMembership>> LiveGroup::NewestEpoch(
    const std::optional<protocol::LiveMembership>& seen, int64_t* flag) {
  Communicator& c = comm();
  const int mine = seen && seen->epoch > membership_.epoch ? seen->epoch : membership_.epoch;
  // Each member's (epoch, flag), in one gather.
  at::Tensor all =
      c.AllGather(at::tensor({static_cast<int64_t>(mine), flag ? *flag : int64_t{0}}, at::kLong));
  all = all.contiguous();
  const int64_t* e = all.data_ptr<int64_t>();
  int source = 0;
  for (int r = 1; r < c.size(); ++r) {
    if (e[2 * r] > e[2 * source]) source = r;
    if (flag) *flag = std::max(*flag, e[2 * r + 1]);
  }
  if (flag) *flag = std::max(*flag, e[1]);
  if (e[2 * source] <= membership_.epoch) return std::optional<protocol::LiveMembership>();
  TENAX_ASSIGN_OR_RETURN(protocol::LiveMembership m,
                         BroadcastMembership(c, c.rank() == source ? *seen : membership_, source));
  return std::optional<protocol::LiveMembership>(std::move(m));
}

Result<protocol::LiveMembership> BroadcastMembership(Communicator& c,
                                                     const protocol::LiveMembership& m, int root) {
  at::Tensor buf = at::zeros({kRecordBytes}, at::kByte);
  if (c.rank() == root) {
    const std::string json = protocol::LiveMembershipJson(m);
    TENAX_CHECK(static_cast<int64_t>(json.size()) < kRecordBytes);
    std::memcpy(buf.data_ptr<uint8_t>(), json.data(), json.size());
  }
  c.Broadcast(buf, root);
  const std::string json(reinterpret_cast<const char*>(buf.data_ptr<uint8_t>()));
  return protocol::ParseLiveMembership(json);
}

namespace {

// `received` checked (continuing `crc`) and copied into `to` in one pass, a cache-sized piece at a
// time: the copy reads what the checksum just brought into the cache.
uint32_t CheckAndCopy(const at::Tensor& received, const at::Tensor& to, uint32_t crc) {
  TENAX_CHECK(received.nbytes() == to.nbytes() && to.is_contiguous());
  constexpr size_t kPiece = size_t{128} << 10;
  const auto* from = static_cast<const uint8_t*>(received.data_ptr());
  auto* into = static_cast<uint8_t*>(to.data_ptr());
  for (size_t at = 0, n = received.nbytes(); at < n; at += kPiece) {
    const size_t piece = std::min(kPiece, n - at);
    crc = Crc32c(from + at, piece, crc);
    std::memcpy(into + at, from + at, piece);
  }
  return crc;
}

}  // namespace

Result<LiveSyncReport> LiveGroup::Sync(const std::vector<at::Tensor>& state, int64_t step,
                                       bool has_state) {
  const auto t0 = Clock::now();
  Communicator& c = comm();
  const std::vector<int>& slots = membership_.members;
  at::Tensor mine = at::tensor({has_state ? int64_t{1} : int64_t{0}, step}, at::kLong);
  const at::Tensor all = c.AllGather(mine).contiguous();
  const int64_t* v = all.data_ptr<int64_t>();
  int source = -1;
  for (int r = 0; r < c.size(); ++r) {
    if (v[2 * r] == 1 && (source < 0 || v[2 * r + 1] > v[2 * source + 1])) source = r;
  }
  if (source < 0) {
    return Unavailable(fmt::format(
        "live epoch {}: no member has training state to continue from (every replica was lost); "
        "resume from the newest checkpoint",
        membership_.epoch));
  }
  LiveSyncReport report;
  report.source_slot = slots[static_cast<size_t>(source)];
  report.step = v[2 * source + 1];
  for (int r = 0; r < c.size(); ++r) {
    if (v[2 * r] == 0 || v[2 * r + 1] != report.step) {
      report.receivers.push_back(slots[static_cast<size_t>(r)]);
    }
  }
  if (report.receivers.empty()) return report;
  // Point to point, from the source to each receiver only: the members that hold the state
  // already take no part (they go on to the step, and meet the others at its first collective),
  // and the source's bytes cross the wire once per receiver, not along a broadcast's tree.
  const bool receiving = std::find(report.receivers.begin(), report.receivers.end(),
                                   options_.slot) != report.receivers.end();
  const bool sending = c.rank() == source;
  if (!receiving && !sending) return report;
  std::vector<int> to;  // the receivers' group ranks
  for (int r = 0; r < c.size(); ++r) {
    if (v[2 * r] == 0 || v[2 * r + 1] != report.step) to.push_back(r);
  }
  uint32_t crc = 0;
  if (receiving) ++receives_begun_;
  for (const at::Tensor& t : state) {
    TENAX_CHECK_MSG(t.is_contiguous() && t.device().is_cpu(), "LiveGroup::Sync: CPU tensors");
    report.bytes += static_cast<int64_t>(t.nbytes());
  }
  if (sending) {
    // Every tensor's sends posted at once, to every receiver (one wire each), in the order the
    // receivers post their receives; the checksum is computed while they are on the wire.
    std::vector<PendingCollective> sends;
    for (size_t i = 0; i < state.size(); ++i) {
      for (int r : to) sends.push_back(c.SendAsync(state[i], r, static_cast<int>(i)));
    }
    for (const at::Tensor& t : state) crc = Crc32c(t.data_ptr(), t.nbytes(), crc);
    for (PendingCollective& p : sends) p.Wait();
  } else {
    // Received into two buffers of the largest tensor's size in turn, the next tensor on the wire
    // while this one is checked and copied into the state. Never into the state itself: a
    // receive abandoned because the source was dropped (Dropped) stays on Gloo's thread until its
    // timeout, and a source that comes back meanwhile (a node stopped, then continued) could
    // still write its bytes there, where the next epoch's Sync will have set the state.
    int64_t largest = 0;
    for (const at::Tensor& t : state) largest = std::max(largest, static_cast<int64_t>(t.nbytes()));
    const std::array<at::Tensor, 2> buffers = {at::empty({largest}, at::kByte),
                                               at::empty({largest}, at::kByte)};
    auto buffer_for = [&](size_t i) {
      const at::Tensor& t = state[i];
      return buffers[i % 2]
          .narrow(0, 0, static_cast<int64_t>(t.nbytes()))
          .view(t.scalar_type())
          .view(t.sizes());
    };
    PendingCollective next;
    if (!state.empty()) next = c.RecvAsync(buffer_for(0), source, 0);
    for (size_t i = 0; i < state.size(); ++i) {
      const at::Tensor x = next.Wait();
      if (i + 1 < state.size()) {
        next = c.RecvAsync(buffer_for(i + 1), source, static_cast<int>(i + 1));
      }
      crc = CheckAndCopy(x, state[i], crc);
      if (options_.on_received) options_.on_received(i);
    }
  }
  // The source's CRC-32C and its signature: HMAC-SHA-256 with the job's secret over what the state
  // is (job, epoch, step, checksum).
  const std::string signed_text = fmt::format("tenax live state|epoch {}|step {}|crc32c {:08x}",
                                              membership_.epoch, report.step, crc);
  const Sha256Digest tag = HmacSha256(options_.secret, signed_text);
  at::Tensor sent = at::zeros({8 + static_cast<int64_t>(tag.size())}, at::kByte);
  const int signature_tag = static_cast<int>(state.size());
  if (sending) {
    const uint64_t crc64 = crc;
    std::memcpy(sent.data_ptr<uint8_t>(), &crc64, 8);
    std::memcpy(sent.data_ptr<uint8_t>() + 8, tag.data(), tag.size());
    for (int r : to) c.Send(sent, r, signature_tag);
  } else {
    c.Recv(sent, source, signature_tag);
  }
  report.bytes += static_cast<int64_t>(sent.nbytes()) + all.nbytes() / c.size();
  const uint8_t* got = sent.data_ptr<uint8_t>();
  uint64_t sent_crc = 0;
  std::memcpy(&sent_crc, got, 8);
  if (sent_crc != crc) {
    return DataError(fmt::format(
        "live epoch {}: the state received from slot {} fails its checksum (crc32c {:08x}, sent "
        "{:08x}); this replacement is discarded",
        membership_.epoch, report.source_slot, crc, static_cast<uint32_t>(sent_crc)));
  }
  Sha256Digest sent_tag;
  std::memcpy(sent_tag.data(), got + 8, sent_tag.size());
  if (!DigestsEqual(sent_tag, tag)) {
    return DataError(fmt::format(
        "live epoch {}: the state received from slot {} is not signed with this job's secret "
        "(TENAX_JOB_SECRET: is the sender a process of another job or launch?); this "
        "replacement is discarded",
        membership_.epoch, report.source_slot));
  }
  report.transferred = true;
  report.seconds = Since(t0);
  return report;
}

Result<protocol::LiveMembership> WaitForEpochAfter(const std::string& heartbeat_dir, int epoch,
                                                   double timeout_s,
                                                   const std::function<void()>& on_wait) {
  const auto t0 = Clock::now();
  auto pause = std::chrono::milliseconds(2);
  while (true) {
    Result<std::optional<protocol::LiveMembership>> m = protocol::ReadLiveMembership(heartbeat_dir);
    if (!m.ok()) return m.status();
    if (*m && (*m)->epoch > epoch) return **m;
    if (Since(t0) > timeout_s) {
      return Unavailable(fmt::format(
          "no live membership after epoch {} within {:.0f}s (the launcher decides it in {})", epoch,
          timeout_s, protocol::LiveMembershipPath(heartbeat_dir)));
    }
    if (on_wait) on_wait();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace tenax::parallel
