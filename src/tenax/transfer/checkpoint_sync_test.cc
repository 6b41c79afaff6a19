// Checkpoint files across nodes, with two or three file servers in one process on loopback, each
// with its own checkpoint folder and replica store (temp folders): a step committed on node 0
// and spread over two nodes is completed on each from the other; a lost node is rebuilt on a
// spare from a peer's RAM replica while the lost node's server is down; damaged files are
// replaced, complete folders only read; wrong secrets and path-traversal names get nothing; the
// replica store keeps the newest two steps; unaccepted commits are moved aside. Every restored
// folder is checked with CheckpointStore::Verify and byte for byte against the bytes written.
// Waits are for events (a condition variable), never for a fixed time.
#include "tenax/transfer/checkpoint_sync.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "tenax/checkpoint/memory_replica.h"  // ReadCommittedManifest
#include "tenax/checkpoint/store.h"
#include "tenax/checkpoint/testing_fs.h"
#include "tenax/core/crc32.h"
#include "tenax/core/temp_dir.h"

#ifdef TENAX_WITH_HTTPLIB
#include <httplib.h>
#endif

namespace tenax::transfer {
namespace {

using ckpt::CheckpointStore;
using ckpt::Manifest;
using NamedFiles = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kSecret = "job-secret-4f1c2a9e";

#define SKIP_WITHOUT_HTTPLIB()        \
  if (!CheckpointTransferAvailable()) \
  GTEST_SKIP() << "built without cpp-httplib (libcpp-httplib-dev)"

// Deterministic bytes that differ per name (a 64-bit LCG seeded by the name's CRC).
std::string Bytes(const std::string& name, size_t n) {
  uint64_t x = Crc32(name) * 0x9E3779B97F4A7C15ull + 1;
  std::string s(n, '\0');
  for (auto& c : s) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>(x >> 56);
  }
  return s;
}

// Step 100 of a 4-rank job on 2 nodes (ranks 0-1 on node 0, 2-3 on node 1). One file crosses
// several of the server's 64 KiB read chunks and the client's 1 MiB write chunks; one is empty.
NamedFiles Node0Files() {
  return {{"model-rank00000-of-00004.safetensors", Bytes("m0", (3 << 20) + 17)},
          {"model-rank00001-of-00004.safetensors", Bytes("m1", 4096)},
          {"optimizer-rank00000-of-00004.safetensors", Bytes("o0", 777)},
          {"optimizer-rank00001-of-00004.safetensors", Bytes("o1", 1000)},
          {"train_state.json", "{\"step\": 100}\n"},
          {"empty.bin", ""}};
}
NamedFiles Node1Files() {
  return {{"model-rank00002-of-00004.safetensors", Bytes("m2", 5000)},
          {"model-rank00003-of-00004.safetensors", Bytes("m3", 70000)},
          {"optimizer-rank00002-of-00004.safetensors", Bytes("o2", 123)},
          {"optimizer-rank00003-of-00004.safetensors", Bytes("o3", 456)}};
}
NamedFiles AllFiles() {
  NamedFiles all = Node0Files();
  for (auto& f : Node1Files()) all.push_back(f);
  return all;
}

// The manifest rank 0 would commit: sizes and CRCs of every rank's files.
Manifest MakeManifest(int64_t step, const NamedFiles& files) {
  Manifest m;
  m.step = step;
  m.created_unix = 1700000000;
  m.world_size = 4;
  m.layout = {{"dp_shard", 4}};
  for (const auto& [name, bytes] : files)
    m.files[name] = ckpt::FileEntry{bytes.size(), Crc32(bytes)};
  return m;
}

std::vector<std::string> Names(const NamedFiles& files) {
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(f.first);
  return names;
}

// The folder holds exactly the bytes of `files` for `step`, and the step verifies as committed.
void ExpectComplete(const std::string& folder, int64_t step, const NamedFiles& files) {
  CheckpointStore store(LocalFs(), folder);
  Status st = store.Verify(step);
  EXPECT_TRUE(st.ok()) << st.ToString();
  for (const auto& [name, bytes] : files) {
    Result<std::string> got = LocalFs().ReadFile(JoinPath(store.StepDir(step), name));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == bytes) << name << " differs from the bytes its rank wrote";
  }
}

std::map<std::string, std::string> Sources(const ReconcileReport& r) {
  std::map<std::string, std::string> m;
  for (const auto& f : r.files) m[f.name] = f.source;
  return m;
}

