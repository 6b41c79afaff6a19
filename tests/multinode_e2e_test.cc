// Many nodes, each a host in its own network namespace (tests/netns_util.h) with a veth link to
// one bridge, an etcd the test starts on the bridge, and a node agent per host
// (`tenax launch --nnodes 2 --rdzv etcd://...`): two active nodes of 2 ranks and one spare node.
// A whole node is killed (agent and ranks, SIGKILL), stopped (SIGSTOP), or cut off (its link
// down while its processes run); each time the spare takes the lost node's place and the run ends
// with the final weights of an uninterrupted run, bit for bit, and goodput.json names the node.
// Also: a 3-member etcd losing a member mid-run does not disturb the job; with no spare left the
// job waits for a node and stops after --rdzv-timeout with a report. The checkpoint folder is
// shared by the hosts here (the test's temp folder); private folders are tested below it.
// Needs root for the namespaces (skipped otherwise, with the reason).
#include "multinode_fixture.h"

namespace tenax::testing {
namespace {

// Silent data corruption on a node, without shared storage: rank 2 (node 1's first) computes
// wrong gradients from step 10 on, and resilience.sdc_check_interval = 5 checks every 5 steps
// (and every checkpoint step). The check at step 10 names rank 2; one proven fault is enough:
// the planner of generation 1 quarantines node 1 at once, drains it in the scheduler with the
// reason (a stand-in scontrol records the call; tests/slurm_e2e_test.cc drains in a real Slurm),
// and the spare takes node rank 1. The job ends with the reference's weights (the checks change
// nothing, every commit was checked first), and node 0's goodput.json holds the detection,
// which only node 1's folder recorded.
TEST_F(MultiNode, ACorruptingNodeIsQuarantinedAtOnceAndDrained) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  const std::string job = "corrupt";
  auto folder = [&](int host) { return HostFolder(job, host); };
  const std::string bin = *dir_ / "corrupt-bin";
  const std::string calls = *dir_ / "corrupt-scontrol-calls";
  std::filesystem::create_directories(bin);
  WriteFile(bin + "/scontrol", "#!/bin/sh\necho \"$*\" >> " + calls + "\n");
  std::filesystem::permissions(bin + "/scontrol", std::filesystem::perms::owner_all);
  const char* path = std::getenv("PATH");
  auto start = [&](int host) {
    return Agent(host, *etcd, job, "--drain-bad-nodes --inject sdc:rank=2:step=10:where=grad", 3,
                 folder(host),
                 {"SLURMD_NODENAME=node" + std::to_string(host),
                  "PATH=" + bin + ":" + (path ? path : "/usr/bin:/bin")},
                 "--set resilience.sdc_check_interval=5");
  };
  std::vector<std::unique_ptr<Background>> agents(3);
  agents[0] = start(0);
  agents[1] = start(1);
  const launch::rdzv::Plan plan = WaitPlan(*etcd, job, 0);
  agents[2] = start(2);  // the spare
  const int node0 = HostOf(agents, plan.nodes[0]);
  const int culprit = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(node0, 0) << AllOutput(agents);
  ASSERT_GE(culprit, 0) << AllOutput(agents);
  const int spare = 3 - node0 - culprit;
  for (size_t i = 0; i < agents.size(); ++i) {
    EXPECT_EQ(agents[i]->Wait(300), 0) << "host " << i << "\n" << AllOutput(agents);
  }
  const launch::rdzv::Plan second = WaitPlan(*etcd, job, 1);
  EXPECT_EQ(HostOf(agents, second.nodes[1]), spare) << AllOutput(agents);
  EXPECT_EQ(second.NodeRankOf(plan.nodes[1]), -1) << "the culprit waits as a spare";
  ExpectReferenceWeights(job, folder(node0), folder(spare), dir_->path(), reference, agents);

