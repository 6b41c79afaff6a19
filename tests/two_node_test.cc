// Two nodes: two `tenax launch` processes, each in its own network namespace joined by a veth
// pair (10.77.0.1 <-> 10.77.0.2), train one model together over TCP, 2 ranks per node, FSDP over
// all 4. The namespaces are created and removed by the test (needs root and iproute2; skipped
// otherwise). Traffic stays inside the namespaces the test made.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "test_util.h"

namespace tenax::testing {
namespace {

class Namespaces {
 public:
  Namespaces() {
    const std::string id = std::to_string(::getpid() % 100000);
    a_ = "tnxa" + id;
    b_ = "tnxb" + id;
    auto r = RunCommand("ip netns add " + a_ + " && ip netns add " + b_ + " && ip link add va" +
                        id + " type veth peer name vb" + id + " && ip link set va" + id +
                        " netns " + a_ + " && ip link set vb" + id + " netns " + b_ + " && ip -n " +
                        a_ + " addr add 10.77.0.1/24 dev va" + id + " && ip -n " + b_ +
                        " addr add 10.77.0.2/24 dev vb" + id + " && ip -n " + a_ + " link set va" +
                        id + " up && ip -n " + b_ + " link set vb" + id + " up && ip -n " + a_ +
                        " link set lo up && ip -n " + b_ + " link set lo up");
    ok_ = r.exit_code == 0;
    error_ = r.output;
    if_a_ = "va" + id;
    if_b_ = "vb" + id;
  }
  ~Namespaces() {
    RunCommand("ip netns del " + a_ + " 2>/dev/null; ip netns del " + b_ + " 2>/dev/null; true");
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string Exec(const std::string& ns_ifname_cmd, bool first) const {
    return "ip netns exec " + (first ? a_ : b_) +
           " env GLOO_SOCKET_IFNAME=" + (first ? if_a_ : if_b_) + " " + ns_ifname_cmd;
  }

 private:
  std::string a_, b_, if_a_, if_b_, error_;
  bool ok_ = false;
};

TEST(TwoNodes, LaunchersInTwoNamespacesTrainOneModel) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  Namespaces ns;
  if (!ns.ok()) GTEST_SKIP() << "cannot create network namespaces here: " << ns.error();
  TempDir dir;
  const std::string train =
      " train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
      "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
      "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
      "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 --set metrics.progress=never "
      "--set optimizer.lr=3e-3 --set training.local_batch_size=2 --set training.steps=6 "
      "--set checkpoint.interval=3 --set job.dump_folder=" +
      dir.path() + " --set job.name=two";
  auto launcher = [&](int node) {
    return ns.Exec("'" + TenaxBinary() + "' launch --nproc-per-node 2 --nnodes 2 --node-rank " +
                       std::to_string(node) + " --rdzv 10.77.0.1:29517 --" + train,
                   node == 0);
  };
  const std::string log0 = dir / "node0.log", log1 = dir / "node1.log";
  auto r = RunCommand("(" + launcher(0) + " > " + log0 + " 2>&1 & " + launcher(1) + " > " + log1 +
                          " 2>&1; echo node1=$?; wait $!; echo node0=$?)",
                      dir.path());
  const std::string out0 = ReadFile(log0), out1 = ReadFile(log1);
  EXPECT_NE(r.output.find("node1=0"), std::string::npos) << r.output << out0 << out1;
  EXPECT_NE(r.output.find("node0=0"), std::string::npos) << r.output << out0 << out1;
  EXPECT_NE(out0.find("rank 0 of 4"), std::string::npos) << out0;
  EXPECT_NE(out1.find("rank 3 of 4"), std::string::npos) << out1;
  EXPECT_NE(out0.find("dp_replicate 1 x dp_shard 4"), std::string::npos) << out0;
  EXPECT_TRUE(std::filesystem::exists(dir / "two/checkpoints/step_00000006/COMMITTED"));
  // Node 1's ranks wrote their shards of the same checkpoint.
  EXPECT_TRUE(std::filesystem::exists(
      dir / "two/checkpoints/step_00000006/model-rank00003-of-00004.safetensors"));
  int steps = 0;
  for (const auto& j : ReadJsonl(dir / "two/metrics.jsonl")) steps += j.contains("loss");
  EXPECT_EQ(steps, 6);
}

}  // namespace
}  // namespace tenax::testing