std::vector<std::string> ListAll(const std::string& dir) {
  auto names = LocalFs().ListDir(dir);
  return names.ok() ? *names : std::vector<std::string>{};
}

struct Node {
  std::string folder;
  std::string replicas;
  std::unique_ptr<CheckpointFileServer> server;
  FilePeer peer;
};

class CheckpointSyncTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_HTTPLIB(); }

  Node StartNode(const std::string& name, const std::string& secret = kSecret) {
    Node n;
    n.folder = tmp_ / (name + "/ckpt");
    n.replicas = tmp_ / (name + "/shm");
    FileServerOptions o;
    o.checkpoint_folder = n.folder;
    o.replica_root = n.replicas;
    o.secret = secret;
    auto server = CheckpointFileServer::Start(o);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return n;
    n.server = std::move(server).value();
    n.peer = FilePeer{name, n.server->endpoint()};
    return n;
  }

  // Node 0 and node 1 each wrote their ranks' files of `step`; node 0 committed the manifest.
  Manifest WriteSpreadStep(const Node& n0, const Node& n1, int64_t step = 100) {
    CheckpointStore s0(LocalFs(), n0.folder), s1(LocalFs(), n1.folder);
    EXPECT_TRUE(s0.WriteFiles(step, Node0Files()).ok());
    EXPECT_TRUE(s1.WriteFiles(step, Node1Files()).ok());
    Manifest m = MakeManifest(step, AllFiles());
    Status st = s0.CommitManifest(m);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return m;
  }

  tenax::testing::TempDir tmp_;
};

TEST_F(CheckpointSyncTest, EachNodeGetsTheOtherNodesFilesAndCommits) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  // Before: neither folder holds a restorable step 100.
  EXPECT_FALSE(CheckpointStore(LocalFs(), n0.folder).Verify(100).ok());

  auto r1 = Reconcile(LocalFs(), n1.folder, m, {n0.peer}, kSecret);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_TRUE(r1->committed);
  EXPECT_EQ(r1->fetched(), static_cast<int>(Node0Files().size()));
  for (const auto& [name, source] : Sources(*r1)) {
    const bool own =
        name.find("rank00002") != std::string::npos || name.find("rank00003") != std::string::npos;
    EXPECT_EQ(source, own ? "local" : "node 0 (folder)") << name;
  }
  ExpectComplete(n1.folder, 100, AllFiles());

  // Node 0 is committed already (same manifest): it only fetches node 1's files.
  auto r0 = Reconcile(LocalFs(), n0.folder, m, {n1.peer}, kSecret);
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  EXPECT_FALSE(r0->committed);
  EXPECT_EQ(r0->fetched(), static_cast<int>(Node1Files().size()));
  ExpectComplete(n0.folder, 100, AllFiles());
  EXPECT_NE(r0->Summary(n0.folder).find("4 from node 1 (folder)"), std::string::npos)
      << r0->Summary(n0.folder);
}

TEST_F(CheckpointSyncTest, SpareRebuildsALostNodeFromAPeersReplicaSkippingTheDeadPeer) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1"), spare = StartNode("spare");
  const Manifest m = WriteSpreadStep(n0, n1);
  // After the commit each node pushes its own files to the next node's RAM.
  auto p1 = PushReplicas(LocalFs(), n1.folder, m, n0.peer, kSecret);
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  EXPECT_EQ(p1->pushed, Names(Node1Files()));
  uint64_t node1_bytes = 0;
  for (const auto& f : Node1Files()) node1_bytes += f.second.size();
  EXPECT_EQ(p1->bytes, node1_bytes);
  EXPECT_EQ(n0.server->replica_step(), std::optional<int64_t>(100));

  // Node 1 is lost with its disk and its RAM: its server is gone, its folder deleted.
  n1.server.reset();
  ASSERT_TRUE(LocalFs().RemoveAll(tmp_ / "node 1").ok());

  auto r = Reconcile(LocalFs(), spare.folder, m, {n1.peer, n0.peer}, kSecret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->committed);
  const auto sources = Sources(*r);
  for (const auto& f : Node0Files()) EXPECT_EQ(sources.at(f.first), "node 0 (folder)");
  for (const auto& f : Node1Files()) EXPECT_EQ(sources.at(f.first), "node 0 (replica)");
  ExpectComplete(spare.folder, 100, AllFiles());
}

