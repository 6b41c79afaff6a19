// The node agents' live link against a real etcd (testing_etcd.h), two nodes' links on one job:
// the first record is put once, drops from both nodes at once both land (compare-and-swap), each
// newer membership reaches the ranks' file, the nodes' rank states and a lost node's vacancy
// reach the other node, of two spares claiming one vacancy exactly one wins, and a node rank lost
// again (its spare lost too) is vacant once more, one turn later.
#include "tenax/launch/live_link_etcd.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tenax/core/temp_dir.h"
#include "tenax/etcd/testing_etcd_test_fixture.h"
#include "tenax/protocol/live_membership.h"

namespace tenax::launch {
namespace {

class EtcdLiveLinkTest : public etcd::testing::EtcdTest {
 protected:
  void SetUp() override {
    EtcdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    for (int i = 0; i < 2; ++i) {
      auto c = etcd::EtcdClient::Create(etcd_->client_options());
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      clients_.push_back(std::move(*c));
      links_.push_back(std::make_unique<EtcdLiveLink>(clients_.back().get(), rdzv::Keys("job"),
                                                      "agent" + std::to_string(i)));
    }
  }
  static rdzv::LiveRecord First() {
    rdzv::LiveRecord r;
    r.membership.world = 4;
    r.membership.members = {0, 1, 2, 3};
    return r;
  }
  // Drops `leave` from the newest record (nothing if none of them is a member any more).
  static Result<std::optional<rdzv::LiveRecord>> Drop(EtcdLiveLink& link, std::vector<int> leave) {
    return link.Update(
        0, [&](const std::optional<rdzv::LiveRecord>& now) -> std::optional<rdzv::LiveRecord> {
          if (!now) return std::nullopt;
          for (int r : leave) {
            if (now->membership.Has(r)) return rdzv::NextLiveEpoch(*now, leave, {});
          }
          return std::nullopt;
        });
  }
  std::vector<std::unique_ptr<etcd::EtcdClient>> clients_;
  std::vector<std::unique_ptr<EtcdLiveLink>> links_;
};

TEST_F(EtcdLiveLinkTest, DropsFromTwoNodesAtOnceBothLandAndReachTheRanksFile) {
  testing::TempDir a, b;
  links_[0]->Begin(0, a.path());
  links_[1]->Begin(0, b.path());
  // Both nodes put the first record; one of them is it.
  for (auto& link : links_) {
    auto put = link->Update(
        0, [](const std::optional<rdzv::LiveRecord>& was) -> std::optional<rdzv::LiveRecord> {
          if (was) return std::nullopt;
          return First();
        });
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    ASSERT_TRUE(*put);
    EXPECT_EQ((*put)->membership.epoch, 0);
  }
  // Node 0 drops rank 1 while node 1 drops rank 3: neither change is lost.
  std::thread other([&] { ASSERT_TRUE(Drop(*links_[1], {3}).ok()); });
  ASSERT_TRUE(Drop(*links_[0], {1}).ok());
  other.join();
  auto now = Drop(*links_[0], {1});  // a repeat: changes nothing
  ASSERT_TRUE(now.ok() && *now);
  EXPECT_EQ((*now)->membership.epoch, 2);
  EXPECT_EQ((*now)->membership.members, (std::vector<int>{0, 2}));
  // Each link took the newest record it met, and wrote it where its ranks read it.
  auto file = protocol::ReadLiveMembership(a.path());
  ASSERT_TRUE(file.ok() && *file);
  EXPECT_EQ((*file)->members, (std::vector<int>{0, 2}));
  ASSERT_TRUE(links_[0]->Current(0));
  EXPECT_EQ(links_[0]->Current(0)->membership.epoch, 2);
}

TEST_F(EtcdLiveLinkTest, AVacancyIsPutOnceAndOneOfTwoSparesTakesIt) {
  testing::TempDir a, b;
  links_[0]->Begin(0, a.path());
  ASSERT_TRUE(links_[0]->PublishOwn(0, 0, {{0, {1, false, true}}, {1, {1, true, true}}}).ok());
  rdzv::LiveVacancy first{1, 0, "lost", {2, 3}, 1000.5, 1, {0, 1}, 8};
  ASSERT_TRUE(links_[0]->Vacate(0, first).ok());
  rdzv::LiveVacancy second = first;
  second.step = 99;
  ASSERT_TRUE(links_[0]->Vacate(0, second).ok());  // another node saw it later: no change
  // A spare that starts watching now reads what the other node said.
  links_[1]->Begin(0, b.path());
  ASSERT_EQ(links_[1]->Vacancies(0).count(1), 1u);
  EXPECT_EQ(links_[1]->Vacancies(0).at(1), first);
  EXPECT_EQ(links_[1]->Others(0).at(1), (rdzv::LiveRankState{1, true, true}));
  // Two spares claim it: exactly one holds it, and both know which.
  Result<bool> one = links_[0]->Claim(0, 1, 0), two = links_[1]->Claim(0, 1, 0);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_NE(*one, *two);
  const std::string taker = *one ? "agent0" : "agent1";
  EXPECT_EQ(links_[1]->Claims(0).at(1), taker);
  // The spare that took it is lost in its turn: node rank 1 is vacant again, one turn later, and
  // unclaimed until a spare takes that turn; the first turn's claim no longer counts.
  rdzv::LiveVacancy again = first;
  again.turn = 1;
  again.agent = taker;
  again.step = 20;
  ASSERT_TRUE(links_[0]->Vacate(0, again).ok());
  links_[1]->Begin(0, b.path());  // read afresh (no watch here)
  for (auto& link : links_) {
    ASSERT_EQ(link->Vacancies(0).count(1), 1u);
    EXPECT_EQ(link->Vacancies(0).at(1), again);
    EXPECT_EQ(link->Claims(0).count(1), 0u);
  }
  Result<bool> took = links_[1]->Claim(0, 1, 1);
  ASSERT_TRUE(took.ok() && *took);
  EXPECT_EQ(links_[1]->Claims(0).at(1), "agent1");
  Result<bool> late = links_[0]->Claim(0, 1, 1);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(*late);
  EXPECT_EQ(links_[0]->Claims(0).at(1), "agent1");
  // Another generation's view has none of it.
  EXPECT_TRUE(links_[1]->Vacancies(1).empty());
  EXPECT_TRUE(links_[1]->Claims(1).empty());
}

// An agent whose lease is gone (it was stopped or cut off past it, and the others found its
// node lost) is refused by etcd itself: its change to the record, its vacancy and its claim fail
// naming the fence and change nothing, whatever the agent itself believes; under a new lease
// (registered again) it may claim once more.
TEST_F(EtcdLiveLinkTest, AnAgentWithoutItsLeaseChangesNothing) {
  testing::TempDir a;
  etcd::EtcdClient& c = *clients_[0];
  Result<etcd::EtcdLease> lease = c.GrantLease(std::chrono::seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::atomic<int64_t> held{lease->id};
  const rdzv::Keys keys("job");
  ASSERT_TRUE(c.Put(keys.agent("agent0"), "{}", lease->id).ok());
  EtcdLiveLink link(&c, keys, "agent0", [&] { return held.load(); });
  link.Begin(0, a.path());
  auto put = link.Update(0, [](const std::optional<rdzv::LiveRecord>&) { return First(); });
  ASSERT_TRUE(put.ok() && *put) << put.status().ToString();
  ASSERT_TRUE(c.RevokeLease(lease->id).ok());  // its key is gone with it
  auto dropped = Drop(link, {3});
  ASSERT_FALSE(dropped.ok());
  EXPECT_NE(dropped.status().message().find("lost its etcd lease (fenced)"), std::string::npos)
      << dropped.status().ToString();
  rdzv::LiveVacancy v{1, 0, "other", {2, 3}, 1000.5, 1, {0, 1}, 8};
  EXPECT_FALSE(link.Vacate(0, v).ok());
  EXPECT_FALSE(link.Claim(0, 1, 0).ok());
  // Its node rank's states are the spare's to publish now (the same key): its stale ones would
  // stay there, since the spare publishes only what changes.
  rdzv::LiveRankState stale;
  stale.ready = true;
  stale.epoch = 0;
  const Status published = link.PublishOwn(0, 1, {{2, stale}, {3, stale}});
  EXPECT_NE(published.message().find("lost its etcd lease (fenced)"), std::string::npos)
      << published.ToString();
  EXPECT_FALSE(link.PublishRecoveries(0, 1, nlohmann::json::array({{{"rank", 2}}})).ok());
  links_[1]->Begin(0, a.path());  // what etcd holds: none of it
  EXPECT_EQ(links_[1]->Current(0)->membership.epoch, 0);
  EXPECT_TRUE(links_[1]->Vacancies(0).empty());
  EXPECT_TRUE(links_[1]->Others(0).empty());
  Result<etcd::RangeResponse> recoveries = c.GetPrefix(keys.live_recoveries(0));
  ASSERT_TRUE(recoveries.ok()) << recoveries.status().ToString();
  EXPECT_TRUE(recoveries->kvs.empty());
  ASSERT_TRUE(links_[1]->Vacate(0, v).ok());
  EXPECT_TRUE(links_[1]->Claims(0).empty());
  // Registered again under a new lease.
  Result<etcd::EtcdLease> again = c.GrantLease(std::chrono::seconds(30));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(c.Put(keys.agent("agent0"), "{}", again->id).ok());
  held = again->id;
  Result<bool> took = link.Claim(0, 1, 0);
  ASSERT_TRUE(took.ok()) << took.status().ToString();
  EXPECT_TRUE(*took);
  ASSERT_TRUE(link.PublishOwn(0, 1, {{2, stale}}).ok());
}

}  // namespace
}  // namespace tenax::launch
