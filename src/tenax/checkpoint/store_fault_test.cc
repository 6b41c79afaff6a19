// Crash safety of the commit protocol, proven by fault injection: a save (or prune) is crashed at
// every mutating filesystem operation in turn, then a "restarted process" (a fresh store on the
// real filesystem) must find the older checkpoint intact and the interrupted step either absent
// or complete, and a retry must succeed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tenax/checkpoint/store.h"
#include "tenax/checkpoint/testing_fs.h"

namespace tenax::ckpt {
namespace {

namespace stdfs = std::filesystem;
using Files = std::vector<std::pair<std::string, std::string>>;

Files FilesFor(int64_t step) {
  return {{"model.safetensors", std::string(3000, static_cast<char>('a' + step))},
          {"optimizer.safetensors", std::string(5000, static_cast<char>('k' + step))},
          {"train_state.json", "{\"step\": " + std::to_string(step) + "}"}};
}

class StoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = (stdfs::path(::testing::TempDir()) /
             (std::string("tenax_fault_") + info->name() + "_" + std::to_string(::getpid())))
                .string();
    stdfs::remove_all(root_);
  }
  void TearDown() override { stdfs::remove_all(root_); }

  // A folder holding committed step 1 and, optionally, an uncommitted leftover of step 2.
  std::string FreshFolder(const std::string& name, bool leftover) {
    const std::string folder = root_ + "/" + name;
    CheckpointStore store(LocalFs(), folder);
    EXPECT_TRUE(store.Save(1, FilesFor(1), {}, {}).ok());
    if (leftover) {
      EXPECT_TRUE(LocalFs().CreateDirs(folder + "/step_00000002").ok());
      EXPECT_TRUE(
          LocalFs().WriteFileAtomic(folder + "/step_00000002/model.safetensors", "torn").ok());
    }
    return folder;
  }

  // Crashes Save(2) at every operation index and checks what a restart sees.
  void CrashSweep(bool leftover) {
    // Dry run: the operation sequence of an uninterrupted Save(2).
    std::vector<std::string> ops;
    {
      FaultyFileSystem counting(LocalFs());
      CheckpointStore store(counting, FreshFolder("dry", leftover));
      ASSERT_TRUE(store.Save(2, FilesFor(2), {}, {}).ok());
      ops = counting.ops();
    }
    int64_t commit_op = -1;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].rfind("WriteFileAtomic", 0) == 0 && ops[i].size() >= 10 &&
          ops[i].compare(ops[i].size() - 10, 10, "/COMMITTED") == 0) {
        commit_op = static_cast<int64_t>(i);
      }
    }
    ASSERT_GE(commit_op, 0);
    ASSERT_GE(ops.size(), 6u);  // writes for 3 files + manifest + marker + syncs

    for (int64_t crash = 0; crash < static_cast<int64_t>(ops.size()); ++crash) {
      SCOPED_TRACE("crash at op " + std::to_string(crash) + ": " + ops[crash]);
      const std::string folder = FreshFolder("crash" + std::to_string(crash), leftover);
      FaultyFileSystem faulty(LocalFs());
      faulty.CrashAt(crash);
      {
        CheckpointStore doomed(faulty, folder);
        EXPECT_THROW((void)doomed.Save(2, FilesFor(2), {}, {}), SimulatedCrash);
      }
      EXPECT_EQ(faulty.ops().size(), static_cast<size_t>(crash + 1));

      CheckpointStore restarted(LocalFs(), folder);
      EXPECT_TRUE(restarted.Verify(1).ok());
      auto committed = restarted.ListCommitted();
      ASSERT_TRUE(committed.ok());
      // The marker write is the commit point: crashing at or before it must not commit.
      const bool expect_committed = crash > commit_op;
      const std::vector<int64_t> want =
          expect_committed ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1};
      EXPECT_EQ(*committed, want);
      ::testing::internal::CaptureStderr();
      auto latest = restarted.LatestGood();
      ::testing::internal::GetCapturedStderr();
      ASSERT_TRUE(latest.ok());
      EXPECT_EQ(*latest, expect_committed ? 2 : 1);

      if (!expect_committed) {
        ::testing::internal::CaptureStderr();
        Status retry = restarted.Save(2, FilesFor(2), {}, {});
        ::testing::internal::GetCapturedStderr();
        ASSERT_TRUE(retry.ok()) << retry.ToString();
      }
      EXPECT_TRUE(restarted.Verify(2).ok());
      auto loaded = restarted.Load(2);
      ASSERT_TRUE(loaded.ok());
      EXPECT_EQ(loaded->files.at("optimizer.safetensors"), FilesFor(2)[1].second);
      // No temp or torn files survive inside the committed folder.
      auto names = LocalFs().ListDir(folder + "/step_00000002");
      ASSERT_TRUE(names.ok());
      EXPECT_EQ(names->size(), 5u);
    }
  }

  std::string root_;
};

