// The Slurm recipe (deploy/slurm/) on a real Slurm cluster: Debian's slurmctld, slurmd and munge
// on this machine, one slurmd per host in its own network namespace (tests/slurm_cluster.h), the
// job submitted with sbatch as a user would. The recipe starts its own 3-member etcd with TLS on
// the allocation's first nodes and one `tenax launch` agent per node: 2 active nodes and a spare.
// The uninterrupted reference is the recipe's README followed as written, from an empty folder.
// Then one active node's processes (its agent, its ranks, its etcd member) are killed mid-run:
// the job goes on with the spare and ends with the reference's final weights, bit for bit; the
// dead node is drained in Slurm with tenax's reason; and a replacement spare job was submitted by
// the agents, ran on the one node left, and joined the job as a spare node. Last, on the nodes
// left, a job whose rank computes wrong results (silent data corruption): its node is drained
// at once with tenax's reason and the job ends on the spare with the reference's weights.
// Needs root and the Slurm packages (skipped otherwise, with the reason).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "netns_util.h"
#include "slurm_cluster.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

constexpr int kSteps = 40;

std::string Train(const std::string& dump, const std::string& name) {
  return MultiNodeTrain(dump, name, kSteps);
}

std::string Shard(const std::string& dump, const std::string& run, int shard) {
  return MultiNodeShard(dump, run, kSteps, shard);
}

std::string Recipe(const std::string& file) { return SourceDir() + "/deploy/slurm/" + file; }

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    auto net = NetnsHosts::Create(4);  // 3 nodes for the job, one for the replacement spare
    if (!net.ok()) GTEST_SKIP() << net.status().message();
    net_ = std::move(*net);
    std::filesystem::create_directories(dir_ / "cluster");
    auto cluster = SlurmCluster::Start(*net_, dir_ / "cluster");
    if (!cluster.ok()) GTEST_SKIP() << cluster.status().message();
    slurm_ = std::move(*cluster);
  }
  void TearDown() override {
    slurm_.reset();  // before the hosts
    net_.reset();
  }

  // The environment of an sbatch of the recipe for tenax job `name`; `train_flags` are appended
  // to the training command.
  std::string Exports(const std::string& name, const std::string& extra,
                      const std::string& train_flags = "") const {
    return "TENAX=" + TenaxBinary() + " TENAX_NPROC=2 TENAX_JOB_ID=" + name +
           " TENAX_STATE_ROOT=" + (dir_ / "state") + " TENAX_TRAIN='" + Train(dir_ / "dump", name) +
           " " + train_flags + "' " + extra;
  }

  // Every agent log of job `name` (the recipe's state folder), with the node it ran on.
  std::map<std::string, std::string> AgentLogs(const std::string& name) const {
    std::map<std::string, std::string> logs;
    const std::string folder = dir_ / ("state/" + name);
    if (!std::filesystem::exists(folder)) return logs;
    for (const auto& e : std::filesystem::directory_iterator(folder)) {
      const std::string f = e.path().filename().string();
      if (f.rfind("agent-", 0) == 0) logs[f] = ReadFile(e.path());
    }
    return logs;
  }
  std::string AllLogs(const std::string& name, const std::string& main_out) const {
    std::string out = "--- sbatch output\n" + ReadFile(main_out);
    for (const auto& [f, text] : AgentLogs(name)) out += "--- " + f + "\n" + text;
    return out + slurm_->Logs();
  }

  TempDir dir_;
  std::unique_ptr<NetnsHosts> net_;
  std::unique_ptr<SlurmCluster> slurm_;
};

// A process's state letter in /proc (R, S, T for stopped, ...); 0 when it is gone.
char ProcessState(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? 0 : stat[paren + 2];
}

// The processes of `host` that are the job's (tenax and etcd), not Slurm's daemons.
std::vector<pid_t> JobProcesses(const NetnsHosts& net, int host) {
  std::vector<pid_t> pids;
  for (const std::string& w : Words(Run("ip netns pids " + net.name(host)).output)) {
    const pid_t pid = std::atoi(w.c_str());
    std::error_code ec;
    const std::string exe = std::filesystem::read_symlink("/proc/" + w + "/exe", ec).filename();
    if (pid > 0 && (exe.rfind("tenax", 0) == 0 || exe == "etcd")) pids.push_back(pid);
  }
  return pids;
}