TEST_F(CheckpointSyncTest, ALocalReplicaIsUsedBeforeAnyPeer) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  ASSERT_TRUE(PushReplicas(LocalFs(), n1.folder, m, n0.peer, kSecret).ok());
  ReconcileOptions o;
  o.local_replica_root = n0.replicas;
  n1.server.reset();  // no peer is reachable: everything must come from this node
  auto r = Reconcile(LocalFs(), n0.folder, m, {n1.peer}, kSecret, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& f : Node1Files()) EXPECT_EQ(Sources(*r).at(f.first), "local replica");
  ExpectComplete(n0.folder, 100, AllFiles());
}

TEST_F(CheckpointSyncTest, ADamagedLocalFileIsReplacedFromAPeer) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  ASSERT_TRUE(Reconcile(LocalFs(), n1.folder, m, {n0.peer}, kSecret).ok());
  ASSERT_TRUE(Reconcile(LocalFs(), n0.folder, m, {n1.peer}, kSecret).ok());
  // A bit flips on node 1's copy of a node 0 file, and a file of its own goes missing.
  CheckpointStore s1(LocalFs(), n1.folder);
  const std::string damaged = "model-rank00000-of-00004.safetensors";
  ASSERT_TRUE(
      ckpt::FaultyFileSystem::FlipByte(LocalFs(), JoinPath(s1.StepDir(100), damaged), (1 << 20) + 5)
          .ok());
  const std::string missing = "optimizer-rank00003-of-00004.safetensors";
  ASSERT_TRUE(LocalFs().RemoveAll(JoinPath(s1.StepDir(100), missing)).ok());
  ASSERT_FALSE(s1.Verify(100).ok());

  auto r = Reconcile(LocalFs(), n1.folder, m, {n0.peer}, kSecret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->committed);  // committed with the same manifest already
  EXPECT_EQ(r->fetched(), 2);
  for (const auto& f : r->files) {
    EXPECT_EQ(f.replaced, f.name == damaged) << f.name;
    if (f.name == damaged || f.name == missing) {
      EXPECT_EQ(f.source, "node 0 (folder)");
    }
  }
  ExpectComplete(n1.folder, 100, AllFiles());
}

TEST_F(CheckpointSyncTest, APeersReplicaIsUsedWhenItsFolderCopyIsDamaged) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1"), spare = StartNode("spare");
  const Manifest m = WriteSpreadStep(n0, n1);
  ASSERT_TRUE(PushReplicas(LocalFs(), n0.folder, m, n1.peer, kSecret).ok());
  ASSERT_TRUE(Reconcile(LocalFs(), n1.folder, m, {n0.peer}, kSecret).ok());
  // Node 1's folder copy of a node 0 file goes bad; its RAM copy of it is still good.
  const std::string name = "optimizer-rank00001-of-00004.safetensors";
  ASSERT_TRUE(ckpt::FaultyFileSystem::FlipByte(
                  LocalFs(), JoinPath(CheckpointStore(LocalFs(), n1.folder).StepDir(100), name), 3)
                  .ok());
  auto r = Reconcile(LocalFs(), spare.folder, m, {n1.peer}, kSecret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& [file, source] : Sources(*r)) {
    EXPECT_EQ(source, file == name ? "node 1 (replica)" : "node 1 (folder)") << file;
  }
  ExpectComplete(spare.folder, 100, AllFiles());
}

TEST_F(CheckpointSyncTest, ACompleteCommittedFolderIsOnlyRead) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  ASSERT_TRUE(Reconcile(LocalFs(), n1.folder, m, {n0.peer}, kSecret).ok());
  ckpt::FaultyFileSystem recording(LocalFs());  // records every mutating operation
  auto r = Reconcile(recording, n1.folder, m, {}, kSecret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fetched(), 0);
  EXPECT_FALSE(r->committed);
  EXPECT_TRUE(recording.ops().empty()) << recording.ops().front();
}

