// CheckpointStore behaviour on a healthy filesystem: layout on disk, round trips, damage
// detection with messages naming the file, pruning, path resolution and the multi-rank split.
// Crash and write-failure injection live in store_fault_test.cc.
#include "tenax/checkpoint/store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/checkpoint/testing_fs.h"
#include "tenax/core/crc32.h"

namespace tenax::ckpt {
namespace {

namespace stdfs = std::filesystem;
using Files = std::vector<std::pair<std::string, std::string>>;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = (stdfs::path(::testing::TempDir()) /
             (std::string("tenax_store_") + info->name() + "_" + std::to_string(::getpid())))
                .string();
    stdfs::remove_all(root_);
    folder_ = root_ + "/ckpt";
  }
  void TearDown() override { stdfs::remove_all(root_); }

  // Distinct, recognisable content per step.
  static Files FilesFor(int64_t step) {
    const float w[3] = {1.0f * step, 2.0f, 3.0f};
    return {{"model.safetensors", SerializeSafetensors({{"w", "F32", {3}, w, sizeof(w)}}, {})},
            {"train_state.json", "{\"step\": " + std::to_string(step) + "}"}};
  }
  std::string PathOf(int64_t step, const std::string& file) {
    return folder_ + "/" + StepDirName(step) + "/" + file;
  }

  std::string root_;
  std::string folder_;
};

void ExpectContains(const Status& st, const std::string& part) {
  EXPECT_NE(st.message().find(part), std::string::npos)
      << "message '" << st.message() << "' lacks '" << part << "'";
}

TEST_F(StoreTest, SaveWritesTheDocumentedLayoutAndLoadsBack) {
  CheckpointStore store(LocalFs(), folder_);
  ASSERT_TRUE(store.Save(100, FilesFor(100), {{"dp", 1}}, {{"tokens", 4096}}).ok());

  auto names = LocalFs().ListDir(folder_ + "/step_00000100");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"COMMITTED", "manifest.json", "model.safetensors",
                                              "train_state.json"}));
  auto manifest_text = LocalFs().ReadFile(PathOf(100, "manifest.json"));
  ASSERT_TRUE(manifest_text.ok());
  EXPECT_EQ(*LocalFs().ReadFile(PathOf(100, "COMMITTED")),
            "manifest_crc32=" + CrcHex(Crc32(*manifest_text)) + "\n");
  const auto j = nlohmann::json::parse(*manifest_text);
  EXPECT_EQ(j["format"], "tenax-checkpoint");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["step"], 100);
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["layout"]["dp"], 1);
  EXPECT_EQ(j["extra"]["tokens"], 4096);
  const std::string model = FilesFor(100)[0].second;
  EXPECT_EQ(j["files"]["model.safetensors"]["bytes"], model.size());
  EXPECT_EQ(j["files"]["model.safetensors"]["crc32"], CrcHex(Crc32(model)));

  auto loaded = store.Load(100);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->step, 100);
  EXPECT_EQ(loaded->files.at("model.safetensors"), model);
  EXPECT_EQ(loaded->files.at("train_state.json"), "{\"step\": 100}");
  EXPECT_EQ(loaded->manifest.extra["tokens"], 4096);
  EXPECT_EQ(loaded->manifest_json["layout"]["dp"], 1);
  auto st = SafetensorsFile::FromBytes(loaded->files.at("model.safetensors"), "model");
  ASSERT_TRUE(st.ok());
}

TEST_F(StoreTest, SaveNeverOverwritesACommittedStep) {
  CheckpointStore store(LocalFs(), folder_);
  ASSERT_TRUE(store.Save(5, FilesFor(5), {}, {}).ok());
  Status st = store.Save(5, FilesFor(6), {}, {});
  ASSERT_FALSE(st.ok());
  ExpectContains(st, "already holds a committed checkpoint");
  EXPECT_FALSE(store.WriteFiles(5, FilesFor(6)).ok());
  EXPECT_TRUE(store.Verify(5).ok());
  EXPECT_EQ(*LocalFs().ReadFile(PathOf(5, "train_state.json")), "{\"step\": 5}");
}

TEST_F(StoreTest, UncommittedLeftoverIsRemovedBeforeSaving) {
  ASSERT_TRUE(LocalFs().CreateDirs(folder_ + "/step_00000007").ok());
  ASSERT_TRUE(LocalFs().WriteFileAtomic(PathOf(7, "stale-rank00003.safetensors"), "x").ok());
  CheckpointStore store(LocalFs(), folder_);
  EXPECT_TRUE(store.ListCommitted()->empty());
  ASSERT_TRUE(store.Save(7, FilesFor(7), {}, {}).ok());
  EXPECT_FALSE(LocalFs().Exists(PathOf(7, "stale-rank00003.safetensors")));
  EXPECT_TRUE(store.Verify(7).ok());
}

