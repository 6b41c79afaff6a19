// AsyncCheckpointWriter: saves commit and verify in the background, one write in flight, errors
// are sticky, a crash at any filesystem operation of a background save leaves older checkpoints
// intact, and the marker protocol commits a multi-rank checkpoint only once every rank wrote.
#include "tenax/checkpoint/async_writer.h"

#include <gtest/gtest.h>

#include "tenax/checkpoint/manifest.h"
#include "tenax/checkpoint/store.h"
#include "tenax/checkpoint/testing_fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::ckpt {
namespace {

using Files = std::vector<std::pair<std::string, std::string>>;
using std::chrono::milliseconds;

Files FilesFor(int64_t step) {
  return {{"model.safetensors", std::string(3000, static_cast<char>('a' + step))},
          {"train_state.json", "{\"step\": " + std::to_string(step) + "}"}};
}

CheckpointSnapshot Single(int64_t step) {
  CheckpointSnapshot s;
  s.step = step;
  s.files = FilesFor(step);
  s.expected_files = {"model.safetensors", "train_state.json"};
  s.layout = {{"world_size", 1}};
  s.extra = {{"kind", "training"}};
  return s;
}

// Rank `rank` of 2: each writes one shard; rank 0 also writes train_state.json.
CheckpointSnapshot TwoRank(int64_t step, int rank, const std::string& attempt = "0") {
  CheckpointSnapshot s;
  s.step = step;
  s.rank = rank;
  s.world_size = 2;
  s.attempt = attempt;
  s.files = {{"model-rank" + std::to_string(rank), std::string(1000 + rank, 'x')}};
  if (rank == 0) s.files.push_back({"train_state.json", "{}"});
  s.expected_files = {"model-rank0", "model-rank1", "train_state.json"};
  return s;
}

TEST(AsyncWriterTest, CommitsAndVerifiesInTheBackground) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  {
    AsyncCheckpointWriter w(LocalFs(), folder);
    ASSERT_TRUE(w.Submit(Single(10)).ok());
    ASSERT_TRUE(w.Wait().ok());
    EXPECT_FALSE(w.busy());
    ASSERT_TRUE(w.last_committed().has_value());
    EXPECT_EQ(*w.last_committed(), 10);
    std::vector<CompletedSave> done = w.TakeCompleted();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].step, 10);
    EXPECT_TRUE(done[0].committed);
    EXPECT_TRUE(w.TakeCompleted().empty());  // handed out once
  }
  CheckpointStore store(LocalFs(), folder);
  ASSERT_TRUE(store.Verify(10).ok());
  Result<LoadedCheckpoint> loaded = store.Load(10);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->files.at("model.safetensors"), FilesFor(10)[0].second);
  EXPECT_EQ(loaded->manifest.extra.at("kind"), "training");
  EXPECT_EQ(loaded->manifest.world_size, 1);
}

TEST(AsyncWriterTest, SecondSubmitWaitsForTheFirstAndBothCommitInOrder) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  AsyncCheckpointWriter w(LocalFs(), folder);
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(w.Submit(Single(step)).ok());
  ASSERT_TRUE(w.Wait().ok());
  std::vector<CompletedSave> done = w.TakeCompleted();
  ASSERT_EQ(done.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(done[i].step, i + 1);
  CheckpointStore store(LocalFs(), folder);
  Result<std::vector<int64_t>> committed = store.ListCommitted();
  ASSERT_TRUE(committed.ok());
  EXPECT_EQ(*committed, (std::vector<int64_t>{1, 2, 3}));
}

