#include "tenax/parallel/live_group.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "tenax/core/crc32.h"
#include "tenax/core/temp_dir.h"
#include "tenax/etcd/testing_etcd_test_fixture.h"
#include "tenax/protocol/exit_report.h"

namespace tenax::parallel {
namespace {

using protocol::LiveMembership;

constexpr int64_t kWidth = 4096;  // elements of the "weights"

// Slot s's gradient at step k: small integers, so sums are exact in any order and the weights
// of every run, however the slots' samples were dealt out, compare bit for bit.
at::Tensor SlotGradient(int64_t step, int slot) {
  return at::remainder(at::arange(kWidth, at::kDouble) + (step * 131 + slot * 17), 23.0);
}

at::Tensor Reference(int world, int64_t steps) {
  at::Tensor w = at::zeros({kWidth}, at::kDouble);
  for (int64_t k = 1; k <= steps; ++k) {
    for (int s = 0; s < world; ++s) w += SlotGradient(k, s);
  }
  return w;
}

uint32_t CrcOf(const at::Tensor& t) { return Crc32(t.data_ptr(), t.nbytes()); }

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

void Mark(const std::string& dir, int epoch, int slot) {
  std::ofstream(fmt::format("{}/formed-{}-{}", dir, epoch, slot)) << "";
}

// One data-parallel member, as the trainer will run one (see LiveGroup.SurvivesAKilledMember):
// every step it agrees on the membership, runs the samples of its slot and of the missing
// slots dealt to it, and sums the gradients over the group; a collective that throws makes it
// leave, wait for the launcher's next epoch, form it and take the newest state.
TEST(LiveGroupWorker, DISABLED_Member) {
  const std::string dir = Env("LIVE_DIR");
  const int slot = std::atoi(Env("LIVE_SLOT").c_str());
  const int64_t steps = std::atoll(Env("LIVE_STEPS").c_str());
  const int64_t kill_step = std::atoll(Env("LIVE_KILL_STEP", "0").c_str());
  const int64_t gate_step = std::atoll(Env("LIVE_GATE_STEP", "0").c_str());
  const int gate_epoch = std::atoi(Env("LIVE_GATE_EPOCH", "0").c_str());
  const bool join = Env("LIVE_JOIN") == "1";
  LiveGroup::Options o;
  o.store_dir = dir;
  o.slot = slot;
  o.world = 4;
  o.secret = "the job's secret";
  o.group.timeout = std::chrono::seconds(60);
  if (!Env("LIVE_ETCD").empty()) {
    // Several nodes: the epochs meet in etcd; the record stays in the folder.
    etcd::EtcdOptions e;
    e.endpoints = {Env("LIVE_ETCD")};
    o.etcd = e;
    o.etcd_prefix = Env("LIVE_ETCD_PREFIX");
  }
  LiveGroup g(o);

  at::Tensor w =
      join ? at::full({kWidth}, std::nan(""), at::kDouble) : at::zeros({kWidth}, at::kDouble);
  at::Tensor step_t = at::zeros({1}, at::kLong);  // travels with the state
  int64_t step = 0;
  nlohmann::json out = {{"slot", slot},
                        {"epochs", nlohmann::json::array()},
                        {"recoveries", 0},
                        {"healed_bytes", 0},
                        {"transfers", 0}};
  auto form_and_sync = [&](const LiveMembership& m, bool has_state) {
    Status st = g.Form(m);
    ASSERT_TRUE(st.ok()) << st.ToString();
    Mark(dir, m.epoch, slot);
    out["epochs"].push_back(m.epoch);
    step_t.fill_(step);
    Result<LiveSyncReport> r = g.Sync({w, step_t}, step, has_state);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->transferred) {
      out["transfers"] = out["transfers"].get<int>() + 1;
      if (!has_state || step != r->step) out["healed_bytes"] = r->bytes;
    }
    step = r->step;
    ASSERT_EQ(step_t.item<int64_t>(), step);
  };
  if (join) {
    // A replacement: the launcher lists it as joining in an epoch the survivors switch to.
    Result<LiveMembership> m = WaitForEpochAfter(dir, gate_epoch - 1, 120);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE(m->Joining(slot));
    form_and_sync(*m, /*has_state=*/false);
  } else {
    Result<std::optional<LiveMembership>> m = protocol::ReadLiveMembership(dir);
    ASSERT_TRUE(m.ok() && m->has_value());
    form_and_sync(**m, true);
  }
  if (::testing::Test::HasFatalFailure()) return;
  while (step < steps) {
    const int64_t next = step + 1;
    if (gate_step > 0 && next == gate_step) {
      // Test only: hold this step until the replacement is announced, so that it joins a
      // running job (an event, not a sleep).
      ASSERT_TRUE(WaitForEpochAfter(dir, gate_epoch - 1, 120).ok());
    }
    try {
      Result<std::optional<LiveMembership>> seen = protocol::ReadLiveMembership(dir);
      ASSERT_TRUE(seen.ok());
      Result<std::optional<LiveMembership>> newest = g.NewestEpoch(*seen);
      ASSERT_TRUE(newest.ok()) << newest.status().ToString();
      if (*newest) {
        form_and_sync(**newest, true);
        if (::testing::Test::HasFatalFailure()) return;
        continue;  // the state may have moved on
      }
      at::Tensor grad = at::zeros({kWidth}, at::kDouble);
      for (int s : protocol::SlotsRunBy(g.membership(), slot)) grad += SlotGradient(next, s);
      if (next == kill_step) ::raise(SIGKILL);  // dies between its samples and the reduction
      g.comm().AllReduceSum(grad);
      w += grad;
      step = next;
    } catch (const std::exception& e) {
      out["recoveries"] = out["recoveries"].get<int>() + 1;
      const int epoch = g.membership().epoch;
      g.Leave();
      Result<LiveMembership> m = WaitForEpochAfter(dir, epoch, 120);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      form_and_sync(*m, true);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  out["step"] = step;
  out["crc"] = CrcOf(w);
  out["receives_begun"] = g.receives_begun();
  std::ofstream(fmt::format("{}/result-{}{}", dir, slot, join ? "-joined" : "")) << out.dump();
}

// A member of a two-slot group with the secret LIVE_SECRET: slot 0 has the state (a step 7
// tensor), slot 1 joins without; both sync once and write what Sync returned.
TEST(LiveGroupWorker, DISABLED_SyncOnce) {
  const std::string dir = Env("LIVE_DIR");
  const int slot = std::atoi(Env("LIVE_SLOT").c_str());
  LiveGroup::Options o;
  o.store_dir = dir;
  o.slot = slot;
  o.world = 2;
  o.group.timeout = std::chrono::seconds(60);
  o.secret = Env("LIVE_SECRET");
  LiveGroup g(o);
  ASSERT_TRUE(g.Form({0, 0, 2, {0, 1}, {1}}).ok());
  at::Tensor w = slot == 0 ? at::arange(kWidth, at::kDouble) : at::zeros({kWidth}, at::kDouble);
  Result<LiveSyncReport> r = g.Sync({w}, slot == 0 ? 7 : 0, slot == 0);
  const nlohmann::json out = {
      {"ok", r.ok()}, {"error", r.ok() ? "" : r.status().message()}, {"crc", CrcOf(w)}};
  std::ofstream(fmt::format("{}/sync-{}", dir, slot)) << out.dump();
}

pid_t Spawn(const std::map<std::string, std::string>& env,
            const std::string& worker = "DISABLED_Member") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    const std::string filter = "--gtest_filter=LiveGroupWorker." + worker;
    ::execl("/proc/self/exe", "worker", filter.c_str(), "--gtest_also_run_disabled_tests",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool WaitForFile(const std::string& path, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(path)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Four members; slot 2 is killed (SIGKILL) between its samples and step 5's reduction. The
// others' reduction fails, they form epoch 1 without it and train its samples themselves; a
// replacement for slot 2 is announced in epoch 2, joins at a step boundary and receives the
// weights and the step from a live member. Every process ends with the weights of a run that
// never failed, bit for bit: no step lost or repeated a slot's samples. `etcd`: the members meet
// there (several nodes' way) instead of in the folder's files.
void KillAMemberAndHealItsReplacement(const std::string& etcd = "") {
  testing::TempDir dir;
  const int world = 4;
  const int64_t steps = 16;
  LiveMembership m0{0, 0, world, {0, 1, 2, 3}, {}};
  ASSERT_TRUE(protocol::WriteLiveMembership(dir.path(), m0).ok());
  auto env = [&](std::map<std::string, std::string> e) {
    e["LIVE_DIR"] = dir.path();
    e["LIVE_STEPS"] = std::to_string(steps);
    if (!etcd.empty()) {
      e["LIVE_ETCD"] = etcd;
      e["LIVE_ETCD_PREFIX"] = "/job/live/";
    }
    return e;
  };
  std::map<int, pid_t> pids;
  for (int s = 0; s < world; ++s) {
    pids[s] = Spawn(env({{"LIVE_SLOT", std::to_string(s)},
                         {"LIVE_KILL_STEP", s == 2 ? "5" : "0"},
                         {"LIVE_GATE_STEP", "12"},
                         {"LIVE_GATE_EPOCH", "2"}}));
  }
  // The launcher's part: the member's death is the event that makes the next epoch.
  EXPECT_EQ(WaitExit(pids[2]), 128 + SIGKILL);
  const auto t_dead = std::chrono::steady_clock::now();
  ASSERT_TRUE(protocol::WriteLiveMembership(dir.path(), {1, 0, world, {0, 1, 3}, {}}).ok());
  for (int s : {0, 1, 3}) {
    ASSERT_TRUE(WaitForFile(dir.Join(fmt::format("formed-1-{}", s)), 120)) << "slot " << s;
  }
  const double reform_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_dead).count();
  std::printf("epoch 1 formed by the survivors %.3f s after the death\n", reform_s);
  const pid_t joiner =
      Spawn(env({{"LIVE_SLOT", "2"}, {"LIVE_JOIN", "1"}, {"LIVE_GATE_EPOCH", "2"}}));
  ASSERT_TRUE(protocol::WriteLiveMembership(dir.path(), {2, 0, world, {0, 1, 2, 3}, {2}}).ok());
  for (int s : {0, 1, 3}) EXPECT_EQ(WaitExit(pids[s]), 0) << "slot " << s;
  EXPECT_EQ(WaitExit(joiner), 0);

  const uint32_t want = CrcOf(Reference(world, steps));
  for (const std::string name : {"result-0", "result-1", "result-3", "result-2-joined"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(std::filesystem::exists(dir.Join(name)));
    const nlohmann::json r = ReadJson(dir.Join(name));
    EXPECT_EQ(r["step"], steps);
    EXPECT_EQ(r["crc"].get<uint32_t>(), want);
    if (name == "result-2-joined") {
      EXPECT_EQ(r["epochs"], nlohmann::json::array({2}));
      // The weights and the step travelled once, with their checksum and the state header.
      // (The checksum and its signature: 8 + 32 bytes.)
      EXPECT_EQ(r["healed_bytes"].get<int64_t>(), kWidth * 8 + 8 + 40 + 16);
      EXPECT_EQ(r["receives_begun"], 1);  // its own state was written into once
    } else {
      EXPECT_EQ(r["receives_begun"], 0);  // the members' state never was
      EXPECT_EQ(r["recoveries"], 1);      // step 5's reduction failed once
      EXPECT_EQ(r["epochs"], nlohmann::json::array({0, 1, 2}));
    }
  }
  if (!etcd.empty()) {
    // Only the newest epoch's keys are left: each member deleted the older ones it met in.
    etcd::EtcdOptions e;
    e.endpoints = {etcd};
    auto client = etcd::EtcdClient::Create(e);
    ASSERT_TRUE(client.ok());
    Result<etcd::RangeResponse> left = (*client)->GetPrefix("/job/live/");
    ASSERT_TRUE(left.ok()) << left.status().ToString();
    ASSERT_FALSE(left->kvs.empty());
    for (const etcd::KeyValue& kv : left->kvs) {
      EXPECT_EQ(kv.key.rfind("/job/live/live-epoch-2/", 0), 0u) << kv.key;
    }
  }
}

TEST(LiveGroup, SurvivesAKilledMemberAndHealsItsReplacement) { KillAMemberAndHealItsReplacement(); }

// The same with the epochs meeting in etcd, as the members on several nodes do.
using LiveGroupInEtcd = etcd::testing::EtcdTest;
TEST_F(LiveGroupInEtcd, SurvivesAKilledMemberAndHealsItsReplacement) {
  KillAMemberAndHealItsReplacement(etcd_->endpoints()[0]);
}

// Epoch 1 of a world of 3 (members 0, 1 and 2), written to `dir` as the launcher would, and
// epoch 2 without member 2 (the test writes it when it has slot 2 lost).
std::pair<LiveMembership, LiveMembership> ThreeMembersThenTwo(const std::string& dir) {
  LiveMembership e1;
  e1.epoch = 1;
  e1.world = 3;
  e1.members = {0, 1, 2};
  EXPECT_TRUE(protocol::WriteLiveMembership(dir, e1).ok());
  LiveMembership e2 = e1;
  e2.epoch = 2;
  e2.members = {0, 1};
  return {e1, e2};
}

// Slots 0 and 1 of a world of 3 try epoch 1 (members 0, 1, 2), in which slot 2 never connects;
// once both checked in, the test's thread writes epoch 2 (members 0, 1), as the launcher would.
// Each slot's outcome of epoch 1 and, once it was refused, its all-reduce in epoch 2.
struct TwoSlots {
  std::array<std::string, 2> first;  // "formed", or why epoch 1 did not
  std::array<double, 2> sums{};      // 1 + 2 = 3 when epoch 2 formed
  std::array<int, 2> waits{};        // on_wait calls
};
TwoSlots FormWithoutSlotTwo(const tenax::testing::TempDir& dir, std::chrono::milliseconds timeout) {
  LiveMembership e1, e2;
  std::tie(e1, e2) = ThreeMembersThenTwo(dir.path());
  TwoSlots out;  // one element per thread
  auto member = [&](int slot) {
    LiveGroup::Options o;
    o.store_dir = dir.path();
    o.slot = slot;
    o.world = 3;
    o.group.timeout = timeout;
    o.on_wait = [&out, slot] { ++out.waits[slot]; };
    LiveGroup g(o);
    const Status st = g.Form(e1);
    out.first[slot] = st.ok() ? "formed" : st.message();
    if (st.ok() || st.code() != StatusCode::kPeerLost) return;
    if (!g.Form(e2).ok()) return;
    at::Tensor x = at::full({3}, static_cast<double>(slot + 1), at::kDouble);
    g.comm().AllReduceSum(x);
    out.sums[slot] = x[0].item<double>();
  };
  std::thread a(member, 0), b(member, 1);
  while (!std::filesystem::exists(dir / "live-epoch-1.in-0") ||
         !std::filesystem::exists(dir / "live-epoch-1.in-1")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(protocol::WriteLiveMembership(dir.path(), e2).ok());
  a.join();
  b.join();
  return out;
}

// A replacement's warm-up runs its step's collectives in a group of its own: one rank, outside
// every epoch, its store a file of its own that Leave removes; the proxy the model holds
// forwards to it meanwhile, and says the nominal world again once it is left.
TEST(LiveGroup, AMemberAloneFormsAGroupOfItsOwnOutsideEveryEpoch) {
  tenax::testing::TempDir dir;
  LiveGroup::Options o;
  o.store_dir = dir.path();
  o.slot = 2;
  o.world = 3;
  LiveGroup group(o);
  const std::unique_ptr<Communicator> proxy = group.NewProxy();
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(group.FormAlone().ok());
    EXPECT_TRUE(group.formed());
    EXPECT_EQ(group.membership().epoch, -1);
    EXPECT_EQ(group.membership().members, std::vector<int>({2}));
    EXPECT_EQ(proxy->size(), 1);
    EXPECT_EQ(proxy->rank(), 0);
    at::Tensor t = at::arange(5, at::kFloat);
    proxy->AllReduceSum(t);
    EXPECT_TRUE(t.equal(at::arange(5, at::kFloat)));
    const std::string store = fmt::format("{}/live-alone-2-{}", dir.path(), ::getpid());
    EXPECT_TRUE(std::filesystem::exists(store));
    group.Leave();
    EXPECT_FALSE(group.formed());
    EXPECT_FALSE(std::filesystem::exists(store));
    EXPECT_EQ(proxy->size(), 3);
  }
}

// A member that dies on its way into an epoch (before it connects): the others wait at the
// check-in, not in the group's connect, and the launcher's next epoch without it ends the wait at
// once; they form that one. With nobody deciding, the wait ends at the group's timeout.
TEST(LiveGroup, AnEpochWhoseMemberNeverArrivesIsLeftForTheNextOne) {
  tenax::testing::TempDir dir;
  const TwoSlots got = FormWithoutSlotTwo(dir, std::chrono::seconds(60));
  for (int slot : {0, 1}) {
    EXPECT_NE(got.first[slot].find("live epoch 1 was superseded by epoch 2 before"),
              std::string::npos)
        << got.first[slot];
    EXPECT_EQ(got.sums[slot], 3.0) << "slot " << slot;  // 1 + 2: the group of epoch 2
    EXPECT_GT(got.waits[slot], 0);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "live-epoch-1.in-2"));

  LiveGroup::Options o;
  o.store_dir = dir.path();
  o.slot = 0;
  o.world = 3;
  o.group.timeout = std::chrono::milliseconds(100);
  LiveGroup alone(o);
  LiveMembership e3;
  e3.epoch = 3;
  e3.world = 3;
  e3.members = {0, 1};
  ASSERT_TRUE(protocol::WriteLiveMembership(dir.path(), e3).ok());
  const Status st = alone.Form(e3);
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.message();
  EXPECT_NE(st.message().find("not every member of 0,1 checked in within"), std::string::npos)
      << st.message();
}

// A member that died after checking in, before it connected: every check-in is there, so the
// others pass the check-in and wait in the group's connect for its address; the launcher's next
// epoch ends that wait too (the store is a WatchedStore), not the group's timeout (10 minutes
// here: without the watch this test would outlive ctest's limit).
TEST(LiveGroup, AMemberThatDiesAfterCheckingInIsLeftForTheNextOne) {
  tenax::testing::TempDir dir;
  // Slot 2 checked in, then died: as every check-in is there, neither slot can leave Form but
  // through the connect.
  { std::ofstream(dir / "live-epoch-1.in-2") << ""; }
  const TwoSlots got = FormWithoutSlotTwo(dir, std::chrono::minutes(10));
  for (int slot : {0, 1}) {
    EXPECT_NE(
        got.first[slot].find("live epoch 1 was superseded by epoch 2 while its members connected"),
        std::string::npos)
        << got.first[slot];
    EXPECT_EQ(got.sums[slot], 3.0) << "slot " << slot;
  }
}

// A member that goes silent inside a collective (its node cut off: its connections neither answer
// nor close): the others' all-reduce is abandoned as soon as the launcher's next epoch leaves it
// out, not at the group's timeout (10 minutes here: without it this test would outlive ctest's
// limit), and dropping the group does not wait for Gloo's thread, still in that collective. They
// form the next epoch and sum there. A newer epoch that only adds a member (a replacement
// joining) abandons nothing: the sum in flight meanwhile completes.
TEST(LiveGroup, ACollectiveWaitingOnADroppedMemberIsAbandoned) {
  tenax::testing::TempDir dir;
  LiveMembership e1, e2;
  std::tie(e1, e2) = ThreeMembersThenTwo(dir.path());
  ASSERT_FALSE(HasFailure());  // epoch 1 was written
  LiveMembership e3 = e1;
  e3.epoch = 3;
  e3.joining = {2};
  std::array<std::string, 2> why;
  std::array<double, 2> seconds{}, sums{}, joined_sums{};
  std::atomic<int> formed{0}, done{0};
  auto member = [&](int slot) {
    LiveGroup::Options o;
    o.store_dir = dir.path();
    o.slot = slot;
    o.world = 3;
    o.group.timeout = std::chrono::minutes(10);
    LiveGroup g(o);
    if (!g.Form(e1).ok()) return;
    ++formed;
    if (slot == 2) {  // silent from here on, its connections open
      while (done < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor x = at::full({3}, static_cast<double>(slot + 1), at::kDouble);
    try {
      g.comm().AllReduceSum(x);
      why[slot] = "it ended";
    } catch (const std::exception& e) {
      why[slot] = e.what();
    }
    g.Leave();
    seconds[slot] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!g.Form(e2).ok()) return;
    at::Tensor y = at::full({3}, static_cast<double>(slot + 1), at::kDouble);
    g.comm().AllReduceSum(y);
    sums[slot] = y[0].item<double>();
    // Epoch 3 (a replacement for slot 2 joining) is written while slot 0 sums alone for a while.
    if (slot == 0) {
      EXPECT_TRUE(protocol::WriteLiveMembership(dir.path(), e3).ok());
    }
    if (slot == 1) {
      auto epoch_now = [&] {
        Result<std::optional<LiveMembership>> r = protocol::ReadLiveMembership(dir.path());
        return r.ok() && *r ? (**r).epoch : -1;
      };
      while (epoch_now() < 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // slot 0 polls meanwhile
    }
    at::Tensor z = at::full({3}, static_cast<double>(slot + 1), at::kDouble);
    g.comm().AllReduceSum(z);
    joined_sums[slot] = z[0].item<double>();
    ++done;
  };
  std::thread a(member, 0), b(member, 1), c(member, 2);
  while (formed < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(protocol::WriteLiveMembership(dir.path(), e2).ok());
  a.join();
  b.join();
  c.join();
  for (int slot : {0, 1}) {
    EXPECT_NE(why[slot].find("collective abandoned: live epoch 2 leaves out rank(s) 2 of epoch 1 "
                             "(the launcher judged it lost)"),
              std::string::npos)
        << why[slot];
    EXPECT_TRUE(protocol::IsPeerLostError(why[slot])) << why[slot];
    EXPECT_LT(seconds[slot], 60.0) << "abandoned at the group's timeout, not at the new epoch";
    EXPECT_EQ(sums[slot], 3.0) << "slot " << slot;         // 1 + 2: the group of epoch 2
    EXPECT_EQ(joined_sums[slot], 3.0) << "slot " << slot;  // not abandoned for a joiner
  }
}

// Point to point in a live group (how Sync sends the state): a timed wait on Gloo's send or
// receive ends it for good when it runs out, so they are waited for on a thread of their own
// while the caller polls for an abandon. A receive that outlasts several polls (its sender is
// late) still completes, bit for bit; one from a member that went silent is abandoned once the
// launcher's next epoch leaves that member out, not at the group's timeout (10 minutes).
TEST(LiveGroup, PointToPointOutlastsThePollsAndIsAbandonedWithItsPeer) {
  tenax::testing::TempDir dir;
  LiveMembership e1, e2;
  std::tie(e1, e2) = ThreeMembersThenTwo(dir.path());
  ASSERT_FALSE(HasFailure());  // epoch 1 was written
  std::atomic<int> formed{0};
  std::atomic<bool> received{false}, waiting_on_2{false}, done{false};
  at::Tensor got;
  std::string why;
  double seconds = 0;
  auto member = [&](int slot) {
    LiveGroup::Options o;
    o.store_dir = dir.path();
    o.slot = slot;
    o.world = 3;
    o.group.timeout = std::chrono::minutes(10);
    LiveGroup g(o);
    if (!g.Form(e1).ok()) return;
    ++formed;
    if (slot == 0) {
      at::Tensor x = at::zeros({kWidth}, at::kDouble);
      g.comm().Recv(x, 1, /*tag=*/5);
      got = x;
      received = true;
      waiting_on_2 = true;
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor y = at::zeros({kWidth}, at::kDouble);
      try {
        g.comm().Recv(y, 2, /*tag=*/6);
        why = "it ended";
      } catch (const std::exception& e) {
        why = e.what();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      g.Leave();
      done = true;
    } else if (slot == 1) {
      // Late: slot 0 polls for an abandon several times before the bytes come.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      g.comm().SendAsync(at::arange(kWidth, at::kDouble), 0, /*tag=*/5).Wait();
      while (!waiting_on_2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_TRUE(protocol::WriteLiveMembership(dir.path(), e2).ok());
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {  // silent from here on, its connections open
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  std::thread a(member, 0), b(member, 1), c(member, 2);
  a.join();
  b.join();
  c.join();
  ASSERT_EQ(formed, 3);
  ASSERT_TRUE(received);
  EXPECT_TRUE(at::equal(got, at::arange(kWidth, at::kDouble)));
  EXPECT_NE(why.find("collective abandoned: live epoch 2 leaves out rank(s) 2 of epoch 1"),
            std::string::npos)
      << why;
  EXPECT_TRUE(protocol::IsPeerLostError(why)) << why;
  EXPECT_LT(seconds, 60.0) << "abandoned at the group's timeout, not at the new epoch";
}

// The state a member sends is signed with the job's secret: a replacement with the same secret
// takes it (the sender's weights, bit for bit); one whose secret differs (a process of another
// job or launch) refuses it, naming the secret, and keeps nothing it could train from.
TEST(LiveGroup, AReplacementTakesOnlyStateSignedWithTheJobsSecret) {
  for (const bool same : {true, false}) {
    SCOPED_TRACE(same ? "same secret" : "another secret");
    testing::TempDir dir;
    const pid_t source =
        Spawn({{"LIVE_DIR", dir.path()}, {"LIVE_SLOT", "0"}, {"LIVE_SECRET", "secret-a"}},
              "DISABLED_SyncOnce");
    const pid_t joiner = Spawn({{"LIVE_DIR", dir.path()},
                                {"LIVE_SLOT", "1"},
                                {"LIVE_SECRET", same ? "secret-a" : "secret-b"}},
                               "DISABLED_SyncOnce");
    EXPECT_EQ(WaitExit(source), 0);
    EXPECT_EQ(WaitExit(joiner), 0);
    const nlohmann::json got = ReadJson(dir.Join("sync-1"));
    EXPECT_EQ(got["ok"], same) << got.dump();
    if (same) {
      EXPECT_EQ(got["crc"].get<uint32_t>(), CrcOf(at::arange(kWidth, at::kDouble)));
    } else {
      EXPECT_NE(got["error"].get<std::string>().find("not signed with this job's secret"),
                std::string::npos)
          << got.dump();
    }
  }
}

}  // namespace
}  // namespace tenax::parallel
