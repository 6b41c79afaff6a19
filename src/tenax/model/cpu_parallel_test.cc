// cpu_parallel.h: the range is split over libtorch's intra-op threads (what ATen's parallel_for
// did not do when called from a file built without OpenMP), covered exactly once, and a task's
// exception reaches the caller.
#include "tenax/model/cpu_parallel.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tenax::model {
namespace {

struct ThreadsGuard {
  explicit ThreadsGuard(int n) : saved(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadsGuard() { at::set_num_threads(saved); }
  int saved;
};

TEST(ParallelFor, SplitsTheRangeOverTheIntraOpThreadsAndCoversItOnce) {
  const ThreadsGuard threads(2);
  std::vector<std::atomic<int>> seen(1000);
  std::mutex mu;
  std::set<std::thread::id> ids;
  ParallelFor(0, 1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[i]++;
    const std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  for (const auto& s : seen) ASSERT_EQ(s.load(), 1);
  EXPECT_EQ(ids.size(), 2u) << "the loops ran on one thread although two were configured";
}

TEST(ParallelFor, ARangeWithinOneGrainRunsOnTheCallingThread) {
  const ThreadsGuard threads(2);
  std::vector<std::pair<int64_t, int64_t>> calls;
  std::thread::id where;
  ParallelFor(3, 10, 100, [&](int64_t b, int64_t e) {
    calls.emplace_back(b, e);
    where = std::this_thread::get_id();
  });
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{3}, int64_t{10}));
  EXPECT_EQ(where, std::this_thread::get_id());
}

TEST(ParallelFor, ATaskExceptionReachesTheCaller) {
  const ThreadsGuard threads(2);
  EXPECT_THROW(ParallelFor(0, 1000, 1,
                           [](int64_t b, int64_t) {
                             if (b > 0) throw std::runtime_error("task failed");
                           }),
               std::runtime_error);
}

}  // namespace
}  // namespace tenax::model