TEST_F(CheckpointSyncTest, AnErrorNamesEveryMissingFileAndEverySourceTried) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1"), other = StartNode("node 9");
  const Manifest m = WriteSpreadStep(n0, n1);
  n1.server.reset();
  ASSERT_TRUE(LocalFs().RemoveAll(tmp_ / "node 1").ok());
  // Node 1's files are nowhere now: node 1 is down, node 9 never had them.
  auto r = Reconcile(LocalFs(), n0.folder, m, {n1.peer, other.peer}, kSecret);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("4 of 10 files"), std::string::npos) << msg;
  for (const auto& f : Node1Files()) EXPECT_NE(msg.find(f.first), std::string::npos) << f.first;
  EXPECT_NE(msg.find("from node 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not asked (unreachable earlier"), std::string::npos) << msg;
  EXPECT_NE(msg.find("from node 9: HTTP 404"), std::string::npos) << msg;
  // Not committed: the folder still has only node 0's files and the marker rank 0 wrote.
  EXPECT_FALSE(CheckpointStore(LocalFs(), n0.folder).Verify(100).ok());

  // With only answering peers that lack the files, it is NotFound.
  auto r2 = Reconcile(LocalFs(), n0.folder, m, {other.peer}, kSecret);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kNotFound) << r2.status().ToString();
}

TEST_F(CheckpointSyncTest, BytesThatDoNotMatchTheManifestAreNeverWritten) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  // Node 1's copy of one of its files differs from what the manifest vouches for.
  const std::string name = "model-rank00003-of-00004.safetensors";
  CheckpointStore s1(LocalFs(), n1.folder);
  ASSERT_TRUE(ckpt::FaultyFileSystem::FlipByte(LocalFs(), JoinPath(s1.StepDir(100), name), 9).ok());
  auto r = Reconcile(LocalFs(), n0.folder, m, {n1.peer}, kSecret);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node 1 (folder): CRC-32"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(
      LocalFs().Exists(JoinPath(CheckpointStore(LocalFs(), n0.folder).StepDir(100), name)));
}

#ifdef TENAX_WITH_HTTPLIB
struct RawAnswer {
  int status = 0;
  std::string body;
};
// A request as any HTTP client could send it, without the client calls' own checks.
RawAnswer Raw(const Node& n, const std::string& method, const std::string& path,
              const httplib::Headers& headers, const std::string& body = "") {
  httplib::Client c("127.0.0.1", n.server->port());
  c.set_url_encode(false);
  auto r = method == "GET" ? c.Get(path, headers)
                           : c.Put(path, headers, body, "application/octet-stream");
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

TEST_F(CheckpointSyncTest, AWrongOrMissingSecretGets403AndNothingIsServedOrStored) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  const std::string name = "model-rank00001-of-00004.safetensors";
  const std::string content = Bytes("m1", 4096);

  auto wrong = FetchCheckpointFile(n0.peer, "job-secret-4f1c2a9f", 100, name);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("HTTP 403"), std::string::npos)
      << wrong.status().ToString();
  EXPECT_EQ(wrong.status().message().find(content.substr(0, 16)), std::string::npos);
  // A prefix of the secret, the secret with more after it, and no header at all.
  for (const httplib::Headers& h :
       {httplib::Headers{{kJobSecretHeader, "job-secret"}},
        httplib::Headers{{kJobSecretHeader, std::string(kSecret) + "x"}}, httplib::Headers{}}) {
    RawAnswer a = Raw(n0, "GET", "/v1/steps/100/files/" + name, h);
    EXPECT_EQ(a.status, 403);
    EXPECT_LT(a.body.size(), 100u);
    EXPECT_EQ(a.body.find(content.substr(0, 16)), std::string::npos);
  }

  // Pushes: with a wrong secret, and without one on the wire; the replica store stays empty.
  Status push = PushReplicaFile(n0.peer, "not-the-secret", 100, name, content);
  EXPECT_EQ(push.code(), StatusCode::kInvalidArgument) << push.ToString();
  EXPECT_NE(push.message().find("HTTP 403"), std::string::npos) << push.ToString();
  RawAnswer put = Raw(n0, "PUT", "/v1/steps/100/replicas/" + name,
                      {{"X-Tenax-Crc32", ckpt::CrcHex(Crc32(content))}}, content);
  EXPECT_EQ(put.status, 403);
  EXPECT_TRUE(ListAll(n0.replicas).empty());
  EXPECT_FALSE(n0.server->replica_step().has_value());
  EXPECT_EQ(n0.server->refused(), 6);

  // An empty secret is refused before anything is sent, and a server needs one.
  EXPECT_EQ(FetchCheckpointFile(n0.peer, "", 100, name).status().code(),
            StatusCode::kInvalidArgument);
  FileServerOptions o;
  o.checkpoint_folder = tmp_ / "x";
  o.replica_root = tmp_ / "y";
  EXPECT_FALSE(CheckpointFileServer::Start(o).ok());
  // A node of another job (another secret) cannot reconcile from this one.
  auto r = Reconcile(LocalFs(), n1.folder, m, {n0.peer}, "other-job-secret");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("HTTP 403"), std::string::npos);
}