  const auto report =
      nlohmann::json::parse(ReadFile(folder(node0) + "/" + job + "/goodput.json"), nullptr, false);
  ASSERT_TRUE(report.is_object()) << AllOutput(agents);
  ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "silent-corruption") << report.dump(2);
  EXPECT_EQ(report["failures"][0]["rank"], 2) << report.dump(2);
  ASSERT_EQ(report["sdc"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["sdc"][0]["rank"], 2) << report.dump(2);
  EXPECT_EQ(report["sdc"][0]["step"], 10) << report.dump(2);
  EXPECT_EQ(report["sdc"][0]["generation"], 0) << report.dump(2);
  EXPECT_FALSE(std::filesystem::exists(folder(node0) + "/" + job + "/sdc.json"))
      << "node 0's own folder never held the record: it came through etcd";
  ASSERT_EQ(report["quarantined_nodes"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["quarantined_nodes"][0]["agent"], plan.nodes[1]);
  EXPECT_EQ(report["quarantined_nodes"][0]["failed_generations"], nlohmann::json({0}));
  const std::string reason = report["quarantined_nodes"][0]["reason"];
  EXPECT_NE(reason.find("rank 2 computed wrong results in generation 0 (silent data corruption"),
            std::string::npos)
      << reason;
  // Drained once (by whichever agent planned generation 1), with tenax's reason.
  const std::string drains = ReadFile(calls);
  EXPECT_EQ(drains.rfind("update NodeName=node" + std::to_string(culprit) +
                             " State=DRAIN Reason=tenax: job corrupt: quarantined: its rank 2 "
                             "computed wrong results in generation 0",
                         0),
            0u)
      << drains;
  EXPECT_EQ(std::count(drains.begin(), drains.end(), '\n'), 1) << drains;
}

// Kill -9 a whole node (its agent and its ranks at once): the spare takes its node rank. The
// agents are started as a new user would, without --max-restarts: the restart budget keeps the
// job alive by default.
TEST_F(MultiNode, AKilledNodeIsReplacedByTheSpare) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  launch::rdzv::Plan plan;
  auto agents = StartJob(*etcd, "killed", kHeldAtStep12, &plan);
  const int victim = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(victim, 0) << AllOutput(agents);
  ASSERT_TRUE(WaitHeld(agents, 12)) << AllOutput(agents);
  ASSERT_TRUE(WaitCommitted("killed", 8)) << AllOutput(agents);
  SignalNode(*agents[victim], SIGKILL);
  for (size_t i = 0; i < agents.size(); ++i) {
    EXPECT_EQ(agents[i]->Wait(300), static_cast<int>(i) == victim ? 128 + SIGKILL : 0)
        << "host " << i << "\n"
        << AllOutput(agents);
  }
  ExpectSameWeights("killed", reference);
  const nlohmann::json report = Goodput("killed");
  ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "node-lost") << report.dump(2);
  EXPECT_EQ(report["failures"][0]["node"], 1) << report.dump(2);
  std::printf("killed node: detection %.2f s, recovery %.2f s\n",
              report["failures"][0]["detection_s"].get<double>(),
              report["failures"][0]["recovery_s"].get<double>());
}

// A node whose ranks keep failing: rank 2 (node 1's first) crashes in generation 0 and again in
// generation 1, after node 1's agent kept its node rank. With --quarantine-after 2 (the default)
// the planner of generation 2 quarantines that node: the spare takes node rank 1, the culprit
// waits as a spare of last resort, and the job ends with the reference's weights.
TEST_F(MultiNode, ANodeThatKeepsFailingIsQuarantined) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  launch::rdzv::Plan plan;
  auto agents =
      StartJob(*etcd, "repeat", " --inject crash:rank=2:step=10,crash:rank=2:step=22:gen=1", &plan);
  const int culprit = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(culprit, 0) << AllOutput(agents);
  for (size_t i = 0; i < agents.size(); ++i) {
    EXPECT_EQ(agents[i]->Wait(300), 0) << "host " << i << "\n" << AllOutput(agents);
  }
  ExpectSameWeights("repeat", reference);
  const launch::rdzv::Plan second = WaitPlan(*etcd, "repeat", 1);
  EXPECT_EQ(second.nodes[1], plan.nodes[1]) << "node 1 kept its holder after the first crash";
  const launch::rdzv::Plan third = WaitPlan(*etcd, "repeat", 2);
  EXPECT_EQ(HostOf(agents, third.nodes[1]), 2) << "the spare took node 1\n" << AllOutput(agents);
  EXPECT_NE(third.NodeRankOf(plan.nodes[1]), 1);
  const nlohmann::json report = Goodput("repeat");
  ASSERT_EQ(report["quarantined_nodes"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["quarantined_nodes"][0]["agent"], plan.nodes[1]);
  EXPECT_EQ(report["quarantined_nodes"][0]["failed_generations"], nlohmann::json({1, 0}));
  EXPECT_NE(AllOutput(agents).find("quarantined: its node was the culprit of 2 failures"),
            std::string::npos);
}

