// The rendezvous records' pure parts: who gets which node rank (survivors keep theirs, replaced
// stragglers go to the back of the line), the progress record node 0 judges stragglers from, and
// live recovery's records (the membership with its healing ranks, the next epoch, rank states).
#include "tenax/launch/rendezvous.h"

#include <gtest/gtest.h>

namespace tenax::launch::rdzv {
namespace {

TEST(MakePlan, FirstGenerationTakesAgentsInJoinOrder) {
  auto p = MakePlan(0, 2, {"a", "b", "c"}, nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p->spares, (std::vector<std::string>{"c"}));
  EXPECT_FALSE(MakePlan(0, 3, {"a", "b"}, nullptr).has_value());
}

TEST(MakePlan, SurvivorsKeepTheirNodeRankAndASpareFillsTheHole) {
  Plan previous;
  previous.nodes = {"a", "b"};
  previous.spares = {"c"};
  // b is lost; a joined after c this time but keeps node rank 0.
  auto p = MakePlan(1, 2, {"c", "a"}, &previous);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->nodes, (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(p->spares.empty());
}

TEST(MakePlan, AReplacedStragglerBecomesASpareOfLastResort) {
  Plan previous;
  previous.nodes = {"a", "b"};
  previous.spares = {"c"};
  // b straggled: it joined again (first, even), yet the spare takes node rank 1.
  auto p = MakePlan(1, 2, {"b", "a", "c"}, &previous, {"b"});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->nodes, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(p->spares, (std::vector<std::string>{"b"}));
  // With no one else, a slow node is better than none.
  auto q = MakePlan(2, 2, {"b", "a"}, &*p, {"b"});
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->nodes, (std::vector<std::string>{"a", "b"}));
}

TEST(NodeProgress, RoundTripsAndRejectsDamagedRecords) {
  NodeProgress p;
  p.agent = "host1-42-abcdef";
  p.host = "host1";
  p.node_rank = 1;
  p.ranks[2] = {{7, 0.25}, {8, 0.5}};
  p.ranks[3] = {{8, 0.125}};
  auto back = NodeProgress::FromJson(p.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->agent, p.agent);
  EXPECT_EQ(back->host, p.host);
  EXPECT_EQ(back->node_rank, 1);
  EXPECT_EQ(back->ranks, p.ranks);
  EXPECT_FALSE(NodeProgress::FromJson("not json").ok());
  EXPECT_FALSE(NodeProgress::FromJson(R"({"ranks":{"x":[[1,0.1]]}})").ok());
  EXPECT_FALSE(NodeProgress::FromJson(R"({"ranks":{"1":[[1]]}})").ok());
}

LiveRecord FourMembers() {
  LiveRecord r;
  r.membership.generation = 2;
  r.membership.world = 4;
  r.membership.members = {0, 1, 2, 3};
  return r;
}

// A drop takes the rank out of the members and of healing; a join lists it as a member, joining
// and healing; members stay ascending; the epoch moves by one each time.
TEST(LiveRecord, NextEpochDropsAndJoins) {
  const LiveRecord e1 = NextLiveEpoch(FourMembers(), {2}, {});
  EXPECT_EQ(e1.membership.epoch, 1);
  EXPECT_EQ(e1.membership.generation, 2);
  EXPECT_EQ(e1.membership.members, (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(e1.membership.joining.empty());
  EXPECT_TRUE(e1.healing.empty());
  const LiveRecord e2 = NextLiveEpoch(e1, {}, {2});
  EXPECT_EQ(e2.membership.epoch, 2);
  EXPECT_EQ(e2.membership.members, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(e2.membership.joining, (std::vector<int>{2}));
  EXPECT_EQ(e2.healing, (std::vector<int>{2}));
  // The joiner dies while healing, and rank 0 with it: both leave; a member is not joined twice.
  const LiveRecord e3 = NextLiveEpoch(e2, {0, 2}, {1});
  EXPECT_EQ(e3.membership.members, (std::vector<int>{1, 3}));
  EXPECT_TRUE(e3.membership.joining.empty());
  EXPECT_TRUE(e3.healing.empty());
}

TEST(LiveRecord, RoundTripsAndRejectsDamagedRecords) {
  const LiveRecord e2 = NextLiveEpoch(NextLiveEpoch(FourMembers(), {1}, {}), {}, {1});
  Result<LiveRecord> back = LiveRecord::FromJson(e2.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, e2);
  // A record before any healing field (as the single-node file) reads with none.
  Result<LiveRecord> plain =
      LiveRecord::FromJson(R"({"epoch":0,"generation":1,"world":2,"members":[0,1],"joining":[]})");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(plain->healing.empty());
  for (const std::string bad :
       {std::string("not json"),
        std::string(R"({"epoch":0,"generation":1,"world":2,"members":[0,1],"healing":[5]})"),
        std::string(R"({"epoch":0,"generation":1,"world":2,"members":[0,1],"healing":3})"),
        std::string(R"({"epoch":0,"generation":1,"world":2,"members":[0,7]})")}) {
    EXPECT_FALSE(LiveRecord::FromJson(bad).ok()) << bad;
  }
}

TEST(LiveRankState, RoundTripsAndRejectsDamagedRecords) {
  std::map<int, LiveRankState> ranks;
  ranks[2] = {1, false, true};
  ranks[3] = {-1, true, false, true};
  Result<std::map<int, LiveRankState>> back = ParseLiveStates(LiveStatesJson(ranks));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, ranks);
  EXPECT_FALSE(ParseLiveStates("[1]").ok());
  EXPECT_FALSE(ParseLiveStates(R"({"x":{"epoch":1}})").ok());
  EXPECT_FALSE(ParseLiveStates(R"({"-1":{"epoch":1}})").ok());
  EXPECT_FALSE(ParseLiveStates(R"({"1":3})").ok());
}

TEST(LiveVacancy, RoundTripsAndRejectsDamagedRecords) {
  LiveVacancy v{1, 2, "host1-42-abcdef", {2, 3}, 1700000000.25, 3, {0, 1}, 17};
  Result<LiveVacancy> back = LiveVacancy::FromJson(v.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, v);
  EXPECT_FALSE(LiveVacancy::FromJson("[]").ok());
  EXPECT_FALSE(LiveVacancy::FromJson(R"({"node":1})").ok());
  EXPECT_FALSE(LiveVacancy::FromJson(R"({"node":-1,"turn":0,"agent":"a","ranks":[2],)"
                                     R"("time_unix":1,"epoch":1,"members":[0],"step":3})")
                   .ok());
  EXPECT_FALSE(LiveVacancy::FromJson(R"({"node":1,"turn":-1,"agent":"a","ranks":[2],)"
                                     R"("time_unix":1,"epoch":1,"members":[0],"step":3})")
                   .ok());
  // The keys: one vacancy and one claim per node rank and turn, recoveries per node and agent.
  Keys k("job");
  EXPECT_EQ(k.live_claim(2, 1, 0), k.live_claims(2) + "1/0");
  EXPECT_EQ(k.live_vacant(2, 1, 3), k.live_vacancies(2) + "1/3");
  EXPECT_EQ(ParseNodeTurn("1/3"), std::make_pair(1, 3));
  EXPECT_EQ(ParseNodeTurn("1"), std::make_pair(-1, -1));
  EXPECT_EQ(ParseNodeTurn("x/0"), std::make_pair(-1, -1));
  EXPECT_EQ(k.live_recoveries(2, 1, "x"), k.live_recoveries(2) + "1/x");
}

}  // namespace
}  // namespace tenax::launch::rdzv