TEST_F(CheckpointSyncTest, PathTraversalAndBadNamesAreRefused) {
  Node n0 = StartNode("node 0");
  // Something worth stealing beside the checkpoint folder, and a replica root to escape from.
  ASSERT_TRUE(LocalFs().WriteFileAtomic(tmp_ / "node 0/secret.txt", "private key").ok());
  ASSERT_TRUE(LocalFs().CreateDirs(n0.folder + "/step_00000001").ok());
  const httplib::Headers auth = {{kJobSecretHeader, kSecret}};
  for (const std::string name :
       {"..%2F..%2Fsecret.txt", "%2E%2E%2F%2E%2E%2Fsecret.txt", "..", "%2E%2E", ".hidden", "a%00b",
        "manifest.json", "COMMITTED", "x.tmp.1", "", "sub/file"}) {
    RawAnswer a = Raw(n0, "GET", "/v1/steps/1/files/" + name, auth);
    EXPECT_TRUE(a.status == 400 || a.status == 404) << name << " -> " << a.status;
    EXPECT_EQ(a.body.find("private key"), std::string::npos) << name;
    RawAnswer p =
        Raw(n0, "PUT", "/v1/steps/1/replicas/" + name,
            {{kJobSecretHeader, kSecret}, {"X-Tenax-Crc32", ckpt::CrcHex(Crc32("evil"))}}, "evil");
    EXPECT_TRUE(p.status == 400 || p.status == 404) << name << " -> " << p.status;
  }
  for (const std::string step : {"abc", "-1", "1e3", "1234567890123456789"}) {
    EXPECT_EQ(Raw(n0, "GET", "/v1/steps/" + step + "/files/a.bin", auth).status, 400) << step;
  }
  // A link planted in a step folder is not followed.
  ASSERT_EQ(::symlink((tmp_ / "node 0/secret.txt").c_str(),
                      (n0.folder + "/step_00000001/link.bin").c_str()),
            0);
  RawAnswer link = Raw(n0, "GET", "/v1/steps/1/files/link.bin", auth);
  EXPECT_EQ(link.status, 404);
  EXPECT_EQ(link.body.find("private key"), std::string::npos);
  ASSERT_TRUE(LocalFs().RemoveAll(n0.folder + "/step_00000001/link.bin").ok());
  // Nothing was written anywhere under the node's folders.
  EXPECT_TRUE(ListAll(n0.replicas).empty());
  EXPECT_EQ(ListAll(tmp_ / "node 0"), (std::vector<std::string>{"ckpt", "secret.txt", "shm"}));
  // The client calls refuse such names before sending.
  EXPECT_EQ(FetchCheckpointFile(n0.peer, kSecret, 1, "../secret.txt").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PushReplicaFile(n0.peer, kSecret, 1, "..", "x").code(), StatusCode::kInvalidArgument);
  // A body whose CRC does not match its header is not stored.
  RawAnswer bad_crc = Raw(n0, "PUT", "/v1/steps/1/replicas/a.bin",
                          {{kJobSecretHeader, kSecret}, {"X-Tenax-Crc32", "00000000"}}, "data");
  EXPECT_EQ(bad_crc.status, 400);
  EXPECT_TRUE(ListAll(n0.replicas).empty());
}
#endif  // TENAX_WITH_HTTPLIB