// A whole node computes slowly (both its ranks, so its own launcher sees nothing odd): node 0's
// agent finds it among every rank of the job from the progress the agents publish, and
// --replace-stragglers puts the spare node in its place (the slow node becomes a spare of last
// resort). The slowness is injected in generation 0 only and is large (each slow step takes
// 40x its compute), so generation 0 cannot end before the judge has the steps it needs; the
// threshold is 8x, well above what load on a shared 2-core machine does to a healthy rank.
TEST_F(MultiNode, ASlowNodeIsReplacedByTheSpare) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  launch::rdzv::Plan plan;
  auto agents = StartJob(*etcd, "slow",
                         "--max-restarts 2 --replace-stragglers --straggler-factor 8 --inject "
                         "slow:rank=2:factor=40:gen=0,slow:rank=3:factor=40:gen=0",
                         &plan);
  const int slow = HostOf(agents, plan.nodes[1]);  // ranks 2 and 3 are node 1's
  ASSERT_GE(slow, 0) << AllOutput(agents);
  for (size_t i = 0; i < agents.size(); ++i) {
    EXPECT_EQ(agents[i]->Wait(300), 0) << "host " << i << "\n" << AllOutput(agents);
  }
  ExpectSameWeights("slow", reference);
  const launch::rdzv::Plan next = WaitPlan(*etcd, "slow", 1);
  EXPECT_EQ(next.nodes[0], plan.nodes[0]);
  EXPECT_EQ(HostOf(agents, next.nodes[1]), 2) << "the spare takes node rank 1";
  EXPECT_EQ(next.spares, std::vector<std::string>{plan.nodes[1]});
  const nlohmann::json report = Goodput("slow");
  ASSERT_EQ(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "straggler") << report.dump(2);
  EXPECT_EQ(report["failures"][0]["node"], 1) << report.dump(2);
  const int rank = report["failures"][0]["rank"].get<int>();
  EXPECT_TRUE(rank == 2 || rank == 3) << report.dump(2);
  int found = 0;  // generation 0's (later ones may note noise from this busy machine's load)
  for (const auto& s : report["stragglers"]) {
    if (s["generation"] != 0) continue;
    ++found;
    EXPECT_EQ(s["node"], 1) << report.dump(2);
    EXPECT_GT(s["compute_s"].get<double>(), 8 * s["median_s"].get<double>());
  }
  EXPECT_GE(found, 1) << report.dump(2);
  EXPECT_NE(AllOutput(agents).find("generation 0 failed: rank " + std::to_string(rank) +
                                   " on node 1 (straggler"),
            std::string::npos)
      << AllOutput(agents);
}

// A rank of node 1 hangs: every rank of the job stops progressing, so both nodes see a hang; the
// node whose rank hangs names it from its flight records, and the job restarts and ends with the
// uninterrupted run's weights.
TEST_F(MultiNode, AHungRankOnAnotherNodeIsNamed) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  std::vector<std::unique_ptr<Background>> agents;
  const std::string flags = "--max-restarts 2 --hang-timeout 3 --inject hang:rank=2:step=10:gen=0";
  agents.push_back(Agent(0, *etcd, "hung", flags));
  agents.push_back(Agent(1, *etcd, "hung", flags));
  for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << AllOutput(agents);
  ExpectSameWeights("hung", reference);
  const nlohmann::json report = Goodput("hung");
  ASSERT_EQ(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "hang") << report.dump(2) << AllOutput(agents);
  EXPECT_EQ(report["failures"][0]["rank"], 2) << report.dump(2) << AllOutput(agents);
  EXPECT_EQ(report["failures"][0]["node"], 1) << report.dump(2);
}

