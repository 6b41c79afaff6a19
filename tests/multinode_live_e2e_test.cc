// resilience.mode = "live" across nodes (issue 34, docs/resilience.md "Several nodes"), in the
// multi-node suite's hosts (multinode_fixture.h): a rank killed, a rank hung, and node 1 or node 0
// lost whole while four data-parallel replicas train on two nodes; nothing restarts, and the run
// keeps the unfailed run's trajectory. Needs root for the namespaces (skipped otherwise).
#include "multinode_fixture.h"
#include "tenax/checkpoint/manifest.h"

namespace tenax::testing {
namespace {

class MultiNodeLive : public MultiNode {
 protected:
  // resilience.mode = "live" across two nodes (issue 34): four data-parallel replicas, 2 ranks per
  // node, run by two agents on one etcd with `inject`. Checks that nothing restarted and the
  // trajectory against an unfailed one-node run of the same layout (every step's loss within 1e-6
  // relative, the same data cursor and tokens); returns goodput.json (node 0's, from etcd) and the
  // agents' output.
  // `node0`, when given: the output of the agent that started ranks 0 and 1 alone (node ranks
  // follow the order the agents joined in, not their hosts).
  static nlohmann::json LiveAcrossNodes(const TempDir& dir, const std::string& name,
                                        const std::string& flags, std::string* out,
                                        std::string* node0 = nullptr) {
    auto etcd = Etcd();
    std::vector<std::unique_ptr<Background>> agents;
    agents.push_back(Agent(0, *etcd, name, flags, 3, "", {}, LiveLayout()));
    agents.push_back(Agent(1, *etcd, name, flags, 3, "", {}, LiveLayout()));
    for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << AllOutput(agents);
    *out = AllOutput(agents);
    for (auto& a : agents) {
      if (node0 == nullptr) break;
      const std::string o = a->output();
      if (o.find("started ranks 0..1 of 4") != std::string::npos) *node0 = o;
    }
    return LiveTrajectory(dir, name, *out);
  }
  static std::string LiveLayout(const std::string& more = "") {
    return "--set resilience.mode=live --set parallelism.data_parallel_replicate=4 "
           "--set parallelism.data_parallel_shard=1 " +
           more;
  }
  // Live run `name` against the unfailed one-node run (made the first time); returns its
  // goodput.json.
  static nlohmann::json LiveTrajectory(const TempDir& dir, const std::string& name,
                                       const std::string& out) {
    if (!std::filesystem::exists(dir / "live-clean/metrics.jsonl")) {
      auto clean = RunTenax("launch --nproc-per-node 4 -- " + Train(dir.path(), "live-clean") +
                                " --set parallelism.data_parallel_replicate=4 "
                                "--set parallelism.data_parallel_shard=1",
                            dir.path());
      EXPECT_EQ(clean.exit_code, 0) << clean.output;
    }
    EXPECT_EQ(out.find("generation 0 -> 1"), std::string::npos) << out;  // nobody restarted
    const std::vector<double> want = ReadMetric(dir / "live-clean/metrics.jsonl", "loss");
    const std::vector<double> got = ReadMetric(dir / (name + "/metrics.jsonl"), "loss");
    EXPECT_EQ(want.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(got.size(), want.size()) << out;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i])) << "step " << i + 1;
    }
    char state[96];
    std::snprintf(state, sizeof(state), "/checkpoints/step_%08d/train_state.json", kSteps);
    const auto a = nlohmann::json::parse(ReadFile(dir / ("live-clean" + std::string(state))));
    const auto b = nlohmann::json::parse(ReadFile(dir / (name + std::string(state))));
    EXPECT_EQ(b["data"]["position"], a["data"]["position"]);  // no sample lost or trained twice
    EXPECT_EQ(b["tokens_seen"], a["tokens_seen"]);
    return nlohmann::json::parse(ReadFile(dir / (name + "/goodput.json")));
  }

  // goodput.json's one live recovery: `rank` on node 1 failed after `step` (`kind`), the others
  // trained on in epoch 1 and its replacement healed from a live rank, joining in epoch 2.
  static void ExpectHealedOnNode1(const nlohmann::json& report, int rank, int step,
                                  const std::string& kind) {
    EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
    EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
    ASSERT_EQ(report["live_recoveries"].size(), 1u) << report.dump(2);
    const auto& l = report["live_recoveries"][0];
    EXPECT_EQ(l["rank"], rank);
    EXPECT_EQ(l["node"], 1);
    EXPECT_EQ(l["kind"], kind);
    EXPECT_EQ(l["step"], step) << "the last step it finished";
    EXPECT_EQ(l["epoch"], 1);
    nlohmann::json members = nlohmann::json::array();
    for (int r = 0; r < 4; ++r) {
      if (r != rank) members.push_back(r);
    }
    EXPECT_EQ(l["members"], members);
    EXPECT_EQ(l["joined_epoch"], 2);
    EXPECT_GT(l["healed_bytes"].get<int64_t>(), 100000);  // weights and Adam moments
    EXPECT_NE(l["healed_from"], rank);
    EXPECT_GE(l["steps_short_handed"].get<int64_t>(), 1);
    EXPECT_GT(l["healed_at_s"].get<double>(), l["time_s"].get<double>());
    EXPECT_GE(l["time_s"].get<double>(), 0.0);  // on the job's clock
    std::printf(
        "live recovery across nodes (%s): healed %.2f s after the failure, %d step(s) short\n",
        kind.c_str(), l["healed_at_s"].get<double>() - l["time_s"].get<double>(),
        l["steps_short_handed"].get<int>());
  }

  // How LoseNode loses a node: killed whole (agent and ranks, SIGKILL), cut off (its link down
  // while its processes run on) or stopped whole (SIGSTOP).
  enum class Loss { kKilled, kCutOff, kStopped };

  // Runs `job` live on two active nodes (and a spare with `spare`), loses node `node` (0 or 1)
  // with its agent once 8 steps are logged, and checks that every other agent ends done, nobody
  // restarted, the unfailed run's trajectory, and that the other node's two ranks trained on in
  // epoch 1. A node cut off must stop its own ranks within the lease time and a little (fencing:
  // nothing they do after the cut may count); once the others are done its link is restored, or
  // a stopped node continued, and its agent must find its place taken and end without touching
  // the run. Returns goodput.json and the agents' output, and in `writer` whose agent wrote
  // goodput.json (generation 0's plan's "node N's agent", or "the spare"). A save every 20 steps
  // keeps the loss away from a checkpoint's collectives.
  static nlohmann::json LoseNode(int node, const std::string& job, const std::string& flags,
                                 bool spare, std::string* out, std::string* writer = nullptr,
                                 Loss how = Loss::kKilled) {
    auto etcd = Etcd();
    const std::string layout = LiveLayout("--set checkpoint.interval=20");
    std::vector<std::unique_ptr<Background>> agents(spare ? 3 : 2);
    agents[0] = Agent(0, *etcd, job, flags, 3, "", {}, layout);
    agents[1] = Agent(1, *etcd, job, flags, 3, "", {}, layout);
    const launch::rdzv::Plan plan = WaitPlan(*etcd, job, 0);
    if (spare) agents[2] = Agent(2, *etcd, job, flags, 3, "", {}, layout);
    const int victim = HostOf(agents, plan.nodes[static_cast<size_t>(node)]);
    EXPECT_GE(victim, 0) << AllOutput(agents);
    EXPECT_TRUE(WaitFor(
        [&] { return ReadMetric(*dir_ / (job + "/metrics.jsonl"), "loss").size() >= 8; }, 180))
        << AllOutput(agents);
    if (victim < 0) return nlohmann::json::object();
    Background& lost = *agents[static_cast<size_t>(victim)];
    const std::vector<pid_t> ranks = Descendants(lost.pid());
    switch (how) {
      case Loss::kKilled:
        SignalNode(lost, SIGKILL);
        break;
      case Loss::kCutOff:
        EXPECT_TRUE(net_->Cut(victim).ok());
        // Its ranks are gone within the lease time (3 s) and a little.
        EXPECT_TRUE(AllEnd(ranks, 10)) << lost.output();
        break;
      case Loss::kStopped:
        SignalNode(lost, SIGSTOP);
        break;
    }
    for (size_t i = 0; i < agents.size(); ++i) {
      if (static_cast<int>(i) == victim) continue;
      EXPECT_EQ(agents[i]->Wait(300), 0) << "host " << i << "\n" << AllOutput(agents);
    }
    if (how == Loss::kCutOff) EXPECT_TRUE(net_->Restore(victim).ok());
    if (how == Loss::kStopped) SignalNode(lost, SIGCONT);
    // Back, it learns it lost its lease, and finds its place taken or the job over.
    EXPECT_EQ(lost.Wait(120), how == Loss::kKilled ? 128 + SIGKILL : 0) << AllOutput(agents);
    if (how != Loss::kKilled) {
      EXPECT_NE(lost.output().find("lost the etcd lease"), std::string::npos) << lost.output();
    }
    *out = AllOutput(agents);
    // Whether a rank failed in a step the others had finished (the two cases differ).
    std::printf("a survivor behind the others at the loss: %s\n",
                out->find("the others had finished it") != std::string::npos ? "yes" : "no");
    EXPECT_NE(out->find(node == 0 ? "live recovery: rank(s) 2,3 train on in epoch 1"
                                  : "live recovery: rank(s) 0,1 train on in epoch 1"),
              std::string::npos)
        << *out;
    const nlohmann::json report = LiveTrajectory(*dir_, job, *out);
    EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
    EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
    if (writer != nullptr && !report["segments"].empty()) {
      *writer = "nobody we know";
      for (size_t i = 0; i < agents.size(); ++i) {
        if (report["segments"].back()["pid"] != agents[i]->pid()) continue;
        *writer = i == 2                                                 ? "the spare"
                  : HostOf(agents, plan.nodes[0]) == static_cast<int>(i) ? "node 0's agent"
                                                                         : "node 1's agent";
      }
    }
    return report;
  }
  // Node `node` lost and a spare in its place: goodput.json has one live recovery per lost rank,
  // of kind `kind` (node-lost; partition once the node came back and said it had been cut off),
  // on that node, healed from the other node's ranks, which trained on in epoch 1 until the
  // replacements joined in epoch 2.
  static void ExpectTheSpareTookItsPlace(const nlohmann::json& report, int node,
                                         const std::string& out,
                                         const std::string& kind = "node-lost") {
    EXPECT_NE(out.find("this spare takes the place of node " + std::to_string(node)),
              std::string::npos)
        << out;
    const std::map<int, nlohmann::json> by_rank = [&] {
      std::map<int, nlohmann::json> m;
      for (const auto& l : report["live_recoveries"]) m[l["rank"].get<int>()] = l;
      return m;
    }();
    ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
    const int other = 1 - node;
    double back_s = 0;
    // Each rank is a replica of its own (DDP): the two join together in epoch 2, or one in epoch 2
    // and the other, ready after that epoch was announced, in epoch 3.
    std::set<int> joined;
    for (int rank : {2 * node, 2 * node + 1}) {
      ASSERT_EQ(by_rank.count(rank), 1u) << report.dump(2);
      const nlohmann::json& l = by_rank.at(rank);
      EXPECT_EQ(l["kind"], kind);
      EXPECT_EQ(l["node"], node);
      EXPECT_EQ(l["epoch"], 1);
      EXPECT_EQ(l["members"], nlohmann::json({2 * other, 2 * other + 1}));
      joined.insert(l["joined_epoch"].get<int>());
      EXPECT_GT(l["healed_bytes"].get<int64_t>(), 100000);  // weights and Adam moments
      // From a rank that trained on, or, joining in epoch 3, also from the other replacement,
      // which joined in epoch 2 and is a member like them.
      const int partner = rank == 2 * node ? rank + 1 : rank - 1;
      const bool from_partner = l["joined_epoch"] == 3 && l["healed_from"] == partner &&
                                by_rank.count(partner) == 1 &&
                                by_rank.at(partner)["joined_epoch"] == 2;
      EXPECT_TRUE(l["healed_from"] == 2 * other || l["healed_from"] == 2 * other + 1 ||
                  from_partner)
          << report.dump(2);
      EXPECT_GE(l["steps_short_handed"].get<int64_t>(), 1);
      EXPECT_GT(l["healed_at_s"].get<double>(), l["time_s"].get<double>());
      EXPECT_GE(l["time_s"].get<double>(), 0.0);  // on the job's clock
      back_s = std::max(back_s, l["healed_at_s"].get<double>() - l["time_s"].get<double>());
    }
    EXPECT_TRUE(joined == std::set<int>({2}) || joined == std::set<int>({2, 3})) << report.dump(2);
    std::printf(
        "lost node %d: full quorum again %.2f s after the others saw the loss (plus up to the %d "
        "s lease), %d step(s) short-handed\n",
        node, back_s, 3, by_rank.at(2 * node)["steps_short_handed"].get<int>());
  }
};

