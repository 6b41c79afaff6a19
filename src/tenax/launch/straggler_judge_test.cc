// Node 0's straggler judgement without an etcd: two nodes of two ranks, rank 2 (node 1's first)
// computing 3x the others' time; what the judge records, what it puts up for replacement with
// --replace-stragglers, and which agents count as a ready spare.
#include "tenax/launch/straggler_judge.h"

#include <gtest/gtest.h>

#include "tenax/protocol/protocol.h"

namespace tenax::launch {
namespace {

constexpr double kNormalS = 0.1;
constexpr double kSlowS = 0.3;  // 3x, over the factor of 2

StragglerJudgeOptions Options(bool replace) {
  StragglerJudgeOptions o;
  o.nnodes = 2;
  o.nproc_per_node = 2;
  o.factor = 2;
  o.steps = 3;
  o.replace_stragglers = replace;
  return o;
}

rdzv::Plan PlanOf(int64_t g) {
  rdzv::Plan plan;
  plan.generation = g;
  plan.nodes = {"agent-a", "agent-b"};
  plan.spares = {"agent-c"};
  return plan;
}

// What nodes 0 and 1 publish after steps 1..last: rank `slow` (if any) takes kSlowS per step.
std::vector<rdzv::NodeProgress> Progress(int64_t last, int slow) {
  std::vector<rdzv::NodeProgress> nodes(2);
  for (int node = 0; node < 2; ++node) {
    nodes[node].agent = node == 0 ? "agent-a" : "agent-b";
    nodes[node].host = node == 0 ? "host-a" : "host-b";
    nodes[node].node_rank = node;
    for (int l = 0; l < 2; ++l) {
      const int rank = node * 2 + l;
      for (int64_t step = 1; step <= last; ++step) {
        nodes[node].ranks[rank].push_back({step, rank == slow ? kSlowS : kNormalS});
      }
    }
  }
  return nodes;
}

TEST(StragglerJudge, RecordsARankSlowForEnoughStepsOnce) {
  StragglerJudge judge(Options(/*replace=*/false));
  // Two slow steps are not enough.
  EXPECT_TRUE(judge.Observe(0, PlanOf(0), Progress(2, 2), 100).empty());
  const std::vector<StragglerFinding> found = judge.Observe(0, PlanOf(0), Progress(5, 2), 101);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
  const nlohmann::json& r = found[0].record;
  EXPECT_EQ(r["time_unix"], 101.0);
  EXPECT_EQ(r["generation"], 0);
  EXPECT_EQ(r["rank"], 2);
  EXPECT_EQ(r["node"], 1);
  EXPECT_EQ(r["host"], "host-b");
  EXPECT_EQ(r["agent"], "agent-b");
  EXPECT_EQ(r["step"], 3);  // the third slow step in a row
  EXPECT_DOUBLE_EQ(r["compute_s"].get<double>(), kSlowS);
  EXPECT_DOUBLE_EQ(r["median_s"].get<double>(), kNormalS);
  EXPECT_EQ(r.size(), 9u) << r.dump();
  // Still slow, but said already in this generation.
  EXPECT_TRUE(judge.Observe(0, PlanOf(0), Progress(8, 2), 102).empty());
  // Without --replace-stragglers nothing is to be replaced, whatever spares there are.
  EXPECT_FALSE(judge.HasPending());
  EXPECT_FALSE(judge.ChooseReplacement({"agent-a", "agent-b", "agent-c"}, {}, PlanOf(0)));
}

TEST(StragglerJudge, HealthyRanksAreNotStragglers) {
  StragglerJudge judge(Options(/*replace=*/true));
  EXPECT_TRUE(judge.Observe(0, PlanOf(0), Progress(10, /*slow=*/-1), 100).empty());
  EXPECT_FALSE(judge.HasPending());
}

TEST(StragglerJudge, PutsTheSlowNodeUpForReplacement) {
  StragglerJudge judge(Options(/*replace=*/true));
  ASSERT_EQ(judge.Observe(0, PlanOf(0), Progress(5, 2), 100).size(), 1u);
  ASSERT_TRUE(judge.HasPending());
  ASSERT_EQ(judge.pending().size(), 1u);
  const rdzv::FailureReport& f = judge.pending().at(1);
  EXPECT_EQ(f.agent, "agent-b");
  EXPECT_EQ(f.host, "host-b");
  EXPECT_EQ(f.node_rank, 1);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.code, protocol::ToInt(protocol::ExitCode::kStraggler));
  EXPECT_EQ(f.kind, "straggler");
  EXPECT_FALSE(f.secondary);
  EXPECT_DOUBLE_EQ(f.wall_s, 100);
  EXPECT_NE(f.cause.find("node 1 straggles: its rank 2 computed 0.300s per step against a "
                         "median of 0.100s"),
            std::string::npos)
      << f.cause;
  // A spare is ready: the slow node's report is the one to act on.
  std::optional<rdzv::FailureReport> chosen =
      judge.ChooseReplacement({"agent-a", "agent-b", "agent-c"}, {}, PlanOf(0));
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->agent, "agent-b");
  EXPECT_EQ(chosen->node_rank, 1);
  EXPECT_EQ(chosen->rank, 2);
}

