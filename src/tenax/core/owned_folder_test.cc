#include "tenax/core/owned_folder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tenax/core/temp_dir.h"

namespace tenax {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// What a killed owner leaves: its folder with content and its .owner file, unlocked.
void LeaveOwnerless(const fs::path& folder) {
  fs::create_directories(folder / "step_00000004");
  std::ofstream(folder / "step_00000004" / "weights") << "bytes";
  std::ofstream(folder.string() + ".owner");
}

TEST(OwnedFolder, IsCreatedAndRemovedWithItsOwner) {
  TempDir tmp;
  const fs::path folder = tmp / "tenax-replicas-job-a";
  {
    auto owned = OwnedFolder::Claim(tmp.path(), "tenax-replicas-", "tenax-replicas-job-a");
    ASSERT_TRUE(owned.ok()) << owned.status().message();
    EXPECT_EQ(owned->path(), folder.string());
    EXPECT_TRUE(fs::is_directory(folder));
    EXPECT_TRUE(fs::exists(folder.string() + ".owner"));
    std::ofstream(folder / "held") << "x";
    OwnedFolder moved = std::move(*owned);  // the moved-from one releases nothing
    EXPECT_TRUE(fs::exists(folder / "held"));
  }
  EXPECT_FALSE(fs::exists(folder));
  EXPECT_FALSE(fs::exists(folder.string() + ".owner"));
}

TEST(OwnedFolder, AKilledOwnersFolderIsSweptAndALiveOnesIsKept) {
  TempDir tmp;
  const fs::path dead1 = tmp / "tenax-replicas-job-dead1";
  const fs::path dead2 = tmp / "tenax-replicas-other-dead2";
  const fs::path live = tmp / "tenax-replicas-job-live";
  const fs::path unrelated = tmp / "tenax-job-1234abcd";      // another prefix: not ours to judge
  const fs::path legacy = tmp / "tenax-replicas-job-legacy";  // no .owner file: never touched
  LeaveOwnerless(dead1);
  LeaveOwnerless(dead2);
  LeaveOwnerless(live);
  LeaveOwnerless(unrelated);
  fs::create_directories(legacy);
  // A live owner in another process: an open file description holding the flock (flock locks
  // of two descriptions conflict within one process too).
  const int held = ::open((live.string() + ".owner").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);

  auto owned = OwnedFolder::Claim(tmp.path(), "tenax-replicas-", "tenax-replicas-job-new");
  ASSERT_TRUE(owned.ok()) << owned.status().message();
  EXPECT_EQ(owned->swept(), 2);
  EXPECT_FALSE(fs::exists(dead1));
  EXPECT_FALSE(fs::exists(dead1.string() + ".owner"));
  EXPECT_FALSE(fs::exists(dead2));
  EXPECT_TRUE(fs::exists(live / "step_00000004" / "weights"));
  EXPECT_TRUE(fs::exists(unrelated / "step_00000004" / "weights"));
  EXPECT_TRUE(fs::is_directory(legacy));
  EXPECT_TRUE(fs::is_directory(owned->path()));
  ::close(held);  // the live owner dies: the next claim sweeps its folder
  auto next = OwnedFolder::Claim(tmp.path(), "tenax-replicas-", "tenax-replicas-job-next");
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(next->swept(), 1);
  EXPECT_FALSE(fs::exists(live));
  EXPECT_TRUE(fs::is_directory(owned->path()));  // still owned by us
}

TEST(OwnedFolder, ANameOwnedByALiveProcessIsRefused) {
  TempDir tmp;
  auto first = OwnedFolder::Claim(tmp.path(), "p-", "p-x");
  ASSERT_TRUE(first.ok());
  auto second = OwnedFolder::Claim(tmp.path(), "p-", "p-x");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
  EXPECT_NE(second.status().message().find("p-x"), std::string::npos) << second.status().message();
  auto bad = OwnedFolder::Claim(tmp.path(), "p-", "q-x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tenax