// A rank stuck in its teardown after it finished (the injected exit-hang) is killed by its own
// node after --exit-timeout; the job still ends done on every node, without a restart, and node
// 0's goodput.json names the rank and its node (from etcd's gen/0/exit/2). The timeout is what
// the healthy ranks need to leave on a loaded machine, not a second: at 1 s, four copies of this
// test at once failed two, with healthy ranks 0 and 3 killed mid-teardown.
TEST_F(MultiNode, ARankStuckInItsTeardownOnAnotherNodeEndsTheJobDone) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  std::vector<std::unique_ptr<Background>> agents;
  const std::string flags = "--max-restarts 2 --exit-timeout " + std::to_string(kTeardownTimeoutS) +
                            " --inject exit-hang:rank=2";
  agents.push_back(Agent(0, *etcd, "teardown", flags));
  agents.push_back(Agent(1, *etcd, "teardown", flags));
  for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << AllOutput(agents);
  EXPECT_NE(AllOutput(agents).find("launch: rank(s) 2 finished training"), std::string::npos)
      << AllOutput(agents);
  ExpectSameWeights("teardown", reference);
  const nlohmann::json report = Goodput("teardown");
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_EQ(report["restarts"], 0) << report.dump(2);
  ASSERT_EQ(report["exit_faults"].size(), 1u) << report.dump(2) << AllOutput(agents);
  EXPECT_EQ(report["exit_faults"][0]["rank"], 2);
  EXPECT_EQ(report["exit_faults"][0]["node"], 1);
  EXPECT_EQ(report["exit_faults"][0]["kind"], "hang");
}

// SIGSTOP a whole node: alive but silent; its lease expires, it is replaced, and when it is let
// go again it stops its own ranks (fenced) instead of writing anything.
TEST_F(MultiNode, AStoppedNodeIsFencedAndReplaced) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  launch::rdzv::Plan plan;
  auto agents = StartJob(*etcd, "stopped", std::string("--max-restarts 2") + kHeldAtStep12, &plan);
  const int victim = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(victim, 0);
  ASSERT_TRUE(WaitHeld(agents, 12)) << AllOutput(agents);
  ASSERT_TRUE(WaitCommitted("stopped", 8)) << AllOutput(agents);
  SignalNode(*agents[victim], SIGSTOP);
  // The other two finish without it.
  for (size_t i = 0; i < agents.size(); ++i) {
    if (static_cast<int>(i) != victim) {
      EXPECT_EQ(agents[i]->Wait(300), 0) << "host " << i << "\n" << AllOutput(agents);
    }
  }
  ExpectSameWeights("stopped", reference);
  SignalNode(*agents[victim], SIGCONT);
  // Let go, it learns it lost its lease, kills its ranks, and finds the job over.
  EXPECT_EQ(agents[victim]->Wait(120), 0) << AllOutput(agents);
  EXPECT_NE(agents[victim]->output().find("lost the etcd lease"), std::string::npos)
      << agents[victim]->output();
  ExpectSameWeights("stopped", reference);  // nothing it did after waking changed the result
  const nlohmann::json report = Goodput("stopped");
  ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["node"], 1) << report.dump(2);
}

// Node 0's link is cut while its processes keep running (its rank 0 commits checkpoints and
// hosts the rendezvous store): its ranks stop within the lease time (fencing), nothing they do
// after the cut is committed, and the spare takes over node rank 0.
TEST_F(MultiNode, ACutOffNodeStopsItsRanksAndIsReplaced) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  launch::rdzv::Plan plan;
  auto agents = StartJob(*etcd, "cut", std::string("--max-restarts 2") + kHeldAtStep12, &plan);
  const int victim = HostOf(agents, plan.nodes[0]);
  ASSERT_GE(victim, 0);
  ASSERT_TRUE(WaitHeld(agents, 12)) << AllOutput(agents);
  ASSERT_TRUE(WaitCommitted("cut", 8)) << AllOutput(agents);
  const std::vector<pid_t> ranks = Descendants(agents[victim]->pid());
  ASSERT_TRUE(net_->Cut(victim).ok());
  // Its ranks are gone within the lease time (3 s) and a little.
  EXPECT_TRUE(AllEnd(ranks, 10)) << agents[victim]->output();
  for (size_t i = 0; i < agents.size(); ++i) {
    if (static_cast<int>(i) != victim) {
      EXPECT_EQ(agents[i]->Wait(300), 0) << "host " << i << "\n" << AllOutput(agents);
    }
  }
  ExpectSameWeights("cut", reference);
  ASSERT_TRUE(net_->Restore(victim).ok());
  EXPECT_EQ(agents[victim]->Wait(120), 0) << AllOutput(agents);
  const nlohmann::json report = Goodput("cut");
  ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["node"], 0) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "partition") << report.dump(2);
}

