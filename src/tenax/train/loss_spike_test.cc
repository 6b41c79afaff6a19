// LossSpikeDetector against hand-computed medians, its warm-up, window and restore; the run's
// spike record round-trips and a damaged one is a clear error.
#include "tenax/train/loss_spike.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tenax/core/fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::train {
namespace {

TEST(LossSpikeTest, DisabledNeverFires) {
  LossSpikeDetector d(0, 20);
  EXPECT_FALSE(d.enabled());
  for (int i = 0; i < 30; ++i) d.Add(1.0);
  EXPECT_FALSE(d.Check(1e9).has_value());
  EXPECT_TRUE(d.history().empty());
}

TEST(LossSpikeTest, NeedsEightLossesThenComparesWithTheMedian) {
  LossSpikeDetector d(3, 20);
  // 7 losses: still warming up, even for a huge loss.
  for (double l : {4.0, 3.0, 2.5, 2.0, 2.2, 1.9, 2.1}) d.Add(l);
  EXPECT_FALSE(d.Check(100).has_value());
  d.Add(2.4);
  // Sorted: 1.9 2.0 2.1 2.2 2.4 2.5 3.0 4.0 -> median (2.2 + 2.4) / 2 = 2.3; threshold 6.9.
  EXPECT_FALSE(d.Check(6.89).has_value());
  const std::optional<double> m = d.Check(6.91);
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(*m, 2.3);
  // Check does not add; NaN/Inf are the nonfinite check's business.
  EXPECT_EQ(d.history().size(), 8u);
  EXPECT_FALSE(d.Check(std::nan("")).has_value());
  EXPECT_FALSE(d.Check(INFINITY).has_value());
}

TEST(LossSpikeTest, WindowKeepsTheNewestAndSmallWindowsWarmUpFaster) {
  LossSpikeDetector d(2, 3);
  d.Add(10);
  d.Add(10);
  EXPECT_FALSE(d.Check(100).has_value());  // 2 < min(8, 3)
  d.Add(1);
  d.Add(1);
  d.Add(1.5);  // window: 1 1 1.5 -> median 1
  EXPECT_EQ(d.history(), (std::deque<double>{1, 1, 1.5}));
  ASSERT_TRUE(d.Check(2.01).has_value());
  EXPECT_DOUBLE_EQ(*d.Check(2.01), 1.0);
  EXPECT_FALSE(d.Check(2.0).has_value());
  LossSpikeDetector restored(2, 3);
  restored.Restore({10, 10, 1, 1, 1.5});  // a longer saved window keeps its newest entries
  EXPECT_EQ(restored.history(), d.history());
}

TEST(LossSpikeTest, RecordRoundTripsAndRejectsDamage) {
  testing::TempDir tmp;
  const std::string run = tmp.path();
  Result<std::vector<LossSpikeRecord>> none = ReadLossSpikes(run);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(AppendLossSpike(run, {10, 55.5, 2.5, "restart", 0}).ok());
  ASSERT_TRUE(AppendLossSpike(run, {10, 55.5, 2.5, "skip", 1}).ok());
  // Step 10 of generation 1 run again (live recovery) finds its spike again: still one record.
  ASSERT_TRUE(AppendLossSpike(run, {10, 99.0, 2.5, "skip", 1}).ok());
  Result<std::vector<LossSpikeRecord>> two = ReadLossSpikes(run);
  ASSERT_TRUE(two.ok()) << two.status().message();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].step, 10);
  EXPECT_DOUBLE_EQ((*two)[0].loss, 55.5);
  EXPECT_DOUBLE_EQ((*two)[0].median, 2.5);
  EXPECT_EQ((*two)[0].action, "restart");
  EXPECT_EQ((*two)[1].action, "skip");
  EXPECT_EQ((*two)[1].generation, 1);
  EXPECT_DOUBLE_EQ((*two)[1].loss, 55.5);  // the first finding stands
  ASSERT_TRUE(LocalFs().WriteFileAtomic(LossSpikesPath(run), "{\"spikes\": 3}").ok());
  Result<std::vector<LossSpikeRecord>> bad = ReadLossSpikes(run);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataError);
  EXPECT_NE(bad.status().message().find("loss_spikes.json"), std::string::npos);
  EXPECT_NE(bad.status().message().find("delete it"), std::string::npos);
}

}  // namespace
}  // namespace tenax::train
