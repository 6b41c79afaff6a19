// The multi-node suites' fixture (multinode_e2e_test.cc, multinode_live_e2e_test.cc): hosts in
// network namespaces (tests/netns_util.h) with a veth link to one bridge, an etcd the test starts
// on the bridge, and a node agent per host (`tenax launch --rdzv etcd://...`), with the helpers
// the cases share: the job's agents, plans, folders, output and goodput.json, the reference run,
// and whole nodes killed, stopped or cut off. Included by one test file per binary.
// Needs root for the namespaces (the suites skip otherwise, with the reason).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "netns_util.h"
#include "tenax/core/owned_folder.h"
#include "tenax/etcd/client.h"
#include "tenax/etcd/testing_etcd.h"
#include "tenax/launch/rendezvous.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

constexpr int kSteps = 40;
// Holds generation 0 at step 12: rank 2 (node 1's first) hangs before its gradient all-reduce,
// and the default hang timeout (300 s) is far beyond any test's wait. A test that kills, stops
// or cuts off a node after a commit thus acts mid-run however fast the steps are; the generations
// after it run clean.
constexpr char kHeldAtStep12[] = " --inject hang:rank=2:step=12";

inline std::string Train(const std::string& dump, const std::string& name) {
  return MultiNodeTrain(dump, name, kSteps);
}

inline std::string Shard(const std::string& dump, const std::string& run, int shard) {
  return MultiNodeShard(dump, run, kSteps, shard);
}

// Removes the RAM folders in /dev/shm whose agent was killed (their lock died with it), as the
// next agent to start on the host would. Every test ends with it (a node the test killed lost its
// RAM too), so that nothing of a killed agent stays in /dev/shm whatever runs after it.
inline void SweepOwnerlessRamFolders(const std::string& job) {
  auto sweeper =
      OwnedFolder::Claim("/dev/shm", "tenax-replicas-",
                         "tenax-replicas-" + job + "-test-" + std::to_string(::getpid()));
  ASSERT_TRUE(sweeper.ok()) << sweeper.status().message();
}