// A 3-member etcd loses a member mid-run: the job does not notice.
TEST_F(MultiNode, AnEtcdMemberLostMidRunGoesUnnoticed) {
  const std::string& reference = Reference();
  auto etcd = Etcd(3);
  ASSERT_NE(etcd, nullptr);
  std::vector<std::unique_ptr<Background>> agents;
  // A production-like lease: an election after the leader's loss takes about a second.
  agents.push_back(Agent(0, *etcd, "etcd3", "", 10));
  agents.push_back(Agent(1, *etcd, "etcd3", "", 10));
  ASSERT_TRUE(WaitCommitted("etcd3", 8)) << AllOutput(agents);
  Result<int> leader = etcd->Leader();
  ASSERT_TRUE(leader.ok());
  ASSERT_TRUE(etcd->KillMember(*leader).ok());
  for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << AllOutput(agents);
  ExpectSameWeights("etcd3", reference);
  EXPECT_EQ(Goodput("etcd3")["failures"].size(), 0u) << Goodput("etcd3").dump(2);
}

// No spare left: after a node is lost the job waits for one to join, and stops with a report
// when --rdzv-timeout passes.
TEST_F(MultiNode, WithNoSpareTheJobWaitsThenStopsWithAReport) {
  auto etcd = Etcd();
  std::vector<std::unique_ptr<Background>> agents;
  const std::string flags = std::string("--max-restarts 2 --rdzv-timeout 8") + kHeldAtStep12;
  agents.push_back(Agent(0, *etcd, "nospare", flags));
  agents.push_back(Agent(1, *etcd, "nospare", flags));
  ASSERT_TRUE(WaitHeld(agents, 12)) << AllOutput(agents);
  ASSERT_TRUE(WaitCommitted("nospare", 8)) << AllOutput(agents);
  SignalNode(*agents[1], SIGKILL);
  EXPECT_EQ(agents[0]->Wait(300), 8) << AllOutput(agents);
  EXPECT_NE(agents[0]->output().find("waiting for nodes (1 of 2 alive"), std::string::npos)
      << agents[0]->output();
  EXPECT_NE(agents[0]->output().find("only 1 of 2 nodes after waiting 8s (--rdzv-timeout)"),
            std::string::npos)
      << agents[0]->output();
}