TEST_F(StoreTest, RejectsBadFileNamesAndArguments) {
  CheckpointStore store(LocalFs(), folder_);
  for (const std::string bad :
       {"", "../x", "a/b", ".hidden", "manifest.json", "COMMITTED", "m.tmp.1"}) {
    EXPECT_EQ(store.Save(1, {{bad, "x"}}, {}, {}).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(store.Save(1, {{"a", "x"}, {"a", "y"}}, {}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Save(-1, FilesFor(1), {}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Save(1, FilesFor(1), nlohmann::json::array(), {}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Prune(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store.ListCommitted()->empty());
}

TEST_F(StoreTest, DamageIsReportedWithTheExactFile) {
  CheckpointStore store(LocalFs(), folder_);
  for (int64_t s : {1, 2, 3, 4, 5}) ASSERT_TRUE(store.Save(s, FilesFor(s), {}, {}).ok());

  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), PathOf(2, "model.safetensors"), 60).ok());
  Status st = store.Verify(2);
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  ExpectContains(st, "checksum mismatch in " + PathOf(2, "model.safetensors") + ": expected ");
  ExpectContains(st, "this checkpoint is damaged");

  const std::string model3 = FilesFor(3)[0].second;
  ASSERT_TRUE(LocalFs().WriteFileAtomic(PathOf(3, "model.safetensors"), model3.substr(1)).ok());
  ExpectContains(store.Verify(3), "size mismatch in " + PathOf(3, "model.safetensors"));

  ASSERT_TRUE(LocalFs().RemoveAll(PathOf(4, "train_state.json")).ok());
  ExpectContains(store.Verify(4), "missing file " + PathOf(4, "train_state.json"));

  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), PathOf(5, "manifest.json"), 3).ok());
  ExpectContains(store.Verify(5), "checksum mismatch in " + PathOf(5, "manifest.json"));
  ASSERT_TRUE(LocalFs().WriteFileAtomic(PathOf(5, "COMMITTED"), "yes\n").ok());
  ExpectContains(store.Verify(5), "not a valid commit marker");

  EXPECT_EQ(store.Load(5).status().code(), StatusCode::kDataError);
  EXPECT_EQ(store.Verify(9).code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.Verify(1).ok());
}

TEST_F(StoreTest, LatestGoodSkipsDamagedCheckpointsWithAWarning) {
  CheckpointStore store(LocalFs(), folder_);
  EXPECT_EQ(store.LatestGood().status().code(), StatusCode::kNotFound);  // no folder yet
  ASSERT_TRUE(store.Save(1, FilesFor(1), {}, {}).ok());
  ASSERT_TRUE(store.Save(2, FilesFor(2), {}, {}).ok());
  ASSERT_TRUE(LocalFs().CreateDirs(folder_ + "/step_00000003").ok());  // uncommitted: ignored
  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), PathOf(2, "train_state.json"), 0).ok());

  ::testing::internal::CaptureStderr();
  auto latest = store.LatestGood();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 1);
  EXPECT_NE(err.find("warning: skipping checkpoint step 2: checksum mismatch in " +
                     PathOf(2, "train_state.json")),
            std::string::npos)
      << err;

  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), PathOf(1, "train_state.json"), 0).ok());
  ::testing::internal::CaptureStderr();
  auto none = store.LatestGood();
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(none.status().code(), StatusCode::kDataError);  // not "fresh run": all damaged
}

TEST_F(StoreTest, PruneKeepsExactlyTheNewestN) {
  CheckpointStore store(LocalFs(), folder_);
  for (int64_t s = 1; s <= 6; ++s) ASSERT_TRUE(store.Save(s * 10, FilesFor(s), {}, {}).ok());
  ASSERT_TRUE(LocalFs().CreateDirs(folder_ + "/step_00000015").ok());  // older leftover
  ASSERT_TRUE(LocalFs().CreateDirs(folder_ + "/step_00000070").ok());  // save in progress
  ASSERT_TRUE(LocalFs().CreateDirs(folder_ + "/step_00000020.deleting").ok());
  ASSERT_TRUE(LocalFs().WriteFileAtomic(folder_ + "/notes.txt", "mine").ok());

  ASSERT_TRUE(store.Prune(0).ok());
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{10, 20, 30, 40, 50, 60}));
  ASSERT_TRUE(store.Prune(3).ok());
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{40, 50, 60}));
  ASSERT_TRUE(store.Prune(1).ok());
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{60}));
  EXPECT_EQ(*LocalFs().ListDir(folder_),
            (std::vector<std::string>{"notes.txt", "step_00000060", "step_00000070"}));
  EXPECT_TRUE(store.Verify(60).ok());
}

