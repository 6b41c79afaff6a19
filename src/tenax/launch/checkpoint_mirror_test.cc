// The checkpoint mirror's decisions without an etcd or a peer: which commits the job accepted and
// dropped (from etcd's records), which files of a commit are a node's, which node keeps them in
// RAM, and when an injected push-loss fault drops a push. Two nodes of two ranks (ranks 0-1 on
// node 0, 2-3 on node 1) unless said otherwise.
#include "tenax/launch/checkpoint_mirror.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

namespace tenax::launch {
namespace {

ckpt::Manifest ManifestOf(int64_t step) {
  ckpt::Manifest m;
  m.step = step;
  m.created_unix = 1000 + step;
  m.world_size = 4;
  for (int r = 0; r < 4; ++r) {
    m.files[fmt::format("model-rank{:05d}-of-00004.safetensors", r)] = {100, 1u + r};
    m.files[fmt::format("optimizer-rank{:05d}-of-00004.safetensors", r)] = {200, 11u + r};
  }
  m.files["train_state.json"] = {10, 99};
  return m;
}

// A commits/<step> record as the agents write it (node_agent_rendezvous.cc, Commit).
std::string CommitRecord(const ckpt::Manifest& m, int64_t g = 0) {
  return nlohmann::json{{"generation", g}, {"manifest", m.ToJson()}}.dump();
}

etcd::KeyValue Kv(const std::string& key, const std::string& value) {
  etcd::KeyValue kv;
  kv.key = key;
  kv.value = value;
  return kv;
}

std::set<std::string> Names(const ckpt::Manifest& m) {
  std::set<std::string> names;
  for (const auto& [name, entry] : m.files) names.insert(name);
  return names;
}

rdzv::AgentInfo Agent(const std::string& id, int file_port) {
  rdzv::AgentInfo a;
  a.id = id;
  a.host = "host-" + id;
  a.address = "10.0.0." + std::to_string(id.back() - 'a' + 1);
  a.file_port = file_port;
  return a;
}

// Node `node_rank` of generation 3, planned as a, b; both agents serve files.
MirrorPlace PlaceOf(int node_rank) {
  MirrorPlace p;
  p.generation = 3;
  p.node_rank = node_rank;
  p.plan_nodes = {"a", "b"};
  p.agents = {{"a", Agent("a", 7000)}, {"b", Agent("b", 7001)}};
  return p;
}

TEST(CheckpointMirror, ReadsTheJobsCommitsAndSkipsWhatDoesNotParse) {
  etcd::RangeResponse r;
  r.kvs = {Kv("commits/4", CommitRecord(ManifestOf(4))), Kv("commits/8", "not json"),
           Kv("commits/12", CommitRecord(ManifestOf(12))),
           Kv("commits/16", nlohmann::json{{"generation", 1}}.dump())};
  const JobCommits c = ParseCommits(r);
  ASSERT_EQ(c.accepted.size(), 2u);
  EXPECT_EQ(c.accepted.at(4), ckpt::ManifestCrc(ManifestOf(4)));
  EXPECT_EQ(c.accepted.at(12), ckpt::ManifestCrc(ManifestOf(12)));
  ASSERT_TRUE(c.newest);
  EXPECT_EQ(c.newest->step, 12);
  EXPECT_EQ(Names(*c.newest), Names(ManifestOf(12)));

  EXPECT_FALSE(ParseCommits(etcd::RangeResponse{}).newest);
  EXPECT_FALSE(CommitManifest("{}", "commits/1").ok());
  Result<ckpt::Manifest> m = CommitManifest(CommitRecord(ManifestOf(8)), "commit");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->step, 8);
}

TEST(CheckpointMirror, ReadsTheDroppedCommits) {
  etcd::RangeResponse r;
  r.kvs = {Kv("dropped/4",
              nlohmann::json{{"step", 4}, {"manifest_crc", 1234u}, {"generation", 2}}.dump()),
           Kv("dropped/8", nlohmann::json{{"step", 8}}.dump()), Kv("dropped/9", "[")};
  const std::map<int64_t, uint32_t> dropped = ParseDrops(r);
  EXPECT_EQ(dropped, (std::map<int64_t, uint32_t>{{4, 1234u}}));
}

TEST(CheckpointMirror, PeersAreTheOtherAgentsWithAFileServer) {
  const std::map<std::string, rdzv::AgentInfo> agents = {
      {"a", Agent("a", 7000)}, {"b", Agent("b", 7001)}, {"c", Agent("c", 0)}};
  const std::vector<transfer::FilePeer> peers = FilePeersOf(agents, "a");
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].name, "agent b on host-b");
  EXPECT_EQ(peers[0].endpoint, "10.0.0.2:7001");
}

TEST(CheckpointMirror, ANodesFilesAreThoseOfItsRanks) {
  const ckpt::Manifest m = ManifestOf(8);
  const ckpt::Manifest node0 = FilesOfNode(m, 0, 2);
  EXPECT_EQ(node0.step, 8);
  EXPECT_EQ(Names(node0),
            (std::set<std::string>{
                "model-rank00000-of-00004.safetensors", "model-rank00001-of-00004.safetensors",
                "optimizer-rank00000-of-00004.safetensors",
                "optimizer-rank00001-of-00004.safetensors", "train_state.json"}));
  const ckpt::Manifest node1 = FilesOfNode(m, 1, 2);
  EXPECT_EQ(Names(node1), (std::set<std::string>{"model-rank00002-of-00004.safetensors",
                                                 "model-rank00003-of-00004.safetensors",
                                                 "optimizer-rank00002-of-00004.safetensors",
                                                 "optimizer-rank00003-of-00004.safetensors"}));
  EXPECT_EQ(node1.files.at("model-rank00002-of-00004.safetensors").crc32, 3u);
}

