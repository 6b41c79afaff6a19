// The c10d store in etcd against a real etcd (testing_etcd.h): c10d's store contract key by key
// (set/get, add from racing threads, compareSet, check, deleteKey, a wait that times out naming
// its key), keys kept under their prefix, a lost quorum ridden out, and a Gloo group of three
// ranks formed through it whose collectives give the exact sums. The live groups over it:
// live_group_test.cc.
#include "tenax/parallel/etcd_store.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <memory>
#include <thread>

#include "tenax/etcd/testing_etcd_test_fixture.h"
#include "tenax/parallel/communicator.h"

namespace tenax::parallel {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

using EtcdStoreTest = etcd::testing::EtcdTest;

TEST_F(EtcdStoreTest, KeepsC10dsStoreContract) {
  EtcdStore store(etcd_->client_options(), "/job/a/", milliseconds(20000));
  // Values are bytes, zeros and high bytes included.
  const std::vector<uint8_t> raw = {0, 1, 255, 10, 0, 7};
  store.set("addr", raw);
  EXPECT_EQ(store.get("addr"), raw);
  EXPECT_TRUE(store.check({"addr"}));
  EXPECT_FALSE(store.check({"addr", "missing"}));

  // add: a counter that starts at zero, kept as decimal text; racing adds all count.
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -2), 3);
  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([&] {
      EtcdStore mine(etcd_->client_options(), "/job/a/", milliseconds(20000));
      for (int i = 0; i < 5; ++i) mine.add("n", 1);
    });
  }
  for (std::thread& t : adders) t.join();
  EXPECT_EQ(Text(store.get("n")), "23");
  store.set("text", Bytes("x"));
  EXPECT_THROW(store.add("text", 1), c10::DistStoreError);

  // compareSet: swaps only from the expected value; an absent key only from "".
  EXPECT_EQ(Text(store.compareSet("cs", Bytes("old"), Bytes("new"))), "old");
  EXPECT_FALSE(store.check({"cs"}));
  EXPECT_EQ(Text(store.compareSet("cs", {}, Bytes("first"))), "first");
  EXPECT_EQ(Text(store.compareSet("cs", Bytes("nope"), Bytes("second"))), "first");
  EXPECT_EQ(Text(store.compareSet("cs", Bytes("first"), Bytes("second"))), "second");

  // Keys live under the prefix: another prefix sees none of them.
  EXPECT_EQ(store.getNumKeys(), 4);  // addr, n, text, cs
  EtcdStore other(etcd_->client_options(), "/job/b/", milliseconds(20000));
  EXPECT_EQ(other.getNumKeys(), 0);
  EXPECT_FALSE(other.check({"addr"}));
  c10::intrusive_ptr<c10d::Store> copy = store.clone();
  EXPECT_EQ(copy->get("addr"), raw);

  EXPECT_TRUE(store.deleteKey("addr"));
  EXPECT_FALSE(store.deleteKey("addr"));
  EXPECT_EQ(store.getNumKeys(), 3);

  // A wait that cannot end names what it waited for.
  try {
    store.wait({"cs", "never"}, milliseconds(50));
    ADD_FAILURE() << "the wait returned";
  } catch (const c10::DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for never under /job/a/"), std::string::npos)
        << e.what();
  }
  // get waits for the key: another thread's set ends it.
  std::thread later([&] {
    EtcdStore mine(etcd_->client_options(), "/job/a/", milliseconds(20000));
    mine.wait({"go"});
    mine.set("late", Bytes("here"));
  });
  store.set("go", Bytes("1"));
  EXPECT_EQ(Text(store.get("late")), "here");
  later.join();
}

TEST_F(EtcdStoreTest, AnUnreachableEtcdIsAStoreError) {
  etcd::EtcdOptions nowhere = etcd_->client_options();
  nowhere.endpoints = {"127.0.0.1:1"};
  nowhere.attempt_timeout = milliseconds(200);
  EtcdStore store(nowhere, "/job/", milliseconds(1000));
  try {
    store.set("k", Bytes("v"));
    ADD_FAILURE() << "set returned";
  } catch (const c10::DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("etcd store: set k"), std::string::npos) << e.what();
  }
}

// Three members, so that two can be frozen (no quorum), and a client that gives up on a member
// after half a second.
class EtcdStoreCluster : public ::testing::Test {
 protected:
  void StartThree() {
    if (!etcd::EtcdClientAvailable()) GTEST_SKIP() << "built without cpp-httplib (no etcd client)";
    etcd::testing::TestingEtcdOptions three;
    three.members = 3;
    auto started = etcd::testing::TestingEtcd::Start(three);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    etcd_ = std::move(*started);
  }
  etcd::EtcdOptions Options() const {
    etcd::EtcdOptions o = etcd_->client_options();
    o.attempt_timeout = milliseconds(500);
    return o;
  }
  // The event the outage tests wait for: a call found etcd unavailable and is being repeated.
  // Returns the repeats seen (0 after 90 s: none).
  static int64_t WaitForARepeat(const EtcdStore& store) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (store.retried() == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    return store.retried();
  }
  std::unique_ptr<etcd::testing::TestingEtcd> etcd_;
};