// Each host has its own checkpoint folder (no shared storage). Node 1 is killed and its folder
// deleted with it: the spare that takes its node rank starts with an empty folder and gets node
// 0's files from node 0's folder and node 1's from the copy node 0 kept in RAM.
TEST_F(MultiNode, ALostNodesFilesComeBackFromItsPeersMemory) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  auto folder = [&](int host) { return HostFolder("private", host); };
  launch::rdzv::Plan plan;
  auto agents = StartJob(*etcd, "private", std::string("--max-restarts 3") + kHeldAtStep12, &plan,
                         /*private_folders=*/true);
  const int node0 = HostOf(agents, plan.nodes[0]);
  const int victim = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(node0, 0);
  ASSERT_GE(victim, 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(folder(node0) +
                                       "/private/checkpoints/step_00000008/COMMITTED");
      },
      180))
      << AllOutput(agents);
  // Node 0 holds node 1's files of a commit in RAM once they were pushed (in the background):
  // the victim says so. Step 8's may still be on their way, and then step 8 is lost and the job
  // resumes from step 4, whose push was finished first (a newer step does not cancel a push in
  // flight) and which node 0's RAM still holds (the replica store keeps the newest two steps).
  ASSERT_TRUE(WaitFor(
      [&] {
        return agents[victim]->output().find("file(s) held by the next node") != std::string::npos;
      },
      180))
      << AllOutput(agents);
  ASSERT_TRUE(WaitHeld(agents, 12)) << AllOutput(agents);
  KillNodeWithItsDisk(*agents[victim], folder(victim));
  EXPECT_EQ(agents[node0]->Wait(300), 0) << AllOutput(agents);
  EXPECT_EQ(agents[2]->Wait(300), 0) << AllOutput(agents);
  // The final weights, from the folders that hold them: node 0's shards on its host, node 1's
  // on the spare's.
  ExpectReferenceWeights("private", folder(node0), folder(2), dir_->path(), reference, agents);
  // Node 1's files came out of RAM: node 0's replica store (into node 0's folder, from which the
  // spare then took them) or straight to the spare from it.
  const std::string all = AllOutput(agents);
  EXPECT_TRUE(all.find("from local replica") != std::string::npos ||
              all.find("(replica)") != std::string::npos)
      << all;
  // The agents that ended removed their RAM folders. The killed one could not: its folder is
  // ownerless (its lock died with it), and the next agent to start on the host removes it; a
  // claim of our own does the same here.
  auto ram_folders_of = [](pid_t pid) {
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string n = e.path().filename().string();
      if (n.rfind("tenax-replicas-private-", 0) == 0 &&
          n.find("-" + std::to_string(pid) + "-") != std::string::npos) {
        found.push_back(n);
      }
    }
    return found;
  };
  EXPECT_EQ(ram_folders_of(agents[node0]->pid()), std::vector<std::string>{});
  EXPECT_EQ(ram_folders_of(agents[2]->pid()), std::vector<std::string>{});
  SweepOwnerlessRamFolders("private");
  // (An agent of another test run on this host may be sweeping it at this moment: wait for it.)
  EXPECT_TRUE(WaitFor([&] { return ram_folders_of(agents[victim]->pid()).empty(); }, 30))
      << "the killed agent's RAM folder is still in /dev/shm";
}

// A node lost before any of its files reached a peer's RAM (an injected fault drops its pushes)
// takes every commit of the job with it: the job drops them, newest first, one generation each;
// the surviving node sets aside its copies, whole but unusable without the lost node's files
// (etcd remembers the dropped commits), and the job starts over from step 0 and ends with the
// weights of an uninterrupted run. Before, the surviving node resumed from its copy and the
// spare from nothing, and the ranks stopped with exit code 4.
TEST_F(MultiNode, ALostNodeWhoseFilesNeverLeftItStartsTheJobOver) {
  const std::string& reference = Reference();
  auto etcd = Etcd();
  auto folder = [&](int host) { return HostFolder("lonely", host); };
  // Node 1 holds ranks 2 and 3; the spare that takes its place drops its pushes too. Generation
  // 0 is held at step 6 (as kHeldAtStep12 does), so step 4 is its only commit when it is killed.
  const std::string flags =
      "--max-restarts 12 --inject push-loss:rank=2:gen=all,hang:rank=2:step=6";
  launch::rdzv::Plan plan;
  auto agents = StartJob(*etcd, "lonely", flags, &plan, /*private_folders=*/true);
  const int node0 = HostOf(agents, plan.nodes[0]);
  const int victim = HostOf(agents, plan.nodes[1]);
  ASSERT_GE(node0, 0);
  ASSERT_GE(victim, 0);
  // The fault fired: the victim's files of step 4, committed, went nowhere.
  ASSERT_TRUE(WaitFor(
      [&] {
        return agents[victim]->output().find(
                   "push-loss:rank=2:gen=all: this node's files of "
                   "step 4 are not pushed") != std::string::npos;
      },
      180))
      << AllOutput(agents);
  ASSERT_TRUE(WaitHeld(agents, 6)) << AllOutput(agents);
  KillNodeWithItsDisk(*agents[victim], folder(victim));
  EXPECT_EQ(agents[node0]->Wait(300), 0) << AllOutput(agents);
  EXPECT_EQ(agents[2]->Wait(300), 0) << AllOutput(agents);
  ExpectReferenceWeights("lonely", folder(node0), folder(2), dir_->path(), reference, agents);
  const std::string all = AllOutput(agents);
  EXPECT_NE(all.find("checkpoint step 4 is lost"), std::string::npos) << all;
  // Node 0's copy of step 4 is kept, out of the way.
  EXPECT_TRUE(std::filesystem::exists(folder(node0) +
                                      "/lonely/checkpoints/step_00000004.unaccepted/COMMITTED"))
      << all;
}