TEST_F(StoreTest, PruneNeverDeletesTheNewestGoodCheckpoint) {
  {
    CheckpointStore writer(LocalFs(), folder_);
    for (int64_t s : {1, 2, 3}) ASSERT_TRUE(writer.Save(s, FilesFor(s), {}, {}).ok());
  }
  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), PathOf(3, "model.safetensors"), 50).ok());
  ASSERT_TRUE(FaultyFileSystem::FlipByte(LocalFs(), PathOf(2, "model.safetensors"), 50).ok());
  CheckpointStore store(LocalFs(), folder_);  // a restarted process: trusts nothing
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(store.Prune(1).ok());
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{1, 3}));
}

TEST_F(StoreTest, ResolveCheckpointPath) {
  CheckpointStore store(LocalFs(), folder_);
  for (int64_t s : {100, 200}) ASSERT_TRUE(store.Save(s, FilesFor(s), {}, {}).ok());
  ASSERT_TRUE(LocalFs().CreateDirs(folder_ + "/step_00000300").ok());

  auto by_step = ResolveCheckpointPath(LocalFs(), folder_ + "/step_00000100/");
  ASSERT_TRUE(by_step.ok()) << by_step.status().ToString();
  EXPECT_EQ(*by_step, std::make_pair(folder_, int64_t{100}));
  auto by_folder = ResolveCheckpointPath(LocalFs(), folder_);
  ASSERT_TRUE(by_folder.ok());
  EXPECT_EQ(*by_folder, std::make_pair(folder_, int64_t{200}));

  auto missing = ResolveCheckpointPath(LocalFs(), root_ + "/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ExpectContains(missing.status(), "does not exist");
  auto uncommitted = ResolveCheckpointPath(LocalFs(), folder_ + "/step_00000300");
  EXPECT_EQ(uncommitted.status().code(), StatusCode::kNotFound);
  ExpectContains(uncommitted.status(), "is not a committed checkpoint");
  ASSERT_TRUE(LocalFs().CreateDirs(root_ + "/empty").ok());
  auto empty = ResolveCheckpointPath(LocalFs(), root_ + "/empty");
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  ExpectContains(empty.status(), "no committed checkpoint in " + root_ + "/empty");
}

TEST_F(StoreTest, MultiRankWriteFilesThenCommit) {
  const int world = 4;
  CheckpointStore leader(LocalFs(), folder_);
  ASSERT_TRUE(leader.Prepare(8).ok());
  std::vector<std::thread> ranks;
  std::vector<Status> results(world);
  std::vector<std::string> expected;
  for (int r = 0; r < world; ++r) {
    const std::string name =
        "model-rank" + fmt::format("{:05d}-of-{:05d}", r, world) + ".safetensors";
    expected.push_back(name);
    ranks.emplace_back([&, r, name] {
      CheckpointStore mine(LocalFs(), folder_);  // each rank has its own store
      results[r] = mine.WriteFiles(8, {{name, std::string(1000 + r, static_cast<char>(r))}});
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& st : results) ASSERT_TRUE(st.ok()) << st.ToString();

  Status missing = leader.Commit(8, {}, {}, {expected[0], "model-rank00009-of-00004.x"}, world);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_TRUE(leader.ListCommitted()->empty());

  ASSERT_TRUE(leader.Commit(8, {{"fsdp", world}}, {}, expected, world).ok());
  auto loaded = leader.Load(8);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->manifest.world_size, world);
  EXPECT_EQ(loaded->files.size(), 4u);
  EXPECT_EQ(loaded->files.at(expected[3]), std::string(1003, '\3'));
}

TEST_F(StoreTest, ManifestFromANewerFormatAsksForAnUpgrade) {
  auto m = Manifest::Parse(
      R"({"format":"tenax-checkpoint","format_version":2,"step":1,"created_unix":0,
          "world_size":1,"files":{}})",
      "m.json");
  ASSERT_FALSE(m.ok());
  ExpectContains(m.status(), "upgrade tenax");
  EXPECT_EQ(ParseStepDirName("step_00000100").value_or(-1), 100);
  EXPECT_EQ(ParseStepDirName("step_123456789").value_or(-1), 123456789);
  EXPECT_FALSE(ParseStepDirName("step_"));
  EXPECT_FALSE(ParseStepDirName("step_12a"));
  EXPECT_FALSE(ParseStepDirName("step_00000100.deleting"));
  EXPECT_EQ(StepDirName(123456789), "step_123456789");
}

}  // namespace
}  // namespace tenax::ckpt