// Rank 3 (on node 1) is killed at step 6. Nothing restarts: node 1's agent drops it from the
// job's membership in etcd, the other three ranks (on both nodes) train on with its samples, and
// node 1 starts a replacement that heals from a live rank over the epoch's group, which meets in
// etcd.
TEST_F(MultiNodeLive, LiveRecoveryAcrossNodesTrainsThroughAKilledRank) {
  std::string out;
  // await-join holds rank 0 at step 10 until the replacement is in: the run is short.
  const nlohmann::json report = LiveAcrossNodes(
      *dir_, "live", "--inject crash:rank=3:step=6,await-join:rank=0:step=10", &out);
  EXPECT_NE(out.find("live recovery: rank(s) 0,1,2 train on in epoch 1"), std::string::npos) << out;
  ExpectHealedOnNode1(report, 3, 5, "crash");
}

// Rank 0, the rank that commits, is killed in step 8's save once its node agent recorded the
// commit in etcd (the fence) and before its folder has the manifest and COMMITTED: etcd names a
// commit no folder holds. The other three save step 8 again in the next epoch, their lead's fence
// records that second manifest over the first, and its folder commits it: etcd's record and the
// folder agree, and the run keeps the unfailed trajectory.
TEST_F(MultiNodeLive, LiveRecoveryFromARankLostBetweenTheFenceAndItsFolderSavesAgain) {
  const std::string job = "live-fenced";
  std::string out;
  nlohmann::json record;
  {
    auto etcd = Etcd();
    const std::string flags =
        "--inject kill-in-ckpt:rank=0:step=8:at=fenced,await-join:rank=1:step=12";
    std::vector<std::unique_ptr<Background>> agents;
    // Every checkpoint kept: step 8's folder is checked after the run.
    const std::string layout = LiveLayout("--set checkpoint.keep_latest=0");
    agents.push_back(Agent(0, *etcd, job, flags, 3, "", {}, layout));
    agents.push_back(Agent(1, *etcd, job, flags, 3, "", {}, layout));
    for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << AllOutput(agents);
    out = AllOutput(agents);
    auto client = etcd::EtcdClient::Create(etcd->client_options());
    ASSERT_TRUE(client.ok()) << client.status().message();
    auto kv = (*client)->Get(launch::rdzv::Keys(job).commit(8));
    ASSERT_TRUE(kv.ok() && *kv) << "no commit record of step 8 in etcd";
    record = nlohmann::json::parse((**kv).value);
  }
  EXPECT_NE(out.find("SIGKILL once etcd recorded the commit of checkpoint step 8, before its "
                     "folder did"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("step 8: evaluated and saved again after the member lost in them"),
            std::string::npos)
      << out;
  const nlohmann::json report = LiveTrajectory(*dir_, job, out);
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  ASSERT_EQ(report["live_recoveries"].size(), 1u) << report.dump(2);
  const auto& l = report["live_recoveries"][0];
  EXPECT_EQ(l["rank"], 0);
  EXPECT_EQ(l["node"], 0);
  EXPECT_EQ(l["kind"], "crash-in-checkpoint");
  EXPECT_EQ(l["members"], nlohmann::json({1, 2, 3}));
  EXPECT_GE(l["healed_at_s"].get<double>(), 0.0) << "its replacement healed";
  // The second save's commit: in etcd (the last record written for step 8) and in the folder,
  // the same manifest, every file of it there with its size.
  const std::filesystem::path step8 = *dir_ / (job + "/checkpoints/step_00000008");
  EXPECT_TRUE(std::filesystem::exists(step8 / "COMMITTED"));
  auto folder = ckpt::Manifest::Parse(ReadFile(step8 / "manifest.json"), "step 8's manifest.json");
  ASSERT_TRUE(folder.ok()) << folder.status().message();
  auto fenced = ckpt::Manifest::Parse(record["manifest"].dump(), "etcd's commit record of step 8");
  ASSERT_TRUE(fenced.ok()) << fenced.status().message();
  EXPECT_EQ(record["manifest"], folder->ToJson()) << record.dump(2);
  EXPECT_EQ(record["generation"], 0) << "nobody restarted";
  ASSERT_FALSE(folder->files.empty());
  for (const auto& [name, e] : folder->files) {
    std::error_code ec;
    EXPECT_EQ(std::filesystem::file_size(step8 / name, ec), e.bytes) << name;
  }
}

// Rank 2 (on node 1) hangs before step 6's all-reduce: every rank stops. Node 1's flight records
// name it and node 1 kills it alone; node 0, whose ranks wait for a rank elsewhere, lets that node
// act instead of ending the generation. The rest is the crash's live recovery. Whether node 0's
// own timeout runs out at all depends on the two nodes' timing: beside a testing CI, node 1 once
// killed rank 2 and the next epoch formed before it did, and node 0 never saw a hang. So node 0
// is checked for what it must not do (kill a rank, end the generation: LiveTrajectory checks
// that nobody restarted), and for deferring to node 1 whenever it did see the hang.
TEST_F(MultiNodeLive, LiveRecoveryAcrossNodesKillsAHungRankAlone) {
  std::string out, node0;
  const nlohmann::json report = LiveAcrossNodes(
      *dir_, "live-hang", "--hang-timeout 3 --inject hang:rank=2:step=6,await-join:rank=0:step=12",
      &out, &node0);
  ASSERT_FALSE(node0.empty()) << out;
  EXPECT_NE(out.find("killing rank 2 only"), std::string::npos) << out;
  EXPECT_EQ(node0.find("killing rank"), std::string::npos) << node0;
  if (node0.find("launch: hang: no rank finished a step") != std::string::npos) {
    EXPECT_NE(node0.find("wait for a rank on another node"), std::string::npos) << node0;
  }
  EXPECT_NE(out.find("live recovery: rank(s) 0,1,3 train on in epoch 1"), std::string::npos) << out;
  ExpectHealedOnNode1(report, 2, 5, "hang");
}

// A whole node lost (issue 34's 3-node case): 2 active nodes x 2 ranks and a spare, live DDP 4;
// node 1 is killed (its agent and both ranks, SIGKILL) once 8 steps are logged. Nothing
// restarts: node 0 drops ranks 2 and 3 from the job's record when node 1's lease expires and
// trains on alone, the spare claims node 1's place and starts its ranks as replacements, which
// heal from node 0's ranks and join. The trajectory is the unfailed run's; goodput.json has one
// live recovery per lost rank, of kind node-lost, on node 1. await-join holds rank 0 at step 36
// until they are in.
TEST_F(MultiNodeLive, LiveRecoveryFromALostNodeTheSpareTakesItsPlace) {
  std::string out;
  const nlohmann::json report =
      LoseNode(1, "live-node", "--inject await-join:rank=0:step=36", /*spare=*/true, &out);
  ExpectTheSpareTookItsPlace(report, 1, out);
}

// Node 1's link cut while its processes keep running (a partition, not a crash): its agent
// loses its lease and stops its ranks within the lease time, which its peers cannot tell from
// a loss; node 0 trains on, the spare takes node 1's place and its ranks heal from node 0's.
// Once the job is done the link comes back: the cut-off agent finds its place taken and ends
// without touching the run (the trajectory and checkpoints are the unfailed run's).
TEST_F(MultiNodeLive, LiveRecoveryFromACutOffNodeTheSpareTakesItsPlace) {
  std::string out;
  const nlohmann::json report = LoseNode(1, "live-cut", "--inject await-join:rank=0:step=36",
                                         /*spare=*/true, &out, nullptr, Loss::kCutOff);
  ExpectTheSpareTookItsPlace(report, 1, out, "partition");
}

// Node 1 stopped whole (agent and ranks, SIGSTOP: a node that hangs): the same as cut off, and
// when it is continued after the job ended, neither it nor its ranks change anything.
TEST_F(MultiNodeLive, LiveRecoveryFromAStoppedNodeTheSpareTakesItsPlace) {
  std::string out;
  const nlohmann::json report = LoseNode(1, "live-stop", "--inject await-join:rank=0:step=36",
                                         /*spare=*/true, &out, nullptr, Loss::kStopped);
  ExpectTheSpareTookItsPlace(report, 1, out, "partition");
}

// Node rank 1 lost twice (2 active nodes and 2 spares, live DDP 4): node 1 killed once 8 steps
// are logged; the spare that took its place killed in its turn once its ranks healed. Node 0 trains
// on both times, the node rank is vacant again (one turn later) and the other spare takes it:
// nothing restarts, and the trajectory is the unfailed run's. goodput.json has two node-lost
// recoveries per rank of node 1, each healed. await-join holds rank 0 at steps 24 and 38 until
// the replacements are in.
TEST_F(MultiNodeLive, LiveRecoveryFromLosingANodeRankTwiceTheOtherSpareTakesItsPlace) {
  auto etcd = Etcd();
  const std::string job = "live-twice";
  const std::string flags = "--inject await-join:rank=0:step=24,await-join:rank=0:step=38";
  const std::string layout = LiveLayout("--set checkpoint.interval=20");
  std::vector<std::unique_ptr<Background>> agents(4);
  agents[0] = Agent(0, *etcd, job, flags, 3, "", {}, layout);
  agents[1] = Agent(1, *etcd, job, flags, 3, "", {}, layout);
  const launch::rdzv::Plan plan = WaitPlan(*etcd, job, 0);
  agents[2] = Agent(2, *etcd, job, flags, 3, "", {}, layout);
  agents[3] = Agent(3, *etcd, job, flags, 3, "", {}, layout);
  const int first = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(first, 0) << AllOutput(agents);
  ASSERT_TRUE(WaitFor(
      [&] { return ReadMetric(*dir_ / (job + "/metrics.jsonl"), "loss").size() >= 8; }, 180))
      << AllOutput(agents);
  SignalNode(*agents[static_cast<size_t>(first)], SIGKILL);
  // The spare that took node 1's place, once it published both of its ranks' recoveries as
  // healed (goodput.json's records of a node come from its agent while it lives).
  auto client = etcd::EtcdClient::Create(etcd->client_options());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const launch::rdzv::Keys keys(job);
  auto healed_on_node1 = [&] {
    int n = 0;
    auto r = (*client)->GetPrefix(keys.live_recoveries(0));
    for (const auto& kv : r.ok() ? r->kvs : std::vector<etcd::KeyValue>{}) {
      const auto records = nlohmann::json::parse(kv.value, nullptr, false);
      if (!records.is_array()) continue;
      for (const auto& x : records) n += x.value("node", -1) == 1 && x.contains("healed_at_unix");
    }
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return healed_on_node1() >= 2; }, 180)) << AllOutput(agents);
  int second = -1;
  for (int i : {2, 3}) {
    if (agents[static_cast<size_t>(i)]->output().find("this spare takes the place of node 1") !=
        std::string::npos) {
      second = i;
    }
  }
  ASSERT_GE(second, 0) << AllOutput(agents);
  SignalNode(*agents[static_cast<size_t>(second)], SIGKILL);
  const int third = 5 - second;  // the other spare
  for (size_t i = 0; i < agents.size(); ++i) {
    const bool killed = static_cast<int>(i) == first || static_cast<int>(i) == second;
    EXPECT_EQ(agents[i]->Wait(300), killed ? 128 + SIGKILL : 0) << "host " << i << "\n"
                                                                << AllOutput(agents);
  }
  const std::string out = AllOutput(agents);
  const std::string took = agents[static_cast<size_t>(third)]->output();
  EXPECT_NE(took.find("this spare takes the place of node 1 ("), std::string::npos) << out;
  EXPECT_NE(took.find("lost again (2 times in this generation)"), std::string::npos) << out;
  const nlohmann::json report = LiveTrajectory(*dir_, job, out);
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  ASSERT_EQ(report["live_recoveries"].size(), 4u) << report.dump(2);
  std::map<int, std::vector<nlohmann::json>> by_rank;
  for (const auto& l : report["live_recoveries"]) by_rank[l["rank"].get<int>()].push_back(l);
  for (int rank : {2, 3}) {
    ASSERT_EQ(by_rank[rank].size(), 2u) << report.dump(2);
    std::sort(by_rank[rank].begin(), by_rank[rank].end(),
              [](const nlohmann::json& a, const nlohmann::json& b) {
                return a["time_s"].get<double>() < b["time_s"].get<double>();
              });
    for (const nlohmann::json& l : by_rank[rank]) {
      EXPECT_EQ(l["kind"], "node-lost");
      EXPECT_EQ(l["node"], 1);
      EXPECT_EQ(l["members"], nlohmann::json({0, 1}));
      EXPECT_GT(l["healed_bytes"].get<int64_t>(), 100000);  // weights and Adam moments
      EXPECT_GT(l["healed_at_s"].get<double>(), l["time_s"].get<double>());
    }
    // Lost again after it had healed: the second loss comes after the first healing.
    EXPECT_GT(by_rank[rank][1]["time_s"].get<double>(),
              by_rank[rank][0]["healed_at_s"].get<double>());
    EXPECT_GT(by_rank[rank][1]["joined_epoch"].get<int>(),
              by_rank[rank][0]["joined_epoch"].get<int>());
  }
}

