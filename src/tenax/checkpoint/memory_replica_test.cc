// Memory replicas: each rank's files kept twice in a tmpfs-like folder (own and peer copy),
// trusted only when they match the committed manifest, and used to repair a rank's files on
// storage after its own copy and its files are lost ("restarted processes" = fresh instances).
#include "tenax/checkpoint/memory_replica.h"

#include <gtest/gtest.h>

#include "tenax/checkpoint/testing_fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::ckpt {
namespace {

constexpr int kWorld = 4;

NamedFiles RankFiles(int rank, int64_t step) {
  NamedFiles f = {{"model-rank" + std::to_string(rank),
                   std::string(2000 + rank, static_cast<char>('a' + rank + step))}};
  if (rank == 0) f.push_back({"train_state.json", "{\"step\": " + std::to_string(step) + "}"});
  return f;
}

std::vector<std::string> Expected() {
  std::vector<std::string> e;
  for (int r = 0; r < kWorld; ++r) e.push_back("model-rank" + std::to_string(r));
  e.push_back("train_state.json");
  return e;
}

// Every rank writes its files and replicas; rank 0 commits (the protocol's result, in one
// process).
void SaveAll(CheckpointStore& store, const std::string& root, int64_t step) {
  ASSERT_TRUE(store.Prepare(step).ok());
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(store.WriteFiles(step, RankFiles(r, step)).ok());
    MemoryReplica replica(LocalFs(), root, r, kWorld);
    ASSERT_TRUE(replica.Put(step, RankFiles(r, step)).ok());
  }
  ASSERT_TRUE(store.Commit(step, {}, {}, Expected(), kWorld).ok());
}

TEST(MemoryReplicaTest, KeepsOwnAndPeerCopies) {
  testing::TempDir tmp;
  const std::string root = tmp / "shm";
  MemoryReplica r3(LocalFs(), root, 3, kWorld);
  EXPECT_EQ(r3.peer(), 0);  // wraps around
  ASSERT_TRUE(r3.Put(10, RankFiles(3, 10)).ok());
  EXPECT_TRUE(LocalFs().Exists(root + "/holder-00003/owner-00003-step_00000010.replica"));
  EXPECT_TRUE(LocalFs().Exists(root + "/holder-00000/owner-00003-step_00000010.replica"));
  // Newest two steps kept, older dropped from both holders.
  ASSERT_TRUE(r3.Put(20, RankFiles(3, 20)).ok());
  ASSERT_TRUE(r3.Put(30, RankFiles(3, 30)).ok());
  EXPECT_FALSE(LocalFs().Exists(r3.ReplicaPath(3, 3, 10)));
  EXPECT_FALSE(LocalFs().Exists(r3.ReplicaPath(0, 3, 10)));
  EXPECT_TRUE(LocalFs().Exists(r3.ReplicaPath(0, 3, 20)));
  EXPECT_TRUE(LocalFs().Exists(r3.ReplicaPath(3, 3, 30)));
}

TEST(MemoryReplicaTest, GetOnlyReturnsCopiesMatchingTheCommittedManifest) {
  testing::TempDir tmp;
  const std::string root = tmp / "shm";
  CheckpointStore store(LocalFs(), tmp / "ckpt");
  SaveAll(store, root, 5);
  Result<Manifest> m = ReadCommittedManifest(LocalFs(), store, 5);
  ASSERT_TRUE(m.ok()) << m.status().message();
  MemoryReplica r1(LocalFs(), root, 1, kWorld);  // a restarted rank 1
  Result<NamedFiles> files = r1.Get(5, *m);
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(*files, RankFiles(1, 5));
  // A newer copy (a save that never committed) does not pass for step 5's files.
  ASSERT_TRUE(r1.Put(6, RankFiles(1, 6)).ok());
  EXPECT_EQ(r1.Get(6, *m).status().code(), StatusCode::kInvalidArgument);
  // A copy whose bytes differ from what was committed is refused.
  ASSERT_TRUE(r1.Put(5, {{"model-rank1", "not what was committed"}}).ok());
  Result<NamedFiles> wrong = r1.Get(5, *m);
  EXPECT_EQ(wrong.status().code(), StatusCode::kNotFound);
  EXPECT_NE(wrong.status().message().find("differs from the committed checkpoint"),
            std::string::npos)
      << wrong.status().message();
}

