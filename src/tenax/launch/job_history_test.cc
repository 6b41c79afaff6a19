// The job's goodput.json from its history in etcd, without an etcd: two generations, the first
// ended by a lost node (its failure dated by the peers that saw it go, not by the lease expiry),
// the second with a straggler, and a report written after the job ended that still ends where the
// job did.
#include "tenax/launch/job_history.h"

#include <gtest/gtest.h>

#include "tenax/etcd/client.h"
#include "tenax/etcd/testing_etcd_test_fixture.h"

namespace tenax::launch {
namespace {

rdzv::FailureReport Report(const std::string& agent, int node, const std::string& kind,
                           bool secondary, double wall_s) {
  rdzv::FailureReport r;
  r.agent = agent;
  r.host = agent + ".host";
  r.node_rank = node;
  r.kind = kind;
  r.cause = kind == "node-lost" ? "node 1 lost its lease" : "peer lost";
  r.secondary = secondary;
  r.wall_s = wall_s;
  r.code = 10;
  return r;
}

JobHistory TwoGenerations() {
  JobHistory h;
  h.start_unix = 1000;
  GenerationHistory g0;
  g0.generation = 0;
  g0.plan = rdzv::Plan{};
  g0.plan->generation = 0;
  g0.plan->nodes = {"a", "b"};
  g0.lead_report = {{"start_unix", 1000.0},  {"ready_unix", 1010.0},     {"resume_step", 0},
                    {"last_step", 20},       {"steps_s", 40.0},          {"checkpoint_s", 2.0},
                    {"tokens_per_s", 500.0}, {"last_step_unix", 1060.0}, {"end_unix", 1065.0},
                    {"exit_code", 8}};
  // Node 0's ranks lost their peers at 1061; node 1's lease expired, found at 1064.
  g0.failures = {Report("a", 0, "crash", /*secondary=*/true, 1061),
                 Report("c", 1, "node-lost", /*secondary=*/false, 1064)};
  GenerationHistory g1;
  g1.generation = 1;
  g1.plan = rdzv::Plan{};
  g1.plan->generation = 1;
  g1.plan->nodes = {"a", "d"};
  g1.lead_report = {{"start_unix", 1066.0},  {"ready_unix", 1075.0},     {"resume_step", 20},
                    {"last_step", 50},       {"steps_s", 60.0},          {"checkpoint_s", 0.0},
                    {"tokens_per_s", 600.0}, {"last_step_unix", 1140.0}, {"end_unix", 1142.0},
                    {"exit_code", 0}};
  g1.stragglers = {{{"rank", 3}, {"time_unix", 1100.0}}};
  h.generations = {g0, g1};
  return h;
}

TEST(JobGoodput, AccountsEveryGenerationAndDatesALostNodeByItsPeers) {
  const nlohmann::json r = JobGoodput(TwoGenerations(), /*now_unix=*/1300, /*code=*/0,
                                      /*ended=*/true, "host0", 42);
  // Written after the end: the report ends a second after the newest generation did.
  EXPECT_DOUBLE_EQ(r["wall_s"].get<double>(), 143.0);
  EXPECT_EQ(r["restarts"], 1);
  EXPECT_EQ(r["step"], 50);
  ASSERT_EQ(r["generations"].size(), 2u);
  ASSERT_EQ(r["failures"].size(), 1u);
  const nlohmann::json& f = r["failures"][0];
  EXPECT_EQ(f["kind"], "node-lost");
  EXPECT_EQ(f["node"], 1);
  EXPECT_EQ(f["host"], "c.host");
  EXPECT_EQ(f["generation"], 0);
  EXPECT_DOUBLE_EQ(f["time_s"].get<double>(), 64.0);
  EXPECT_DOUBLE_EQ(f["detection_s"].get<double>(), 3.0);  // 1064 - 1061
  ASSERT_EQ(r["stragglers"].size(), 1u);
  EXPECT_DOUBLE_EQ(r["stragglers"][0]["time_s"].get<double>(), 100.0);
  EXPECT_FALSE(r["stragglers"][0].contains("time_unix"));
  ASSERT_EQ(r["nodes_by_generation"].size(), 2u);
  EXPECT_EQ(r["nodes_by_generation"][1]["nodes"], nlohmann::json({"a", "d"}));
  // Every second is accounted for once.
  double sum = 0;
  for (const auto& [name, s] : r["time_s"].items()) sum += s.get<double>();
  EXPECT_NEAR(sum, r["wall_s"].get<double>(), 1e-9);
  EXPECT_GT(r["time_s"]["productive"].get<double>(), 0);
  EXPECT_GT(r["time_s"]["detection"].get<double>(), 0);
}

TEST(JobGoodput, AGenerationWithoutNodeZerosReportStartsNowAndARunningJobIsNotCut) {
  JobHistory h = TwoGenerations();
  h.generations[1].lead_report = nullptr;  // node 0 of generation 1 has reported nothing yet
  const nlohmann::json r = JobGoodput(h, 1200, 0, /*ended=*/false, "host0", 42);
  EXPECT_DOUBLE_EQ(r["wall_s"].get<double>(), 200.0);
  ASSERT_EQ(r["generations"].size(), 2u);
  EXPECT_DOUBLE_EQ(r["generations"][1]["start_s"].get<double>(), 200.0);
}

// Silent-data-corruption detections travel in the failure reports of the nodes whose ranks
// recorded them (their run folders may be private): goodput.json `sdc` has each once, ordered,
// and the report survives its trip through JSON.
TEST(JobGoodput, GathersEveryNodesCorruptionDetectionsOnce) {
  JobHistory h = TwoGenerations();
  const nlohmann::json rank3 = {{"generation", 0}, {"step", 10}, {"rank", 3}, {"host", "b.host"}};
  const nlohmann::json rank2 = {{"generation", 0}, {"step", 10}, {"rank", 2}, {"host", "b.host"}};
  rdzv::FailureReport b = Report("b", 1, "silent-corruption", /*secondary=*/false, 1062);
  b.rank = 3;
  b.sdc = {rank3, rank2};
  const Result<rdzv::FailureReport> parsed = rdzv::FailureReport::FromJson(b.ToJson().dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->sdc, b.sdc);
  EXPECT_FALSE(Report("a", 0, "crash", true, 0).ToJson().contains("sdc")) << "left out when none";
  // A shared folder: another node reported the same record again.
  rdzv::FailureReport again = Report("a", 0, "silent-corruption", /*secondary=*/true, 1061);
  again.sdc = {rank2};
  h.generations[0].failures.push_back(*parsed);
  h.generations[0].failures.push_back(again);
  const nlohmann::json r = JobGoodput(h, 1300, 0, true, "host0", 42);
  EXPECT_EQ(r["sdc"], nlohmann::json({rank2, rank3})) << r.dump(2);
}

// resilience.mode = "live" on several nodes: each node's live recoveries come with their times on
// the wall clock (its own launch clock differs from the job's); goodput.json has them on the
// job's, the wall-clock fields gone, and a replacement that never healed keeps healed_at_s -1.
TEST(JobGoodput, PlacesEveryNodesLiveRecoveriesOnTheJobsClock) {
  JobHistory h = TwoGenerations();
  h.generations[1].live_recoveries = {{{"rank", 3},
                                       {"node", 1},
                                       {"generation", 1},
                                       {"time_s", 4.0},  // node 1's clock
                                       {"time_unix", 1100.0},
                                       {"ready_at_s", 5.0},
                                       {"ready_at_unix", 1101.0},
                                       {"healed_at_s", 5.5},
                                       {"healed_at_unix", 1101.5}},
                                      {{"rank", 2},
                                       {"node", 1},
                                       {"generation", 1},
                                       {"time_s", 9.0},
                                       {"time_unix", 1105.0},
                                       {"healed_at_s", -1.0},
                                       {"discarded_at_s", 9.5},
                                       {"discarded_at_unix", 1105.5}}};
  const nlohmann::json r = JobGoodput(h, 1300, 0, /*ended=*/true, "host0", 42);
  ASSERT_EQ(r["live_recoveries"].size(), 2u) << r.dump(2);
  const nlohmann::json& healed = r["live_recoveries"][0];
  EXPECT_EQ(healed["rank"], 3);
  EXPECT_DOUBLE_EQ(healed["time_s"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(healed["ready_at_s"].get<double>(), 101.0);
  EXPECT_DOUBLE_EQ(healed["healed_at_s"].get<double>(), 101.5);
  EXPECT_FALSE(healed.contains("time_unix"));
  EXPECT_FALSE(healed.contains("ready_at_unix"));
  EXPECT_FALSE(healed.contains("healed_at_unix"));
  const nlohmann::json& discarded = r["live_recoveries"][1];
  EXPECT_DOUBLE_EQ(discarded["time_s"].get<double>(), 105.0);
  EXPECT_DOUBLE_EQ(discarded["healed_at_s"].get<double>(), -1.0);
  EXPECT_DOUBLE_EQ(discarded["discarded_at_s"].get<double>(), 105.5);
}

// A node lost live: with a spare in its place, that spare's records say it all; with none, each
// of its ranks gets a record from the vacancy (never healed, short-handed to the generation's end).
// Node 2 was lost twice: a spare took its first vacancy, none its second.
TEST(JobGoodput, ANodeLostLiveThatNoSpareTookIsRecordedRankByRank) {
  JobHistory h = TwoGenerations();
  h.generations[1].live_vacancies = {{1, 0, "d", {2, 3}, 1110.0, 1, {0, 1}, 30},
                                     {2, 0, "e", {4, 5}, 1120.0, 2, {0, 1}, 35},
                                     {2, 1, "s", {4, 5}, 1130.0, 4, {0, 1}, 40}};
  h.generations[1].live_claimed = {{2, 0}};  // a spare took node 2's place (its records: its own)
  const nlohmann::json r = JobGoodput(h, 1300, 0, /*ended=*/true, "host0", 42);
  ASSERT_EQ(r["live_recoveries"].size(), 4u) << r.dump(2);
  for (size_t i = 2; i < 4; ++i) {
    const nlohmann::json& l = r["live_recoveries"][i];
    EXPECT_EQ(l["rank"], 2 + static_cast<int>(i));
    EXPECT_EQ(l["node"], 2);
    EXPECT_EQ(l["steps_short_handed"], 10);  // from step 40 to 50
  }
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& l = r["live_recoveries"][i];
    EXPECT_EQ(l["rank"], 2 + static_cast<int>(i));
    EXPECT_EQ(l["node"], 1);
    EXPECT_EQ(l["kind"], "node-lost");
    EXPECT_DOUBLE_EQ(l["time_s"].get<double>(), 110.0);
    EXPECT_DOUBLE_EQ(l["healed_at_s"].get<double>(), -1.0);
    EXPECT_EQ(l["steps_short_handed"], 20);  // from step 30 to the generation's last, 50
    EXPECT_NE(l["outcome"].get<std::string>().find("no spare took node 1's place"),
              std::string::npos);
  }
}

// The spare ("s") that took node 1's place was lost in its turn before it published that its
// replacements healed: their recoveries end at its loss (discarded, with why), and the next
// spare's ("t") healed ones stay as they are.
TEST(JobGoodput, ASpareLostBeforeItsReplacementsHealedEndsTheirRecoveries) {
  JobHistory h = TwoGenerations();
  h.generations[1].live_vacancies = {{1, 0, "d", {2, 3}, 1110.0, 1, {0, 1}, 30},
                                     {1, 1, "s", {2, 3}, 1130.0, 3, {0, 1}, 40}};
  h.generations[1].live_claimed = {{1, 0}, {1, 1}};
  for (const auto& [agent, lost, healed] : {std::tuple{"s", 1110.0, -1.0}, {"t", 1130.0, 1133.0}}) {
    for (int rank : {2, 3}) {
      nlohmann::json x = {{"rank", rank},      {"node", 1},      {"kind", "node-lost"},
                          {"time_unix", lost}, {"agent", agent}, {"healed_at_s", -1}};
      if (healed > 0) x["healed_at_unix"] = healed;
      h.generations[1].live_recoveries.push_back(x);
    }
  }
  const nlohmann::json r = JobGoodput(h, 1300, 0, /*ended=*/true, "host0", 42);
  ASSERT_EQ(r["live_recoveries"].size(), 4u) << r.dump(2);
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& l = r["live_recoveries"][i];
    if (i < 2) {
      EXPECT_DOUBLE_EQ(l.value("discarded_at_s", -1.0), 130.0) << l.dump();
      EXPECT_NE(l.value("outcome", "").find("node 1 (s), which ran its replacement, was lost too"),
                std::string::npos)
          << l.dump();
    } else {
      EXPECT_DOUBLE_EQ(l["healed_at_s"].get<double>(), 133.0) << l.dump();
      EXPECT_FALSE(l.contains("discarded_at_s")) << l.dump();
    }
  }
}

// Node 1 cut off, not dead: the others recovered its ranks live (a spare took its place, and
// wrote its records as node-lost), and its agent, back, reported a partition. That names the live
// recovery (kind and cause) and is not a failure of the generation; the same report from an agent
// whose node was not lost live (restart mode) still is one.
TEST(JobGoodput, ACutOffNodeRecoveredLiveIsAPartitionNotAFailure) {
  JobHistory h = TwoGenerations();
  h.generations[1].live_vacancies = {{1, 0, "d", {2, 3}, 1110.0, 1, {0, 1}, 30}};
  h.generations[1].live_claimed = {{1, 0}};
  for (int rank : {2, 3}) {
    h.generations[1].live_recoveries.push_back({{"rank", rank},
                                                {"node", 1},
                                                {"epoch", 1},
                                                {"kind", "node-lost"},
                                                {"cause", "node 1 (d) was lost"},
                                                {"time_unix", 1110.0},
                                                {"healed_at_unix", 1112.0}});
  }
  rdzv::FailureReport cut = Report("d", 1, "partition", /*secondary=*/false, 1108);
  cut.cause = "node 1 (d.host) was cut off from etcd while alive";
  h.generations[1].failures = {cut};
  const nlohmann::json r = JobGoodput(h, 1300, 0, /*ended=*/true, "host0", 42);
  ASSERT_EQ(r["failures"].size(), 1u) << r.dump(2);  // generation 0's alone
  EXPECT_EQ(r["failures"][0]["generation"], 0);
  ASSERT_EQ(r["live_recoveries"].size(), 2u) << r.dump(2);
  for (const nlohmann::json& l : r["live_recoveries"]) {
    EXPECT_EQ(l["kind"], "partition");
    EXPECT_EQ(l["cause"], "node 1 (d.host) was cut off from etcd while alive");
  }

  h.generations[1].failures[0].agent = "x";  // no vacancy of its: a failure of generation 1
  const nlohmann::json restart = JobGoodput(h, 1300, 0, /*ended=*/true, "host0", 42);
  ASSERT_EQ(restart["failures"].size(), 2u) << restart.dump(2);
  EXPECT_EQ(restart["failures"][1]["kind"], "partition");
  EXPECT_EQ(restart["live_recoveries"][0]["kind"], "node-lost");
}

// ReadJobHistory against a real etcd: each generation's lead report is that of its lowest node
// rank run by the agent its plan names. Generation 0 lost node 0 live and a spare ("s") took its
// place late: node 1's report leads. Generation 1 is a plain one: node 0's. Generation 2 has only
// the spare's report: a last resort, taken.
using JobHistoryInEtcd = etcd::testing::EtcdTest;
TEST_F(JobHistoryInEtcd, TheLeadReportIsTheLowestPlannedNodes) {
  auto client = etcd::EtcdClient::Create(etcd_->client_options());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const rdzv::Keys keys("job");
  auto put = [&](const std::string& key, const nlohmann::json& value) {
    ASSERT_TRUE((*client)->Put(key, value.dump()).ok()) << key;
  };
  for (int64_t g = 0; g < 3; ++g) {
    rdzv::Plan plan;
    plan.generation = g;
    plan.nodes = {"a", "b"};
    put(keys.plan(g), plan.ToJson());
  }
  put(keys.report(0, 0), {{"agent", "s"}, {"start_unix", 1030.0}});
  put(keys.report(0, 1), {{"agent", "b"}, {"start_unix", 1000.0}});
  put(keys.report(1, 1), {{"agent", "b"}, {"start_unix", 1101.0}});
  put(keys.report(1, 0), {{"agent", "a"}, {"start_unix", 1100.0}});
  put(keys.report(2, 0), {{"agent", "s"}, {"start_unix", 1200.0}});
  put(keys.live_recoveries(0, 0, "s"), nlohmann::json::array({{{"rank", 0}, {"node", 0}}}));
  auto h = ReadJobHistory(**client, keys, /*current=*/2, /*start_unix=*/1000);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->generations.size(), 3u);
  EXPECT_EQ(h->generations[0].lead_report.value("agent", ""), "b");
  EXPECT_EQ(h->generations[1].lead_report.value("agent", ""), "a");
  EXPECT_EQ(h->generations[2].lead_report.value("agent", ""), "s");
  ASSERT_EQ(h->generations[0].live_recoveries.size(), 1u);
  EXPECT_EQ(h->generations[0].live_recoveries[0].value("agent", ""), "s");  // from its key
}

}  // namespace
}  // namespace tenax::launch