// Who may join: an etcd with client-certificate auth. Agents with the job's CA, certificate and
// key train the job; an agent without a certificate, or with one the cluster does not trust, is
// refused before it learns or writes anything.
TEST_F(MultiNode, OnlyAgentsWithTheCertificateJoin) {
  const std::string& reference = Reference();
  auto etcd = Etcd(1, /*tls=*/true);
  ASSERT_NE(etcd, nullptr);
  const std::string trusted = "--rdzv-ca " + etcd->ca_file() + " --rdzv-cert " +
                              etcd->client_cert_file() + " --rdzv-key " + etcd->client_key_file();
  auto stranger =
      Agent(2, *etcd, "tls",
            "--rdzv-ca " + etcd->ca_file() + " --rdzv-cert " + etcd->untrusted_cert_file() +
                " --rdzv-key " + etcd->untrusted_key_file());
  auto anonymous = Agent(3, *etcd, "tls", "--rdzv-ca " + etcd->ca_file());
  EXPECT_NE(stranger->Wait(60), 0);
  EXPECT_NE(anonymous->Wait(60), 0);
  EXPECT_EQ(stranger->output().find("generation 0"), std::string::npos) << stranger->output();
  EXPECT_EQ(anonymous->output().find("generation 0"), std::string::npos) << anonymous->output();
  std::vector<std::unique_ptr<Background>> agents;
  agents.push_back(Agent(0, *etcd, "tls", trusted));
  agents.push_back(Agent(1, *etcd, "tls", trusted));
  for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << AllOutput(agents);
  ExpectSameWeights("tls", reference);
}

// Not a test: node loss to detection and detection to training again, for NODES nodes of 2 ranks
// (bench/multinode_recovery.sh runs it for 2, 3 and 4 nodes and prints the table).
TEST_F(MultiNode, DISABLED_RecoveryBench) {
  const char* env = std::getenv("TENAX_BENCH_NODES");
  const int nodes = env != nullptr ? std::atoi(env) : 2;
  ASSERT_GE(nodes, 2);
  ASSERT_LE(nodes, 8) << "the bench runs at most 8 nodes (and a spare)";
  auto etcd = Etcd();
  const std::string job = "bench" + std::to_string(nodes);
  const std::string flags = "--max-restarts 2 --nnodes " + std::to_string(nodes);
  std::vector<std::unique_ptr<Background>> agents(static_cast<size_t>(nodes + 1));
  for (int h = 0; h < nodes; ++h) agents[h] = Agent(h, *etcd, job, flags);
  const launch::rdzv::Plan plan = WaitPlan(*etcd, job, 0);
  agents[nodes] = Agent(nodes, *etcd, job, flags);
  const int victim = HostOf(agents, plan.nodes[static_cast<size_t>(nodes - 1)]);
  ASSERT_TRUE(WaitCommitted(job, 8)) << AllOutput(agents);
  SignalNode(*agents[victim], SIGKILL);
  for (size_t i = 0; i < agents.size(); ++i) {
    if (static_cast<int>(i) != victim) EXPECT_EQ(agents[i]->Wait(300), 0) << AllOutput(agents);
  }
  const nlohmann::json report = Goodput(job);
  ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
  std::printf("BENCH nodes=%d ranks=%d detection_s=%.2f recovery_s=%.2f\n", nodes, 2 * nodes,
              report["failures"][0]["detection_s"].get<double>(),
              report["failures"][0]["recovery_s"].get<double>());
}

}  // namespace
}  // namespace tenax::testing
