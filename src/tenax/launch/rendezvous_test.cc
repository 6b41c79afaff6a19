// The rendezvous records' pure parts: who gets which node rank (survivors keep theirs, replaced
// stragglers go to the back of the line) and the progress record node 0 judges stragglers from.
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

}  // namespace
}  // namespace tenax::launch::rdzv