TEST_F(CheckpointSyncTest, TheReplicaStoreKeepsTheNewestTwoSteps) {
  Node holder = StartNode("holder");
  const std::string a = Bytes("a", 3000), b = Bytes("b", 10);
  ASSERT_TRUE(PushReplicaFile(holder.peer, kSecret, 100, "a.bin", a).ok());
  ASSERT_TRUE(PushReplicaFile(holder.peer, kSecret, 100, "b.bin", b).ok());
  EXPECT_EQ(holder.server->replica_step(), std::optional<int64_t>(100));
  // A newer step arriving keeps the one before (complete) until a step after it arrives.
  ASSERT_TRUE(PushReplicaFile(holder.peer, kSecret, 200, "a.bin", a).ok());
  EXPECT_EQ(holder.server->replica_step(), std::optional<int64_t>(200));
  EXPECT_TRUE(LocalFs().Exists(ReplicaPath(holder.replicas, 100, "b.bin")));
  auto older = FetchCheckpointFile(holder.peer, kSecret, 100, "b.bin");
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_TRUE(older->bytes == b);
  ASSERT_TRUE(PushReplicaFile(holder.peer, kSecret, 300, "a.bin", a).ok());
  EXPECT_EQ(holder.server->replica_step(), std::optional<int64_t>(300));
  EXPECT_FALSE(LocalFs().Exists(ReplicaPath(holder.replicas, 100, "b.bin")));
  EXPECT_FALSE(LocalFs().Exists(JoinPath(holder.replicas, ckpt::StepDirName(100))));
  EXPECT_TRUE(LocalFs().Exists(ReplicaPath(holder.replicas, 200, "a.bin")));
  // A stale push of an older step is refused.
  Status stale = PushReplicaFile(holder.peer, kSecret, 200, "b.bin", b);
  EXPECT_EQ(stale.code(), StatusCode::kInvalidArgument) << stale.ToString();
  EXPECT_NE(stale.message().find("HTTP 409"), std::string::npos) << stale.ToString();
  EXPECT_FALSE(LocalFs().Exists(ReplicaPath(holder.replicas, 200, "b.bin")));
  // Served from the replica store (the holder's own folder has no step 300).
  auto got = FetchCheckpointFile(holder.peer, kSecret, 300, "a.bin");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->bytes == a);
  EXPECT_EQ(got->source, "replica");
  EXPECT_EQ(FetchCheckpointFile(holder.peer, kSecret, 100, "a.bin").status().code(),
            StatusCode::kNotFound);

  // Replicas outlive the server (they live in RAM files), and a restarted server knows them.
  const std::string replicas = holder.replicas;
  holder.server.reset();
  FileServerOptions o;
  o.checkpoint_folder = holder.folder;
  o.replica_root = replicas;
  o.secret = kSecret;
  auto restarted = CheckpointFileServer::Start(o);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  EXPECT_EQ((*restarted)->replica_step(), std::optional<int64_t>(300));
  // After a resume from step 100, the job drops the newer replicas and pushes step 100 again.
  ASSERT_TRUE((*restarted)->DropReplicasNewerThan(100).ok());
  EXPECT_FALSE((*restarted)->replica_step().has_value());
  EXPECT_TRUE(ListAll(replicas).empty());
  const FilePeer again{"holder", (*restarted)->endpoint()};
  EXPECT_TRUE(PushReplicaFile(again, kSecret, 100, "b.bin", b).ok());
  EXPECT_EQ((*restarted)->replica_step(), std::optional<int64_t>(100));
}

TEST_F(CheckpointSyncTest, PushReplicasSkipsFilesThatDoNotMatchTheCommit) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  const std::string damaged = "model-rank00002-of-00004.safetensors";
  ASSERT_TRUE(
      ckpt::FaultyFileSystem::FlipByte(
          LocalFs(), JoinPath(CheckpointStore(LocalFs(), n1.folder).StepDir(100), damaged), 0)
          .ok());
  PushOptions o;
  o.only = {damaged, "optimizer-rank00002-of-00004.safetensors", "train_state.json"};
  auto p = PushReplicas(LocalFs(), n1.folder, m, n0.peer, kSecret, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // train_state.json is node 0's: not in node 1's folder, so not pushed.
  EXPECT_EQ(p->pushed, std::vector<std::string>{"optimizer-rank00002-of-00004.safetensors"});
  EXPECT_EQ(p->skipped_damaged, std::vector<std::string>{damaged});
  EXPECT_FALSE(LocalFs().Exists(ReplicaPath(n0.replicas, 100, damaged)));
}