TEST_F(StoreFaultTest, CrashAtEveryOperationOfSave) { CrashSweep(/*leftover=*/false); }

TEST_F(StoreFaultTest, CrashAtEveryOperationOfSaveOverALeftover) { CrashSweep(/*leftover=*/true); }

TEST_F(StoreFaultTest, FailedWriteLeavesNothingCommitted) {
  const int64_t writes_per_save = 5;  // 3 files + manifest + marker
  for (int64_t n = 0; n < writes_per_save; ++n) {
    SCOPED_TRACE("failing write " + std::to_string(n));
    const std::string folder = FreshFolder("fail" + std::to_string(n), false);
    FaultyFileSystem faulty(LocalFs());
    faulty.FailWriteAt(n);
    CheckpointStore store(faulty, folder);
    Status st = store.Save(2, FilesFor(2), {}, {});
    EXPECT_EQ(st.code(), StatusCode::kIoError);
    EXPECT_NE(st.message().find("injected write failure"), std::string::npos) << st.message();
    EXPECT_EQ(*store.ListCommitted(), std::vector<int64_t>{1});
    EXPECT_EQ(*store.LatestGood(), 1);
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(store.Save(2, FilesFor(2), {}, {}).ok());  // the next write succeeds
    ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(store.Verify(2).ok());
  }
}

TEST_F(StoreFaultTest, CrashAtEveryOperationOfPrune) {
  auto fill = [&](const std::string& folder) {
    CheckpointStore store(LocalFs(), folder);
    for (int64_t s = 1; s <= 4; ++s) EXPECT_TRUE(store.Save(s, FilesFor(s), {}, {}).ok());
    EXPECT_TRUE(LocalFs().CreateDirs(folder + "/step_00000003.deleting").ok());
  };
  std::vector<std::string> ops;
  {
    fill(root_ + "/dry");
    FaultyFileSystem counting(LocalFs());
    CheckpointStore store(counting, root_ + "/dry");
    ASSERT_TRUE(store.Prune(2).ok());
    ops = counting.ops();
  }
  ASSERT_FALSE(ops.empty());
  for (int64_t crash = 0; crash < static_cast<int64_t>(ops.size()); ++crash) {
    SCOPED_TRACE("crash at op " + std::to_string(crash) + ": " + ops[crash]);
    const std::string folder = root_ + "/crash" + std::to_string(crash);
    fill(folder);
    FaultyFileSystem faulty(LocalFs());
    faulty.CrashAt(crash);
    {
      CheckpointStore doomed(faulty, folder);
      EXPECT_THROW((void)doomed.Prune(2), SimulatedCrash);
    }
    CheckpointStore restarted(LocalFs(), folder);
    // Whatever still looks committed is complete: nothing is ever half-deleted in place.
    const std::vector<int64_t> survivors = *restarted.ListCommitted();
    for (int64_t s : survivors) EXPECT_TRUE(restarted.Verify(s).ok()) << s;
    ASSERT_TRUE(restarted.Prune(2).ok());
    EXPECT_EQ(*restarted.ListCommitted(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(LocalFs().ListDir(folder)->size(), 2u);
  }
}

}  // namespace
}  // namespace tenax::ckpt