TEST(CheckpointMirror, TheNextNodeKeepsTheReplicas) {
  const std::vector<std::string> nodes = {"a", "b", "c"};
  EXPECT_EQ(BuddyOf(nodes, 0), "b");
  EXPECT_EQ(BuddyOf(nodes, 1), "c");
  EXPECT_EQ(BuddyOf(nodes, 2), "a");
}

TEST(CheckpointMirror, APushLossFaultAppliesToItsNodeAndGeneration) {
  Result<std::vector<protocol::Fault>> faults =
      protocol::ParseFaults("push-loss:rank=2:gen=1,crash:rank=0:step=3");
  ASSERT_TRUE(faults.ok()) << faults.status().message();
  EXPECT_EQ(PushLossFault(*faults, /*node_rank=*/1, 2, /*generation=*/1), &(*faults)[0]);
  EXPECT_EQ(PushLossFault(*faults, 1, 2, 2), nullptr) << "another generation";
  EXPECT_EQ(PushLossFault(*faults, 0, 2, 1), nullptr) << "another node (and not a push-loss)";
  Result<std::vector<protocol::Fault>> always = protocol::ParseFaults("push-loss:rank=3:gen=all");
  ASSERT_TRUE(always.ok()) << always.status().message();
  EXPECT_NE(PushLossFault(*always, 1, 2, 0), nullptr);
  EXPECT_NE(PushLossFault(*always, 1, 2, 7), nullptr);
}

TEST(CheckpointMirror, PushesThisNodesFilesToTheNextNode) {
  const ckpt::Manifest m = ManifestOf(8);
  std::optional<ReplicaPush> p = ReplicaPushOf(m, PlaceOf(1), 2, {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->buddy.name, "agent a on host-a");
  EXPECT_EQ(p->buddy.endpoint, "10.0.0.1:7000");
  EXPECT_EQ(Names(p->files), Names(FilesOfNode(m, 1, 2)));
  p = ReplicaPushOf(m, PlaceOf(0), 2, {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->buddy.endpoint, "10.0.0.2:7001");
  EXPECT_EQ(p->files.files.count("train_state.json"), 1u);
}

TEST(CheckpointMirror, PushesNothingWithoutAPlaceOrABuddy) {
  const ckpt::Manifest m = ManifestOf(8);
  MirrorPlace none = PlaceOf(0);
  none.generation = -1;  // nothing runs here
  EXPECT_FALSE(ReplicaPushOf(m, none, 2, {}));
  MirrorPlace spare = PlaceOf(0);
  spare.node_rank = -1;
  EXPECT_FALSE(ReplicaPushOf(m, spare, 2, {}));
  MirrorPlace alone = PlaceOf(0);
  alone.plan_nodes = {"a"};
  EXPECT_FALSE(ReplicaPushOf(m, alone, 2, {}));
  MirrorPlace unknown = PlaceOf(0);
  unknown.agents.erase("b");  // the buddy's record not read (yet)
  EXPECT_FALSE(ReplicaPushOf(m, unknown, 2, {}));
  MirrorPlace serverless = PlaceOf(0);
  serverless.agents["b"].file_port = 0;
  EXPECT_FALSE(ReplicaPushOf(m, serverless, 2, {}));
}

TEST(CheckpointMirror, AnInjectedPushLossDropsThePushAndSaysSo) {
  Result<std::vector<protocol::Fault>> faults = protocol::ParseFaults("push-loss:rank=2:gen=all");
  ASSERT_TRUE(faults.ok()) << faults.status().message();
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(ReplicaPushOf(ManifestOf(4), PlaceOf(1), 2, *faults));
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("launch: injected fault push-loss:rank=2:gen=all: this node's files of "
                      "step 4 are not pushed"),
            std::string::npos)
      << said;
  EXPECT_TRUE(ReplicaPushOf(ManifestOf(4), PlaceOf(0), 2, *faults)) << "node 0 pushes";
}

// The mirror itself: a RAM folder of its own and a file server, both gone with it.
TEST(CheckpointMirror, StartsAServerOnARamFolderThatGoesWithIt) {
  if (!transfer::CheckpointTransferAvailable()) GTEST_SKIP() << "built without cpp-httplib";
  CheckpointMirrorOptions o;
  o.job_id = "mirror-test";
  o.agent_id = "agent-" + std::to_string(::getpid());
  o.address = "127.0.0.1";
  o.checkpoint_dir = "/dev/shm/tenax-mirror-test-missing-" + std::to_string(::getpid());
  o.secret = "s3cret";
  o.nproc_per_node = 2;
  Result<std::unique_ptr<CheckpointMirror>> m = CheckpointMirror::Start(o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::string root = (*m)->replica_root();
  EXPECT_EQ(root, "/dev/shm/tenax-replicas-mirror-test-" + o.agent_id);
  EXPECT_TRUE(std::filesystem::is_directory(root));
  EXPECT_GT((*m)->file_port(), 0);
  // A commit with no place to go is ignored.
  (*m)->Push(CommitRecord(ManifestOf(4)), MirrorPlace{});
  (*m)->Push("not a commit", PlaceOf(0));
  m->reset();
  EXPECT_FALSE(std::filesystem::exists(root));
  EXPECT_FALSE(std::filesystem::exists(o.checkpoint_dir));
}

}  // namespace
}  // namespace tenax::launch