class MultiNode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!etcd::EtcdClientAvailable()) {
      skip_ = "built without cpp-httplib (no etcd client)";
      return;
    }
    // 4 hosts (2 active nodes, a spare, one more); the recovery bench asks for more.
    int hosts = 4;
    if (const char* bench = std::getenv("TENAX_BENCH_NODES")) {
      hosts = std::max(hosts, std::atoi(bench) + 1);
    }
    auto net = NetnsHosts::Create(hosts);
    if (!net.ok()) {
      skip_ = net.status().message();
      return;
    }
    net_ = std::move(*net).release();
    dir_ = new TempDir();
  }
  static void TearDownTestSuite() {
    delete net_;
    delete dir_;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  void TearDown() override {
    if (skip_.empty())
      SweepOwnerlessRamFolders(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // An etcd on the bridge, reachable from every host.
  static std::unique_ptr<etcd::testing::TestingEtcd> Etcd(int members = 1, bool tls = false) {
    etcd::testing::TestingEtcdOptions o;
    o.members = members;
    o.tls = tls;
    o.host = net_->bridge_address();
    auto etcd = etcd::testing::TestingEtcd::Start(o);
    EXPECT_TRUE(etcd.ok()) << etcd.status().message();
    return etcd.ok() ? std::move(*etcd) : nullptr;
  }

  // The node agent of `host` for job `job`, in the background.
  // `dump`: the host's job.dump_folder (default: the folder every host shares); `env`: more of
  // the agent's environment (NAME=VALUE); `train_flags`: appended to the training command.
  static std::unique_ptr<Background> Agent(int host, const etcd::testing::TestingEtcd& etcd,
                                           const std::string& job, const std::string& flags,
                                           int lease_s = 3, std::string dump = "",
                                           const std::vector<std::string>& env = {},
                                           const std::string& train_flags = "") {
    if (dump.empty()) dump = dir_->path();
    std::vector<std::string> argv = {"ip",   "netns",
                                     "exec", net_->name(host),
                                     "env",  "GLOO_SOCKET_IFNAME=" + net_->interface(host)};
    argv.insert(argv.end(), env.begin(), env.end());
    for (const std::string& w :
         {TenaxBinary(), std::string("launch"), std::string("--nproc-per-node"), std::string("2"),
          std::string("--rdzv"), etcd.url(), std::string("--job-id"), job,
          std::string("--rdzv-lease"), std::to_string(lease_s)}) {
      argv.push_back(w);
    }
    // --nnodes 2 unless the flags say otherwise.
    if (flags.find("--nnodes") == std::string::npos) {
      argv.push_back("--nnodes");
      argv.push_back("2");
    }
    for (const std::string& w : Words(flags + " -- " + Train(dump, job) + " " + train_flags)) {
      argv.push_back(w);
    }
    return std::make_unique<Background>(Background::Program{}, argv, dir_->path(),
                                        *dir_ / (job + "-agent" + std::to_string(host) + ".log"));
  }

  // The plan of generation `g` of `job` once it exists.
  static launch::rdzv::Plan WaitPlan(const etcd::testing::TestingEtcd& etcd, const std::string& job,
                                     int64_t g) {
    auto client = etcd::EtcdClient::Create(etcd.client_options());
    launch::rdzv::Plan plan;
    launch::rdzv::Keys keys(job);
    EXPECT_TRUE(WaitFor(
        [&] {
          auto kv = (*client)->Get(keys.plan(g));
          if (!kv.ok() || !*kv) return false;
          auto p = launch::rdzv::Plan::FromJson((**kv).value);
          if (p.ok()) plan = *p;
          return p.ok();
        },
        120));
    return plan;
  }

  // Which of `agents` runs the agent named `id` (the id starts with host-pid-).
  static int HostOf(const std::vector<std::unique_ptr<Background>>& agents, const std::string& id) {
    for (size_t i = 0; i < agents.size(); ++i) {
      if (agents[i] && id.find("-" + std::to_string(agents[i]->pid()) + "-") != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // Starts two active agents and a spare for `job`; returns them (index = host) and the plan.
  // `private_folders`: each host's job.dump_folder is its own HostFolder (no shared storage).
  static std::vector<std::unique_ptr<Background>> StartJob(const etcd::testing::TestingEtcd& etcd,
                                                           const std::string& job,
                                                           const std::string& flags,
                                                           launch::rdzv::Plan* plan,
                                                           bool private_folders = false) {
    std::vector<std::unique_ptr<Background>> agents(3);
    auto dump = [&](int host) { return private_folders ? HostFolder(job, host) : std::string(); };
    agents[0] = Agent(0, etcd, job, flags, 3, dump(0));
    agents[1] = Agent(1, etcd, job, flags, 3, dump(1));
    *plan = WaitPlan(etcd, job, 0);
    agents[2] = Agent(2, etcd, job, flags, 3, dump(2));  // the spare
    return agents;
  }

  // A host's own job.dump_folder for `job`, for jobs without shared storage.
  static std::string HostFolder(const std::string& job, int host) {
    return *dir_ / (job + "/host" + std::to_string(host));
  }

  // Waits until rank 0 committed `step` of `job`.
  static bool WaitCommitted(const std::string& job, int step) {
    char name[64];
    std::snprintf(name, sizeof(name), "/checkpoints/step_%08d/COMMITTED", step);
    return WaitFor([&] { return std::filesystem::exists(*dir_ / (job + name)); }, 180);
  }

  static void ExpectSameWeights(const std::string& job, const std::string& reference) {
    for (int shard = 0; shard < 4; ++shard) {
      const std::string want = Shard(dir_->path(), reference, shard);
      ASSERT_FALSE(want.empty()) << reference << " shard " << shard;
      EXPECT_TRUE(Shard(dir_->path(), job, shard) == want) << job << " shard " << shard;
    }
  }

  static nlohmann::json Goodput(const std::string& job) {
    const auto j = nlohmann::json::parse(ReadFile(*dir_ / (job + "/goodput.json")), nullptr, false);
    return j.is_discarded() ? nlohmann::json() : j;
  }

  // The reference: two nodes, no failure.
  static const std::string& Reference() {
    static std::string name;
    if (!name.empty()) return name;
    auto etcd = Etcd();
    std::vector<std::unique_ptr<Background>> agents;
    agents.push_back(Agent(0, *etcd, "reference", ""));
    agents.push_back(Agent(1, *etcd, "reference", ""));
    for (auto& a : agents) EXPECT_EQ(a->Wait(300), 0) << a->output();
    name = "reference";
    return name;
  }

  inline static std::string skip_;
  inline static NetnsHosts* net_ = nullptr;
  inline static TempDir* dir_ = nullptr;
};

inline std::string AllOutput(const std::vector<std::unique_ptr<Background>>& agents) {
  std::string out;
  for (size_t i = 0; i < agents.size(); ++i) {
    if (agents[i]) out += "--- agent on host " + std::to_string(i) + "\n" + agents[i]->output();
  }
  return out;
}

// Waits until generation 0 is held at `step` (the injected hang fired; see kHeldAtStep12).
inline bool WaitHeld(const std::vector<std::unique_ptr<Background>>& agents, int step) {
  const std::string fired = "injected fault: hang at step " + std::to_string(step) + " ";
  return WaitFor([&] { return AllOutput(agents).find(fired) != std::string::npos; }, 180);
}

// Whether every process of `pids` ends within `timeout_s` (a fenced node's ranks).
inline bool AllEnd(const std::vector<pid_t>& pids, double timeout_s) {
  return WaitFor(
      [&] {
        for (pid_t p : pids) {
          if (Alive(p)) return false;
        }
        return true;
      },
      timeout_s);
}

// Sends `sig` to a whole node at once: its agent and every process under it (its ranks).
inline void SignalNode(const Background& agent, int sig) {
  std::vector<pid_t> node = Descendants(agent.pid());
  node.push_back(agent.pid());
  for (pid_t p : node) ::kill(p, sig);
}

// Kills a whole node at once (as a power loss would) and deletes its checkpoint folder: its disk
// is gone with it.
inline void KillNodeWithItsDisk(Background& agent, const std::string& folder) {
  SignalNode(agent, SIGKILL);
  EXPECT_EQ(agent.Wait(60), 128 + SIGKILL);
  std::filesystem::remove_all(folder);
}

// The final weights of `job` equal those of the `reference` run (in `reference_dir`): node 0's
// shards from `node0_dir`, node 1's from `node1_dir` (folders of nodes without shared storage).
inline void ExpectReferenceWeights(const std::string& job, const std::string& node0_dir,
                                   const std::string& node1_dir, const std::string& reference_dir,
                                   const std::string& reference,
                                   const std::vector<std::unique_ptr<Background>>& agents) {
  for (int shard = 0; shard < 4; ++shard) {
    const std::string host_dir = shard < 2 ? node0_dir : node1_dir;
    EXPECT_TRUE(Shard(host_dir, job, shard) == Shard(reference_dir, reference, shard))
        << job << " shard " << shard << "\n"
        << AllOutput(agents);
  }
}

}  // namespace
}  // namespace tenax::testing
