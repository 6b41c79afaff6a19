// JsonlWriter appends flushed lines and repairs a torn last line; TruncateAfterStep keeps exactly
// the lines a resumed run must not repeat, and is atomic through the FileSystem seam;
// LastStepWith finds the newest line of a kind.
#include "tenax/core/metrics_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

namespace tenax {
namespace {

namespace stdfs = std::filesystem;

class MetricsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (stdfs::path(::testing::TempDir()) /
            ("tenax_jsonl_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    stdfs::remove_all(dir_);
    stdfs::create_directories(dir_);
    path_ = dir_ + "/metrics.jsonl";
  }
  void TearDown() override { stdfs::remove_all(dir_); }
  std::string Contents() { return LocalFs().ReadFile(path_).value(); }

  std::string dir_;
  std::string path_;
};

TEST_F(MetricsWriterTest, AppendsOneFlushedLinePerRecord) {
  {
    auto w = JsonlWriter::Open(path_);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Write({{"step", 1}, {"loss", 2.5}}).ok());
    // Flushed per line: visible before the writer closes.
    EXPECT_EQ(Contents(), "{\"loss\":2.5,\"step\":1}\n");
    ASSERT_TRUE((*w)->Write({{"step", 2}, {"loss", std::nan("")}, {"s", "\xff"}}).ok());
  }
  auto w = JsonlWriter::Open(path_);  // reopening appends
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write({{"step", 3}}).ok());
  EXPECT_EQ(Contents(),
            "{\"loss\":2.5,\"step\":1}\n"
            "{\"loss\":null,\"s\":\"\xef\xbf\xbd\",\"step\":2}\n"
            "{\"step\":3}\n");
}

TEST_F(MetricsWriterTest, TornLastLineIsClosedBeforeAppending) {
  ASSERT_TRUE(LocalFs().WriteFileAtomic(path_, "{\"step\":1}\n{\"step\":2,\"lo").ok());
  auto w = JsonlWriter::Open(path_);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write({{"step", 2}}).ok());
  EXPECT_EQ(Contents(), "{\"step\":1}\n{\"step\":2,\"lo\n{\"step\":2}\n");
}

TEST_F(MetricsWriterTest, OpenInMissingFolderIsAnIoError) {
  auto w = JsonlWriter::Open(dir_ + "/no/such/dir/m.jsonl");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIoError);
  EXPECT_NE(w.status().message().find("m.jsonl"), std::string::npos);
}

TEST_F(MetricsWriterTest, TruncateAfterStepKeepsEarlierStepsAndRunEvents) {
  const std::string text =
      "{\"event\":\"start\"}\n"
      "{\"step\":1,\"loss\":3.0}\n"
      "{\"step\":2,\"loss\":2.9}\n"
      "\n"
      "{\"step\":3,\"loss\":2.8}\n"
      "{\"step\":2.5}\n"
      "{\"step\":10,\"eval_loss\":2.0}\n"
      "[1,2]\n"
      "{\"step\":11,\"lo";  // torn by a crash
  ASSERT_TRUE(LocalFs().WriteFileAtomic(path_, text).ok());
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(TruncateAfterStep(path_, 2).ok());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("dropped 1 line(s)"), std::string::npos) << err;
  // Lines are kept verbatim (3.0 stays 3.0), in order.
  EXPECT_EQ(Contents(),
            "{\"event\":\"start\"}\n"
            "{\"step\":1,\"loss\":3.0}\n"
            "{\"step\":2,\"loss\":2.9}\n"
            "[1,2]\n");

  // A resumed run appends after the trimmed log.
  auto w = JsonlWriter::Open(path_);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write({{"step", 3}}).ok());
  EXPECT_EQ(Contents().substr(Contents().size() - 11), "{\"step\":3}\n");

  ASSERT_TRUE(TruncateAfterStep(path_, 0).ok());
  EXPECT_EQ(Contents(), "{\"event\":\"start\"}\n[1,2]\n");
}

// The newest training line's step: evaluations, events, other shapes and a torn line do not
// count; no file is -1.
TEST_F(MetricsWriterTest, LastStepWithAKeyCountsOnlyLinesThatHaveIt) {
  EXPECT_EQ(LastStepWith(path_, "loss").value(), -1);
  ASSERT_TRUE(LocalFs()
                  .WriteFileAtomic(path_,
                                   "{\"event\":\"start\"}\n"
                                   "{\"step\":7,\"loss\":3.0}\n"
                                   "{\"step\":9,\"val_loss\":2.0}\n"
                                   "{\"step\":8,\"loss\":2.9}\n"
                                   "[1,2]\n"
                                   "{\"step\":11,\"lo")
                  .ok());
  EXPECT_EQ(LastStepWith(path_, "loss").value(), 8);
  EXPECT_EQ(LastStepWith(path_, "val_loss").value(), 9);
  EXPECT_EQ(LastStepWith(path_, "grad_norm").value(), -1);
}

TEST_F(MetricsWriterTest, TruncateMissingFileIsOk) {
  EXPECT_TRUE(TruncateAfterStep(dir_ + "/absent.jsonl", 5).ok());
  EXPECT_FALSE(LocalFs().Exists(dir_ + "/absent.jsonl"));
}

// Goes through the seam: a failing atomic write leaves the original file untouched.
class FailingWriteFs final : public FileSystem {
 public:
  Status WriteFileAtomic(const std::string& path, std::string_view) override {
    return IoError("injected failure writing " + path);
  }
  Result<std::string> ReadFile(const std::string& p) override { return LocalFs().ReadFile(p); }
  Status CreateDirs(const std::string& p) override { return LocalFs().CreateDirs(p); }
  Status RemoveAll(const std::string& p) override { return LocalFs().RemoveAll(p); }
  Status Rename(const std::string& a, const std::string& b) override {
    return LocalFs().Rename(a, b);
  }
  bool Exists(const std::string& p) override { return LocalFs().Exists(p); }
  Result<std::vector<std::string>> ListDir(const std::string& d) override {
    return LocalFs().ListDir(d);
  }
  Status SyncDir(const std::string& d) override { return LocalFs().SyncDir(d); }
};

TEST_F(MetricsWriterTest, TruncateFailureLeavesTheLogIntact) {
  const std::string text = "{\"step\":1}\n{\"step\":2}\n";
  ASSERT_TRUE(LocalFs().WriteFileAtomic(path_, text).ok());
  FailingWriteFs fs;
  Status st = TruncateAfterStep(path_, 1, fs);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(Contents(), text);
  EXPECT_TRUE(TruncateAfterStep(path_, 5, fs).ok());  // nothing to drop: no write attempted
}

}  // namespace
}  // namespace tenax