// A push in flight is finished, then only the newest step submitted meanwhile is pushed: commits
// faster than pushes still leave a whole replica in the peer's memory.
TEST_F(CheckpointSyncTest, TheReplicaPusherFinishesItsPushThenPushesOnlyTheNewestStep) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  CheckpointStore s0(LocalFs(), n0.folder);
  for (int64_t step : {100, 200, 300}) ASSERT_TRUE(s0.WriteFiles(step, Node0Files()).ok());

  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  std::vector<std::pair<int64_t, Status>> done;
  PushOptions o;
  // Holds the first push at its first file until the test has queued newer steps.
  o.cancelled = [&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!entered) {
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    return false;
  };
  ReplicaPusher pusher(LocalFs(), n0.folder, kSecret, o,
                       [&](int64_t step, const Result<PushReport>& r) {
                         std::lock_guard<std::mutex> lock(mu);
                         done.emplace_back(step, r.status());
                         cv.notify_all();
                       });
  pusher.Submit(MakeManifest(100, Node0Files()), n1.peer);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; }));
  }
  pusher.Submit(MakeManifest(200, Node0Files()), n1.peer);
  pusher.Submit(MakeManifest(300, Node0Files()), n1.peer);
  pusher.Submit(MakeManifest(250, Node0Files()), n1.peer);  // older than the waiting 300
  {
    std::unique_lock<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done.size() >= 2; }));
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].first, 100);  // not cancelled by the newer steps submitted during it
  EXPECT_TRUE(done[0].second.ok()) << done[0].second.ToString();
  EXPECT_EQ(done[1].first, 300);  // 200 was replaced while waiting; 250 was older than 300
  EXPECT_TRUE(done[1].second.ok()) << done[1].second.ToString();
  EXPECT_EQ(n1.server->replica_step(), std::optional<int64_t>(300));
  for (int64_t step : {100, 300}) {
    for (const auto& [name, bytes] : Node0Files()) {
      auto got = LocalFs().ReadFile(ReplicaPath(n1.replicas, step, name));
      ASSERT_TRUE(got.ok()) << step << " " << name;
      EXPECT_TRUE(*got == bytes) << step << " " << name;
    }
  }
  EXPECT_EQ(ListAll(n1.replicas),
            (std::vector<std::string>{ckpt::StepDirName(100), ckpt::StepDirName(300)}));
}

TEST_F(CheckpointSyncTest, AFolderCommittedWithAnotherManifestIsMovedAsideAndItsFilesReused) {
  Node n0 = StartNode("node 0"), n1 = StartNode("node 1");
  const Manifest m = WriteSpreadStep(n0, n1);
  // A rank of an old generation committed step 100 on node 1 with its own idea of the step.
  Manifest stale = MakeManifest(100, Node1Files());
  stale.created_unix = 1600000000;
  CheckpointStore s1(LocalFs(), n1.folder);
  ASSERT_TRUE(s1.CommitManifest(stale).ok());

  auto r = Reconcile(LocalFs(), n1.folder, m, {n0.peer}, kSecret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->set_aside, s1.StepDir(100) + ".unaccepted");
  EXPECT_TRUE(r->committed);
  for (const auto& f : Node1Files()) {
    EXPECT_EQ(Sources(*r).at(f.first), "set-aside " + r->set_aside);
  }
  ExpectComplete(n1.folder, 100, AllFiles());
  // Nothing of the stale commit was deleted.
  EXPECT_TRUE(LocalFs().Exists(JoinPath(r->set_aside, ckpt::kCommitFile)));
  for (const auto& f : Node1Files()) EXPECT_TRUE(LocalFs().Exists(JoinPath(r->set_aside, f.first)));
}

// No server needed from here on.

// Commits steps (one file "w.bin" each) and records each commit's manifest CRC.
void CommitSteps(CheckpointStore& store, const std::vector<int64_t>& steps,
                 std::map<int64_t, uint32_t>* crcs) {
  for (int64_t step : steps) {
    ASSERT_TRUE(store.Save(step, {{"w.bin", Bytes("w" + std::to_string(step), 100)}}, {}, {}).ok());
    auto m = ckpt::ReadCommittedManifest(LocalFs(), store, step);
    ASSERT_TRUE(m.ok());
    (*crcs)[step] = ckpt::ManifestCrc(*m);
  }
}

