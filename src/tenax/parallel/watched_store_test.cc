// WatchedStore against c10d's own FileStore: waits that give up when told, with the reason.
#include "tenax/parallel/watched_store.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "tenax/core/temp_dir.h"

namespace tenax::parallel {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(WatchedStore, PassesTheStoreThroughAndGivesUpWhenTold) {
  tenax::testing::TempDir dir;
  auto file = c10::make_intrusive<c10d::FileStore>(dir / "store", 1);
  file->setTimeout(std::chrono::minutes(10));
  std::atomic<int> asked{0};
  std::atomic<bool> stop{false};
  auto store = c10::make_intrusive<WatchedStore>(file, [&]() -> std::optional<std::string> {
    ++asked;
    if (stop) return std::string("epoch 3 was decided");
    return std::nullopt;
  });
  EXPECT_EQ(store->getTimeout(), std::chrono::minutes(10));
  store->set("a", Bytes("x\0y"));
  EXPECT_EQ(store->get("a"), Bytes("x\0y"));
  EXPECT_EQ(store->add("n", 2), 2);
  EXPECT_EQ(store->add("n", 3), 5);
  EXPECT_TRUE(store->check({"a", "n"}));
  EXPECT_FALSE(store->check({"b"}));
  EXPECT_EQ(asked.load(), 0);  // keys that are there are no wait

  // A key another member sets a little later: the wait ends with it.
  std::thread later([&] {
    while (asked.load() < 3) std::this_thread::yield();
    file->set("b", Bytes("late"));
  });
  EXPECT_EQ(store->get("b"), Bytes("late"));
  later.join();

  // A key nobody sets: the reason ends the wait, long before the 10 minutes.
  const int before = asked.load();
  std::thread decide([&] {
    while (asked.load() < before + 3) std::this_thread::yield();
    stop = true;
  });
  try {
    store->wait({"never"});
    ADD_FAILURE() << "the wait did not give up";
  } catch (const c10::DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("stopped waiting for never: epoch 3 was decided"),
              std::string::npos)
        << e.what();
  }
  decide.join();
  // Its clones watch the same way.
  c10::intrusive_ptr<c10d::Store> copy = store->clone();
  EXPECT_THROW(copy->get("never"), c10::DistStoreError);

  // Without a reason, its own timeout.
  auto patient = c10::make_intrusive<WatchedStore>(file, nullptr);
  try {
    patient->wait({"never"}, std::chrono::milliseconds(20));
    ADD_FAILURE() << "the wait did not time out";
  } catch (const c10::DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 20 ms waiting for never"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tenax::parallel