TEST(AsyncWriterTest, BeforeWriteHookRunsOnTheWriterAndCanFailTheSave) {
  testing::TempDir tmp;
  const std::string root = tmp / "shm";
  std::vector<int64_t> seen;
  AsyncWriterOptions o;
  o.before_write = [&](const CheckpointSnapshot& s) -> Status {
    seen.push_back(s.step);  // read by the test only after Wait(): ordered by the writer's mutex
    if (s.step == 2) return IoError("replica folder full");
    return Status::Ok();
  };
  AsyncCheckpointWriter w(LocalFs(), tmp / "ckpt", o);
  ASSERT_TRUE(w.Submit(Single(1)).ok());
  ASSERT_TRUE(w.Wait().ok());
  ASSERT_TRUE(w.Submit(Single(2)).ok());
  Status st = w.Wait();
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("replica folder full"), std::string::npos) << st.message();
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(LocalFs().Exists(tmp / "ckpt/step_00000002"));  // nothing written for step 2
}

TEST(AsyncWriterTest, PrunesAfterEachVerifiedCommit) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  AsyncWriterOptions o;
  o.keep_latest = 2;
  AsyncCheckpointWriter w(LocalFs(), folder, o);
  for (int64_t step : {1, 2, 3, 4}) ASSERT_TRUE(w.Submit(Single(step)).ok());
  ASSERT_TRUE(w.Wait().ok());
  CheckpointStore store(LocalFs(), folder);
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{3, 4}));
}

TEST(AsyncWriterTest, WriteErrorIsStickyAndNeverLost) {
  testing::TempDir tmp;
  FaultyFileSystem fs(LocalFs());
  fs.FailWriteAt(0);
  AsyncCheckpointWriter w(fs, tmp / "ckpt");
  ASSERT_TRUE(w.Submit(Single(5)).ok());  // the failure happens later, in the background
  Status st = w.Wait();
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("step 5"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("injected write failure"), std::string::npos) << st.message();
  // The next request reports the same error and is not taken.
  Status again = w.Submit(Single(6));
  EXPECT_EQ(again.code(), StatusCode::kIoError);
  EXPECT_EQ(w.Wait().code(), StatusCode::kIoError);
  EXPECT_FALSE(w.last_committed().has_value());
  EXPECT_FALSE(LocalFs().Exists(tmp / "ckpt/step_00000006"));
  EXPECT_FALSE(LocalFs().Exists(tmp / "ckpt/step_00000005/COMMITTED"));
}

TEST(AsyncWriterTest, RejectsMalformedSnapshots) {
  testing::TempDir tmp;
  AsyncCheckpointWriter w(LocalFs(), tmp / "ckpt");
  CheckpointSnapshot s = Single(1);
  s.expected_files = {"train_state.json"};  // model.safetensors is not listed
  EXPECT_EQ(w.Submit(s).code(), StatusCode::kInvalidArgument);
  CheckpointSnapshot bad_rank = TwoRank(1, 2);
  EXPECT_EQ(w.Submit(bad_rank).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.Wait().ok());  // rejected requests are not write errors
}

// A crash (the process dying) at every mutating operation of a background save: a restarted
// process finds step 1 intact and step 2 either absent or complete.
TEST(AsyncWriterTest, CrashAtAnyOperationNeverHarmsOlderCheckpoints) {
  std::vector<std::string> ops;
  {
    testing::TempDir tmp;
    CheckpointStore seed(LocalFs(), tmp / "ckpt");
    ASSERT_TRUE(seed.Save(1, FilesFor(1), {}, {}).ok());
    FaultyFileSystem counting(LocalFs());
    AsyncCheckpointWriter w(counting, tmp / "ckpt");
    ASSERT_TRUE(w.Submit(Single(2)).ok());
    ASSERT_TRUE(w.Wait().ok());
    ops = counting.ops();
  }
  ASSERT_GE(ops.size(), 5u);
  int committed_runs = 0;
  for (size_t crash = 0; crash < ops.size(); ++crash) {
    SCOPED_TRACE("crash at " + ops[crash]);
    testing::TempDir tmp;
    const std::string folder = tmp / "ckpt";
    CheckpointStore seed(LocalFs(), folder);
    ASSERT_TRUE(seed.Save(1, FilesFor(1), {}, {}).ok());
    {
      FaultyFileSystem fs(LocalFs());
      fs.CrashAt(static_cast<int64_t>(crash));
      AsyncCheckpointWriter w(fs, folder);
      ASSERT_TRUE(w.Submit(Single(2)).ok());
      Status st = w.Wait();
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("simulated crash"), std::string::npos) << st.message();
      EXPECT_FALSE(w.last_committed().has_value());  // never reported as committed
    }
    CheckpointStore restarted(LocalFs(), folder);
    ASSERT_TRUE(restarted.Verify(1).ok());
    Result<int64_t> latest = restarted.LatestGood();
    ASSERT_TRUE(latest.ok());
    if (*latest == 2) {
      ++committed_runs;  // crashed after COMMITTED: the checkpoint is complete
      EXPECT_TRUE(restarted.Verify(2).ok());
    } else {
      EXPECT_EQ(*latest, 1);
    }
    // A retry in the restarted process succeeds (or finds step 2 already committed).
    if (*latest == 1) {
      AsyncCheckpointWriter retry(LocalFs(), folder);
      ASSERT_TRUE(retry.Submit(Single(2)).ok());
      ASSERT_TRUE(retry.Wait().ok());
      EXPECT_TRUE(restarted.Verify(2).ok());
    }
  }
  // Only the last operations (the folder syncs after COMMITTED) can leave step 2 committed.
  EXPECT_LE(committed_runs, 2);
}