TEST(CheckpointSyncFolderTest, UnacceptedCommitsAreMovedAsideNeverDeleted) {
  tenax::testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  CheckpointStore store(LocalFs(), folder);
  std::map<int64_t, uint32_t> crcs;
  ASSERT_NO_FATAL_FAILURE(CommitSteps(store, {50, 100, 150, 200}, &crcs));
  // The job accepted 100 as committed here, 150 with another manifest, and never 200 (nor 50,
  // whose record is older than the job keeps: below min_step, left alone).
  const std::map<int64_t, uint32_t> accepted = {{100, crcs[100]}, {150, crcs[150] ^ 1}};
  auto moved = SetAsideUnacceptedCommits(LocalFs(), folder, accepted, /*min_step=*/60);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, (std::vector<std::string>{store.StepDir(150) + ".unaccepted",
                                              store.StepDir(200) + ".unaccepted"}));
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{50, 100}));
  EXPECT_TRUE(store.Verify(100).ok());
  for (const auto& dir : *moved) EXPECT_TRUE(LocalFs().Exists(JoinPath(dir, "w.bin")));
  // Committing 200 again and setting it aside again does not overwrite the first one.
  ASSERT_TRUE(store.Save(200, {{"w.bin", "again"}}, {}, {}).ok());
  auto again = SetAsideUnacceptedCommits(LocalFs(), folder, accepted, 60);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, std::vector<std::string>{store.StepDir(200) + ".unaccepted.1"});
}

// The job dropped 100 (lost with a node) and 150 (but this folder's 150 has another manifest:
// not the job's, left alone); 50 and 200 were never dropped.
TEST(CheckpointSyncFolderTest, DroppedCommitsAreMovedAsideOthersKept) {
  tenax::testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  CheckpointStore store(LocalFs(), folder);
  std::map<int64_t, uint32_t> crcs;
  ASSERT_NO_FATAL_FAILURE(CommitSteps(store, {50, 100, 150, 200}, &crcs));
  const std::map<int64_t, uint32_t> dropped = {{100, crcs[100]}, {150, crcs[150] ^ 1}};
  auto moved = SetAsideDroppedCommits(LocalFs(), folder, dropped);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, std::vector<std::string>{store.StepDir(100) + ".unaccepted"});
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{50, 150, 200}));
  EXPECT_TRUE(LocalFs().Exists(JoinPath((*moved)[0], "w.bin")));
  auto none = SetAsideDroppedCommits(LocalFs(), folder, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(CheckpointSyncFolderTest, ManifestCrcMatchesTheMarkerAndSurvivesAJsonRoundTrip) {
  tenax::testing::TempDir tmp;
  Manifest m = MakeManifest(42, AllFiles());
  m.layout = {{"lr", 3.0e-4}, {"ratio", 0.1}, {"name", "llama \u00e9\u4e2d"}, {"tp", 2}};
  m.extra = {{"loss", 2.718281828459045}, {"tokens", int64_t{1} << 40}};
  CheckpointStore store(LocalFs(), tmp / "ckpt");
  ASSERT_TRUE(store.CommitManifest(m).ok());
  auto marker = LocalFs().ReadFile(JoinPath(store.StepDir(42), ckpt::kCommitFile));
  ASSERT_TRUE(marker.ok());
  EXPECT_EQ(*marker, ckpt::CommitMarkerText(ckpt::ManifestCrc(m)));
  // As an agent gets it from etcd: the manifest as JSON text, parsed back.
  auto parsed = Manifest::Parse(m.ToJson().dump(), "etcd commit record");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(ckpt::ManifestCrc(*parsed), ckpt::ManifestCrc(m));
  m.created_unix += 1;
  EXPECT_NE(ckpt::ManifestCrc(*parsed), ckpt::ManifestCrc(m));
}

TEST(CheckpointSyncFolderTest, ACompleteUncommittedFolderIsCommittedWithoutPeers) {
  tenax::testing::TempDir tmp;
  const std::string folder = tmp / "lone";
  ASSERT_TRUE(CheckpointStore(LocalFs(), folder).WriteFiles(7, AllFiles()).ok());
  auto r = Reconcile(LocalFs(), folder, MakeManifest(7, AllFiles()), {}, kSecret);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->committed);
  EXPECT_EQ(r->fetched(), 0);
  ExpectComplete(folder, 7, AllFiles());
}

TEST(CheckpointSyncFolderTest, AManifestWithABadNameIsRefused) {
  tenax::testing::TempDir tmp;
  Manifest m = MakeManifest(1, {{"../escape", "x"}});
  auto r = Reconcile(LocalFs(), tmp / "ckpt", m, {}, kSecret);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_FALSE(LocalFs().Exists(tmp / "ckpt"));
}

}  // namespace
}  // namespace tenax::transfer