TEST_F(Slurm, LostAndCorruptingNodesAreReplacedDrainedAndSparesReplenished) {
  // The reference, uninterrupted: deploy/slurm/README.md's "Run it, from an empty folder", as a
  // new user would type it (the defaults: job id, state folder, output file), with the test's
  // binary and training command.
  const std::string fresh = dir_ / "my-run";
  std::filesystem::create_directories(fresh);
  WriteFile(dir_ / "readme.sh", "export TENAX=" + TenaxBinary() +
                                    "\nexport TENAX_NPROC=2\nexport TENAX_TRAIN=\"" +
                                    Train("$PWD/runs", "reference") + "\"\nsbatch --nodes=3 " +
                                    Recipe("tenax.sbatch") + "\n");
  const auto submitted = RunCommand(slurm_->Env() + "bash " + (dir_ / "readme.sh"), fresh);
  std::smatch id;
  ASSERT_TRUE(std::regex_search(submitted.output, id, std::regex("Submitted batch job ([0-9]+)")))
      << submitted.output;
  const std::string reference = id[1];
  const std::string reference_out = fresh + "/tenax-" + reference + ".out";
  const std::string reference_state = fresh + "/tenax-slurm/tenax-" + reference;
  ASSERT_EQ(slurm_->WaitJobEnd(reference, 600), "COMPLETED")
      << ReadFile(reference_out) << slurm_->Logs();
  EXPECT_NE(ReadFile(reference_out).find("ended with exit code 0"), std::string::npos)
      << ReadFile(reference_out);
  for (int node = 0; node < 3; ++node) {
    const std::string log =
        reference_state + "/agent-" + SlurmCluster::NodeName(node) + "-" + reference + ".log";
    EXPECT_NE(ReadFile(log).find("finished on every node"), std::string::npos) << log;
  }
  EXPECT_TRUE(std::filesystem::exists(fresh + "/runs/reference/goodput.json"));
  EXPECT_EQ(slurm_->Client("sinfo -R -h").output, "");  // nothing drained

  // The job: 3 nodes (2 active, 1 spare). Generation 0 is held at step 12 (rank 2, node 1's
  // first, hangs before its all-reduce; the hang timeout is far beyond the wait) until a node is
  // killed; generation 1 at step 30 (rank 0 stops itself) until the replacement spare joined, so
  // that the job is still running when it does, whatever the machine's speed.
  const std::string out = dir_ / "job.out";
  auto job = slurm_->Sbatch(
      "--output=" + out + " " + Recipe("tenax.sbatch"),
      Exports("job",
              "TENAX_DRAIN=1 TENAX_MIN_SPARES=1 "
              "TENAX_LAUNCH_ARGS='--inject hang:rank=2:step=12,stop:rank=0:step=30:gen=1'"),
      dir_.path());
  ASSERT_TRUE(job.ok()) << job.status().message();
  const std::string held = "injected fault: hang at step 12 ";
  bool fired = false;
  WaitFor(
      [&] {
        for (const auto& [f, text] : AgentLogs("job")) {
          if (text.find(held) != std::string::npos) return fired = true;
        }
        const std::string state = slurm_->JobField(*job, "JobState");
        return state != "PENDING" && state != "RUNNING" && state != "CONFIGURING";
      },
      300);
  ASSERT_TRUE(fired) << AllLogs("job", out);
  // Node 1 of generation 0 (ranks 2..3): kill its processes at once, as a crash of the machine
  // would (its slurmd stays: Slurm itself sees nothing wrong with the node).
  std::string victim_log;
  for (const auto& [f, text] : AgentLogs("job")) {
    if (text.find("generation 0: started ranks 2..3") != std::string::npos) victim_log = f;
  }
  ASSERT_FALSE(victim_log.empty()) << AllLogs("job", out);
  const std::smatch m = [&] {
    std::smatch s;
    std::regex_search(victim_log, s, std::regex("agent-(n[0-9]+)-"));
    return s;
  }();
  ASSERT_EQ(m.size(), 2u) << victim_log;
  const std::string victim = m[1];
  const int host = std::atoi(victim.c_str() + 1);
  const std::vector<pid_t> pids = JobProcesses(*net_, host);
  ASSERT_FALSE(pids.empty()) << "no tenax process on " << victim;
  for (pid_t p : pids) ::kill(p, SIGKILL);

  // Generation 1 runs on the spare; the agents ask Slurm for a new spare, whose agent joins (on
  // the one node left); then rank 0, stopped at step 30, goes on.
  std::string spare_log;
  std::vector<pid_t> stopped;
  WaitFor(
      [&] {
        for (const auto& [f, text] : AgentLogs("job")) {
          if (f.rfind("agent-n3-", 0) == 0) spare_log = text;
        }
        stopped.clear();
        for (int h = 0; h < net_->size(); ++h) {
          for (pid_t p : JobProcesses(*net_, h)) {
            if (ProcessState(p) == 'T') stopped.push_back(p);
          }
        }
        return spare_log.find("this node is a spare") != std::string::npos && !stopped.empty();
      },
      300);
  ASSERT_NE(spare_log.find("this node is a spare"), std::string::npos) << AllLogs("job", out);
  ASSERT_FALSE(stopped.empty()) << AllLogs("job", out);
  for (pid_t p : stopped) ::kill(p, SIGCONT);

  // The job goes on and finishes.
  ASSERT_EQ(slurm_->WaitJobEnd(*job, 600), "COMPLETED") << AllLogs("job", out);
  for (int shard = 0; shard < 4; ++shard) {
    const std::string want = Shard(fresh + "/runs", "reference", shard);
    ASSERT_FALSE(want.empty()) << "reference shard " << shard;
    EXPECT_TRUE(Shard(dir_ / "dump", "job", shard) == want) << "shard " << shard << "\n"
                                                            << AllLogs("job", out);
  }

  // The dead node is drained, with tenax's reason.
  EXPECT_NE(slurm_->NodeField(victim, "State").find("DRAIN"), std::string::npos)
      << slurm_->Client("scontrol show node " + victim).output;
  EXPECT_EQ(
      slurm_->NodeField(victim, "Reason").rfind("tenax: job job: node lost in generation 0", 0), 0u)
      << slurm_->Client("scontrol show node " + victim).output;

  // A replacement was asked of Slurm, ran on the one node left, and joined as a spare.
  const auto goodput =
      nlohmann::json::parse(ReadFile(dir_ / "dump/job/goodput.json"), nullptr, false);
  ASSERT_TRUE(goodput.is_object() && goodput.contains("scheduler")) << goodput.dump(2);
  const nlohmann::json& sched = goodput["scheduler"];
  ASSERT_EQ(sched["drained"].size(), 1u) << sched.dump(2);
  EXPECT_EQ(sched["drained"][0]["node"], victim);
  ASSERT_EQ(sched["spare_requests"].size(), 1u) << sched.dump(2);
  const nlohmann::json& request = sched["spare_requests"][0];
  ASSERT_TRUE(request.contains("scheduler_job")) << request.dump(2);
  EXPECT_TRUE(request.contains("joined_agent")) << request.dump(2);
  const std::string spare_job = request["scheduler_job"];
  EXPECT_EQ(slurm_->JobField(spare_job, "JobName"), "tenax-spare-job");
  EXPECT_EQ(slurm_->JobField(spare_job, "NodeList"), SlurmCluster::NodeName(3));
  EXPECT_EQ(slurm_->WaitJobEnd(spare_job, 120), "COMPLETED");
  const std::string log = ReadFile(dir_ / ("state/job/agent-n3-" + spare_job + ".log"));
  EXPECT_NE(log.find("launch: job job finished on every node"), std::string::npos) << log;

  // A node that computes wrong results: on the three nodes left, rank 2 (node 1's first)
  // corrupts its gradients from step 10 on and resilience.sdc_check_interval = 5 finds it at
  // step 10. One proven fault is enough: its node is drained at once with the reason, the spare
  // takes its place, and the job ends with the reference's weights (the checks change nothing).
  const std::string corrupt_out = dir_ / "corrupt.out";
  auto corrupt = slurm_->Sbatch(
      "--output=" + corrupt_out + " " + Recipe("tenax.sbatch"),
      Exports("corrupt", "TENAX_DRAIN=1 TENAX_LAUNCH_ARGS='--inject sdc:rank=2:step=10'",
              "--set resilience.sdc_check_interval=5"),
      dir_.path());
  ASSERT_TRUE(corrupt.ok()) << corrupt.status().message();
  ASSERT_EQ(slurm_->WaitJobEnd(*corrupt, 600), "COMPLETED") << AllLogs("corrupt", corrupt_out);
  for (int shard = 0; shard < 4; ++shard) {
    EXPECT_TRUE(Shard(dir_ / "dump", "corrupt", shard) ==
                Shard(fresh + "/runs", "reference", shard))
        << "shard " << shard << "\n"
        << AllLogs("corrupt", corrupt_out);
  }
  std::string culprit;
  for (const auto& [f, text] : AgentLogs("corrupt")) {
    std::smatch n;
    if (text.find("generation 0: started ranks 2..3") != std::string::npos &&
        std::regex_search(f, n, std::regex("agent-(n[0-9]+)-"))) {
      culprit = n[1];
    }
  }
  ASSERT_FALSE(culprit.empty()) << AllLogs("corrupt", corrupt_out);
  EXPECT_NE(culprit, victim);
  EXPECT_NE(slurm_->NodeField(culprit, "State").find("DRAIN"), std::string::npos)
      << slurm_->Client("scontrol show node " + culprit).output;
  EXPECT_EQ(slurm_->NodeField(culprit, "Reason")
                .rfind("tenax: job corrupt: quarantined: its rank 2 computed wrong results", 0),
            0u)
      << slurm_->Client("scontrol show node " + culprit).output;
  const auto corrupt_goodput =
      nlohmann::json::parse(ReadFile(dir_ / "dump/corrupt/goodput.json"), nullptr, false);
  ASSERT_TRUE(corrupt_goodput.is_object()) << AllLogs("corrupt", corrupt_out);
  ASSERT_EQ(corrupt_goodput["sdc"].size(), 1u) << corrupt_goodput.dump(2);
  EXPECT_EQ(corrupt_goodput["sdc"][0]["rank"], 2) << corrupt_goodput.dump(2);
  ASSERT_EQ(corrupt_goodput["scheduler"]["drained"].size(), 1u) << corrupt_goodput.dump(2);
  EXPECT_EQ(corrupt_goodput["scheduler"]["drained"][0]["node"], culprit);
}

}  // namespace
}  // namespace tenax::testing