TEST(MemoryReplicaTest, RepairsALostRanksStorageFromThePeerCopy) {
  testing::TempDir tmp;
  const std::string root = tmp / "shm";
  CheckpointStore store(LocalFs(), tmp / "ckpt");
  SaveAll(store, root, 8);
  // Rank 2's node is lost: its own RAM copy is gone, and its file on storage is damaged.
  ASSERT_TRUE(LocalFs().RemoveAll(root + "/holder-00002").ok());
  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), store.StepDir(8) + "/model-rank2", 100).ok());
  ASSERT_FALSE(store.Verify(8).ok());

  for (int r = 0; r < kWorld; ++r) {
    MemoryReplica replica(LocalFs(), root, r, kWorld);
    Result<std::vector<std::string>> repaired = replica.RepairStorage(store, 8);
    // Rank 2 restores from the copy rank 3 holds; rank 1 lost only its peer copy (held by
    // rank 2) and still has its own, and its storage is fine.
    ASSERT_TRUE(repaired.ok()) << "rank " << r << ": " << repaired.status().message();
    EXPECT_EQ(*repaired,
              r == 2 ? std::vector<std::string>{"model-rank2"} : std::vector<std::string>{});
  }
  EXPECT_TRUE(store.Verify(8).ok());  // the newest checkpoint is whole again: no rollback
  Result<int64_t> latest = store.LatestGood();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 8);
}

TEST(MemoryReplicaTest, NoCopyMeansNotFoundAndStorageUntouched) {
  testing::TempDir tmp;
  CheckpointStore store(LocalFs(), tmp / "ckpt");
  SaveAll(store, tmp / "shm", 3);
  MemoryReplica replica(LocalFs(), tmp / "other-shm", 0, kWorld);
  Result<std::vector<std::string>> repaired = replica.RepairStorage(store, 3);
  EXPECT_EQ(repaired.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.Verify(3).ok());
  // An uncommitted step has no manifest to trust.
  EXPECT_FALSE(replica.RepairStorage(store, 4).ok());
}

TEST(MemoryReplicaTest, SingleRankKeepsOneCopy) {
  testing::TempDir tmp;
  MemoryReplica solo(LocalFs(), tmp / "shm", 0, 1);
  EXPECT_EQ(solo.peer(), 0);
  ASSERT_TRUE(solo.Put(1, RankFiles(0, 1)).ok());
  Result<std::vector<std::string>> names = LocalFs().ListDir(tmp / "shm");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"holder-00000"});
}

// Restore from RAM: every file of the committed checkpoint from the copies (any holder); a lost
// or damaged copy is covered by the other holder's; with both copies of a rank gone, NotFound
// names the file; copies of a different save of the same step are never used.
TEST(MemoryReplicaTest, GatherCollectsTheWholeCheckpointFromCopies) {
  testing::TempDir tmp;
  const std::string root = tmp / "shm";
  CheckpointStore store(LocalFs(), tmp / "ckpt");
  SaveAll(store, root, 5);
  Result<Manifest> m = ReadCommittedManifest(LocalFs(), store, 5);
  ASSERT_TRUE(m.ok()) << m.status().message();
  MemoryReplica r1(LocalFs(), root, 1, kWorld);
  auto want = [&] {
    std::map<std::string, std::string> all;
    for (int r = 0; r < kWorld; ++r) {
      for (auto& [name, bytes] : RankFiles(r, 5)) all[name] = bytes;
    }
    return all;
  }();
  Result<std::map<std::string, std::string>> got = r1.Gather(5, *m);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, want);
  // Rank 2's own copy lost, its peer copy (held by 3) damaged: the peer copy fails its CRC...
  ASSERT_TRUE(LocalFs().RemoveAll(r1.ReplicaPath(2, 2, 5)).ok());
  Result<std::string> blob = LocalFs().ReadFile(r1.ReplicaPath(3, 2, 5));
  ASSERT_TRUE(blob.ok());
  std::string damaged = *blob;
  damaged[damaged.size() - 10] ^= 0x20;
  ASSERT_TRUE(LocalFs().WriteFileAtomic(r1.ReplicaPath(3, 2, 5), damaged).ok());
  got = r1.Gather(5, *m);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("model-rank2"), std::string::npos)
      << got.status().message();
  // ... and a good copy back in one holder is enough.
  ASSERT_TRUE(LocalFs().WriteFileAtomic(r1.ReplicaPath(3, 2, 5), *blob).ok());
  got = r1.Gather(5, *m);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, want);
  // Copies of another save of step 5 (different bytes) do not match the committed manifest.
  MemoryReplica r0(LocalFs(), root, 0, kWorld);
  NamedFiles other = RankFiles(0, 5);
  other[0].second[0] = 'Z';
  ASSERT_TRUE(r0.Put(5, other).ok());
  got = r1.Gather(5, *m);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("model-rank0"), std::string::npos);
  // DropHeld frees a holder's folder, and the root with the last one.
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(MemoryReplica(LocalFs(), root, r, kWorld).DropHeld().ok());
  }
  EXPECT_FALSE(LocalFs().Exists(root));
}

}  // namespace
}  // namespace tenax::ckpt