TEST(AsyncWriterTest, MultiRankCommitsOnlyAfterEveryRankWrote) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  AsyncWriterOptions o;
  o.poll_interval = milliseconds(1);
  AsyncCheckpointWriter rank0(LocalFs(), folder, o);
  AsyncCheckpointWriter rank1(LocalFs(), folder, o);
  ASSERT_TRUE(rank0.Submit(TwoRank(7, 0)).ok());
  // Rank 0 cannot commit before rank 1 wrote: its model-rank1 file does not exist yet.
  EXPECT_FALSE(LocalFs().Exists(folder + "/step_00000007/COMMITTED"));
  EXPECT_TRUE(rank0.busy());
  ASSERT_TRUE(rank1.Submit(TwoRank(7, 1)).ok());
  ASSERT_TRUE(rank1.Wait().ok());
  ASSERT_TRUE(rank0.Wait().ok());
  EXPECT_EQ(*rank0.last_committed(), 7);
  EXPECT_FALSE(rank1.last_committed().has_value());  // rank 1 only wrote its part
  CheckpointStore store(LocalFs(), folder);
  Result<LoadedCheckpoint> loaded = store.Load(7);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->manifest.world_size, 2);
  EXPECT_EQ(loaded->files.size(), 3u);
  EXPECT_EQ(loaded->files.at("model-rank1"), std::string(1001, 'x'));
}

TEST(AsyncWriterTest, MissingRankTimesOutAndNamesIt) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  AsyncWriterOptions o;
  o.peer_timeout = milliseconds(30);
  o.poll_interval = milliseconds(1);
  AsyncCheckpointWriter rank0(LocalFs(), folder, o);
  ASSERT_TRUE(rank0.Submit(TwoRank(3, 0)).ok());
  Status st = rank0.Wait();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("rank(s) 1 did not finish"), std::string::npos) << st.message();
  EXPECT_FALSE(LocalFs().Exists(folder + "/step_00000003/COMMITTED"));
}

TEST(AsyncWriterTest, MarkerFromAnotherAttemptIsRejected) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  AsyncWriterOptions o;
  o.poll_interval = milliseconds(1);
  AsyncCheckpointWriter rank1(LocalFs(), folder, o);
  ASSERT_TRUE(rank1.Submit(TwoRank(3, 1, /*attempt=*/"0")).ok());
  ASSERT_TRUE(rank1.Wait().ok());
  AsyncCheckpointWriter rank0(LocalFs(), folder, o);
  ASSERT_TRUE(rank0.Submit(TwoRank(3, 0, /*attempt=*/"1")).ok());
  Status st = rank0.Wait();
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("rank00001.written belongs to another save"), std::string::npos)
      << st.message();
  EXPECT_FALSE(LocalFs().Exists(folder + "/step_00000003/COMMITTED"));
}