// Node 0 lost the same way: ranks 2 and 3 train on (rank 2, the live group's lowest member now,
// writes the metrics and commits with node 1's consent), the spare takes node rank 0 and, holding
// it at the end, writes goodput.json.
TEST_F(MultiNodeLive, LiveRecoveryFromLosingNode0TheSpareTakesItsPlace) {
  std::string out;
  std::string writer;
  const nlohmann::json report = LoseNode(0, "live-node0", "--inject await-join:rank=2:step=36",
                                         /*spare=*/true, &out, &writer);
  ExpectTheSpareTookItsPlace(report, 0, out);
  EXPECT_EQ(writer, "the spare") << "holding node rank 0 at the end\n" << report.dump(2);
}

// The same loss with no spare: node 0 trains the rest of the run alone (its two ranks run all
// four replicas' samples), and the job is done when node 0 is, node rank 1 vacant with nobody to
// take it. goodput.json records both lost ranks, never healed, short-handed to the end.
TEST_F(MultiNodeLive, LiveRecoveryFromALostNodeWithNoSpareTrainsToTheEndShortHanded) {
  std::string out;
  const nlohmann::json report = LoseNode(1, "live-alone", "", /*spare=*/false, &out);
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  for (const auto& l : report["live_recoveries"]) {
    EXPECT_EQ(l["kind"], "node-lost");
    EXPECT_EQ(l["node"], 1);
    EXPECT_DOUBLE_EQ(l["healed_at_s"].get<double>(), -1.0);
    EXPECT_EQ(l["steps_short_handed"].get<int64_t>(), kSteps - l["step"].get<int64_t>());
  }
}

// Node 0 lost with no spare: node 1 trains the rest of the run alone, and, the lowest node rank
// left, writes goodput.json with the lost ranks 0 and 1, never healed.
TEST_F(MultiNodeLive, LiveRecoveryFromLosingNode0WithNoSpareNode1TrainsToTheEnd) {
  std::string out;
  std::string writer;
  const nlohmann::json report = LoseNode(0, "live-alone0", "", /*spare=*/false, &out, &writer);
  EXPECT_EQ(writer, "node 1's agent") << report.dump(2);
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  for (const auto& l : report["live_recoveries"]) {
    EXPECT_EQ(l["kind"], "node-lost");
    EXPECT_EQ(l["node"], 0);
    EXPECT_DOUBLE_EQ(l["healed_at_s"].get<double>(), -1.0);
    EXPECT_EQ(l["steps_short_handed"].get<int64_t>(), kSteps - l["step"].get<int64_t>());
  }
}

}  // namespace
}  // namespace tenax::testing