TEST(StragglerJudge, ChoosesNoReplacementWithoutAReadySpare) {
  StragglerJudge judge(Options(/*replace=*/true));
  ASSERT_EQ(judge.Observe(0, PlanOf(0), Progress(5, 2), 100).size(), 1u);
  ::testing::internal::CaptureStderr();
  // Only the plan's own nodes are alive.
  EXPECT_FALSE(judge.ChooseReplacement({"agent-a", "agent-b"}, {}, PlanOf(0)));
  // The only other live agent is a straggler replaced before (a spare of last resort).
  EXPECT_FALSE(judge.ChooseReplacement({"agent-a", "agent-b", "agent-c"}, {"agent-c"}, PlanOf(0)));
  const std::string said = ::testing::internal::GetCapturedStderr();
  const std::string line = "no spare node yet to take node 1's place: it trains on";
  ASSERT_NE(said.find(line), std::string::npos) << said;
  EXPECT_EQ(said.find(line, said.find(line) + 1), std::string::npos) << "said once: " << said;
  // A spare joins: now it is chosen.
  EXPECT_TRUE(judge.ChooseReplacement({"agent-a", "agent-b", "agent-d"}, {"agent-c"}, PlanOf(0)));
}

TEST(StragglerJudge, AStragglerOutsideThePlanIsRecordedButNotReplaced) {
  StragglerJudge judge(Options(/*replace=*/true));
  rdzv::Plan short_plan = PlanOf(0);
  short_plan.nodes = {"agent-a"};  // node 1's agent unknown to this plan
  const std::vector<StragglerFinding> found = judge.Observe(0, short_plan, Progress(5, 2), 100);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].record["agent"], "");
  EXPECT_FALSE(judge.HasPending());
}

TEST(StragglerJudge, ANewGenerationStartsAfresh) {
  StragglerJudge judge(Options(/*replace=*/true));
  ASSERT_EQ(judge.Observe(0, PlanOf(0), Progress(5, 2), 100).size(), 1u);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(judge.ChooseReplacement({"agent-a", "agent-b"}, {}, PlanOf(0)));
  (void)::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(judge.HasPending());

  // Generation 1: nothing pending, and the same rank may straggle (and be said) again.
  EXPECT_TRUE(judge.Observe(1, PlanOf(1), {}, 200).empty());
  EXPECT_EQ(judge.generation(), 1);
  EXPECT_FALSE(judge.HasPending());
  const std::vector<StragglerFinding> found = judge.Observe(1, PlanOf(1), Progress(5, 2), 201);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].record["generation"], 1);
  ASSERT_TRUE(judge.HasPending());
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(judge.ChooseReplacement({"agent-a", "agent-b"}, {}, PlanOf(1)));
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("no spare node yet"), std::string::npos) << "said again in generation 1";
}

}  // namespace
}  // namespace tenax::launch