TEST(AsyncWriterTest, DestructorAbandonsTheWaitForOtherRanks) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  {
    AsyncWriterOptions o;
    o.peer_timeout = std::chrono::hours(1);  // only the destructor can end this wait
    AsyncCheckpointWriter rank0(LocalFs(), folder, o);
    ASSERT_TRUE(rank0.Submit(TwoRank(4, 0)).ok());
  }
  EXPECT_TRUE(LocalFs().Exists(folder + "/step_00000004/rank00000.written"));
  EXPECT_FALSE(LocalFs().Exists(folder + "/step_00000004/COMMITTED"));
}

TEST(AsyncWriterTest, RemoveUncommittedAfterKeepsCommittedAndOlder) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  CheckpointStore store(LocalFs(), folder);
  ASSERT_TRUE(store.Save(5, FilesFor(5), {}, {}).ok());
  ASSERT_TRUE(store.Save(9, FilesFor(9), {}, {}).ok());
  for (const char* d : {"step_00000003", "step_00000007", "step_00000012"}) {
    ASSERT_TRUE(LocalFs().CreateDirs(folder + "/" + d).ok());
    ASSERT_TRUE(LocalFs().WriteFileAtomic(folder + "/" + d + "/rank00001.written", "{}").ok());
  }
  ASSERT_TRUE(RemoveUncommittedAfter(LocalFs(), folder, 5).ok());
  EXPECT_TRUE(LocalFs().Exists(folder + "/step_00000003"));   // older than the resume step
  EXPECT_FALSE(LocalFs().Exists(folder + "/step_00000007"));  // uncommitted, newer
  EXPECT_FALSE(LocalFs().Exists(folder + "/step_00000012"));
  EXPECT_TRUE(store.Verify(9).ok());  // committed ones are left alone
  EXPECT_TRUE(RemoveUncommittedAfter(LocalFs(), tmp / "absent", 0).ok());
}

// The fault-injection hooks: `after_files` runs once the data files are written and before the
// commit (its error fails the save, the step stays uncommitted, the older one is intact);
// `after_commit` runs once the step is committed and verified.
TEST(AsyncWriterTest, HooksRunAfterTheFilesAndAfterTheVerifiedCommit) {
  testing::TempDir tmp;
  const std::string folder = tmp / "ckpt";
  std::vector<std::string> calls;
  AsyncWriterOptions o;
  o.after_files = [&](const CheckpointSnapshot& s, const std::string& dir) -> Status {
    // The files are there, the commit is not.
    EXPECT_TRUE(LocalFs().Exists(JoinPath(dir, "model.safetensors")));
    EXPECT_FALSE(LocalFs().Exists(JoinPath(dir, kCommitFile)));
    calls.push_back("files " + std::to_string(s.step));
    if (s.step == 2) return IoError("injected");
    return Status::Ok();
  };
  o.after_commit = [&](const CheckpointSnapshot& s, const std::string& dir) -> Status {
    EXPECT_TRUE(LocalFs().Exists(JoinPath(dir, kCommitFile)));
    calls.push_back("commit " + std::to_string(s.step));
    return Status::Ok();
  };
  AsyncCheckpointWriter w(LocalFs(), folder, o);
  ASSERT_TRUE(w.Submit(Single(1)).ok());
  ASSERT_TRUE(w.Wait().ok());
  ASSERT_TRUE(w.Submit(Single(2)).ok());
  const Status st = w.Wait();
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("injected"), std::string::npos) << st.message();
  EXPECT_EQ(calls, (std::vector<std::string>{"files 1", "commit 1", "files 2"}));
  CheckpointStore store(LocalFs(), folder);
  Result<std::vector<int64_t>> committed = store.ListCommitted();
  ASSERT_TRUE(committed.ok());
  EXPECT_EQ(*committed, std::vector<int64_t>{1});
  EXPECT_TRUE(store.Verify(1).ok());
}

}  // namespace
}  // namespace tenax::ckpt