// etcd without a quorum (two of three members frozen, as behind a partition) answers nothing
// for a while: the store's calls wait it out instead of failing the rank. A set and a get made
// during the outage are repeated (counted) and complete once the members are back.
TEST_F(EtcdStoreCluster, RidesOutALostQuorum) {
  ASSERT_NO_FATAL_FAILURE(StartThree());
  const etcd::EtcdOptions o = Options();
  EtcdStore store(o, "/job/q/", milliseconds(120000));
  store.set("before", Bytes("1"));
  EXPECT_EQ(store.retried(), 0);
  ASSERT_TRUE(etcd_->PauseMember(1).ok());
  ASSERT_TRUE(etcd_->PauseMember(2).ok());
  std::string got, error;
  std::thread during([&] {
    try {
      store.set("during", Bytes("2"));
      got = Text(store.get("during")) + Text(store.get("before"));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  const int64_t seen = WaitForARepeat(store);
  ASSERT_TRUE(etcd_->ResumeMember(1).ok());
  ASSERT_TRUE(etcd_->ResumeMember(2).ok());
  during.join();
  EXPECT_GT(seen, 0) << "no call was repeated: etcd never looked unavailable";
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, "21");
}

// The same outage under a store whose caller has a reason to stop waiting (a live group's
// newer epoch): the repeats end with it instead of lasting the store's timeout.
TEST_F(EtcdStoreCluster, ARepeatedCallStopsWhenTheCallerGivesUp) {
  ASSERT_NO_FATAL_FAILURE(StartThree());
  const etcd::EtcdOptions o = Options();
  std::atomic<bool> superseded{false};
  EtcdStore store(o, "/job/g/", milliseconds(600000), [&]() -> std::optional<std::string> {
    if (superseded) return std::string("epoch 3 was published");
    return std::nullopt;
  });
  ASSERT_TRUE(etcd_->PauseMember(0).ok());
  ASSERT_TRUE(etcd_->PauseMember(2).ok());
  std::string error;
  std::thread during([&] {
    try {
      store.set("k", Bytes("v"));
    } catch (const c10::DistStoreError& e) {
      error = e.what();
    }
  });
  EXPECT_GT(WaitForARepeat(store), 0);
  superseded = true;
  during.join();
  ASSERT_TRUE(etcd_->ResumeMember(0).ok());
  ASSERT_TRUE(etcd_->ResumeMember(2).ok());
  EXPECT_NE(error.find("etcd store: set k: stopped waiting for etcd"), std::string::npos) << error;
  EXPECT_NE(error.find("epoch 3 was published"), std::string::npos) << error;
}

TEST_F(EtcdStoreCluster, OnlyAWriteSentAndUnansweredHasAnUnknownOutcome) {
  EXPECT_TRUE(etcd::OutcomeUnknown(
      Unavailable(std::string("etcd write to /v3/kv/put sent but unanswered, ") +
                  etcd::kOutcomeUnknown + " (timeout)")));
  EXPECT_FALSE(etcd::OutcomeUnknown(Unavailable("no etcd endpoint answered (refused)")));
  EXPECT_FALSE(etcd::OutcomeUnknown(InvalidArgument(etcd::kOutcomeUnknown)));
}

// Three ranks (threads) form a Gloo group through keys in etcd; its collectives are exact.
TEST_F(EtcdStoreTest, AGlooGroupFormsThroughIt) {
  constexpr int kSize = 3;
  std::array<double, kSize> sums{};
  std::array<double, kSize> gathered{};
  std::array<std::string, kSize> errors;
  auto rank = [&](int r) {
    GroupOptions o;
    o.timeout = std::chrono::seconds(60);
    Result<std::unique_ptr<Communicator>> c =
        ConnectEtcdStoreGroup(etcd_->client_options(), "/job/live-g0-epoch-0/store/", r, kSize, o);
    if (!c.ok()) {
      errors[static_cast<size_t>(r)] = c.status().ToString();
      return;
    }
    at::Tensor x = at::full({5}, static_cast<double>(r + 1), at::kDouble);
    (*c)->AllReduceSum(x);
    sums[static_cast<size_t>(r)] = x.sum().item<double>();
    at::Tensor all = (*c)->AllGather(at::full({1}, static_cast<double>(10 * r), at::kDouble));
    gathered[static_cast<size_t>(r)] = all.sum().item<double>();
  };
  std::vector<std::thread> ranks;
  for (int r = 0; r < kSize; ++r) ranks.emplace_back(rank, r);
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kSize; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(errors[static_cast<size_t>(r)], "");
    EXPECT_EQ(sums[static_cast<size_t>(r)], 5 * (1 + 2 + 3));
    EXPECT_EQ(gathered[static_cast<size_t>(r)], 0 + 10 + 20);
  }
}

}  // namespace
}  // namespace tenax::parallel
