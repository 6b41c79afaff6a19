#include "tenax/plan/failure.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

TEST(Failure, YoungByHand) {
  // C = 60 s, M = 3 h = 10,800 s: sqrt(2 x 60 x 10,800) = sqrt(1,296,000) = 1,138.42 s.
  EXPECT_NEAR(YoungInterval(60, 3 * kHour), 1138.42, 0.005);
  // C = 300 s, M = 30 min: sqrt(2 x 300 x 1,800) = sqrt(1,080,000) = 1,039.23 s.
  EXPECT_NEAR(YoungInterval(300, 1800), 1039.23, 0.005);
}

TEST(Failure, DalyByHand) {
  // C = 60 s, M = 10,800 s: C / 2M = 1/360; sqrt = 0.052705.
  // 1,138.42 x (1 + 0.052705 / 3 + (1/360) / 9) - 60 = 1,138.42 x 1.017877 - 60 = 1,098.77 s.
  EXPECT_NEAR(DalyInterval(60, 3 * kHour), 1098.77, 0.005);
  // C = 300 s, M = 1,800 s: C / 2M = 1/12; sqrt = 0.288675.
  // 1,039.23 x (1 + 0.096225 + 0.009259) - 300 = 1,039.23 x 1.105484 - 300 = 848.85 s.
  EXPECT_NEAR(DalyInterval(300, 1800), 848.85, 0.005);
  // C >= 2M: checkpointing costs more than it saves; Daly's answer is tau = M.
  EXPECT_DOUBLE_EQ(DalyInterval(4000, 1800), 1800);
}

TEST(Failure, DalyExpectedWallTimeByHand) {
  // 10 h of work, tau = 1,000 s, C = 60 s, R = 600 s, M = 2 h:
  // 7,200 x e^(600/7,200) x (e^(1,060/7,200) - 1) x 36,000 / 1,000
  // = 7,200 x 1.086904 x 0.158609 x 36 = 44,684.9 s.
  EXPECT_NEAR(DalyExpectedWallTime(10 * kHour, 1000, 60, 600, 2 * kHour), 44684.88, 0.05);
  // No failures: the work plus its checkpoints.
  EXPECT_DOUBLE_EQ(DalyExpectedWallTime(3600, 1000, 10, 60, INFINITY), 3600 + 3 * 10);
}

TEST(Failure, RatesAsReported) {
  // Llama 3: 419 interruptions in 54 days on 16,384 GPUs = 2,048 nodes.
  auto meta = ParseFailureRate("419 in 54d on 16384 gpus", 8);
  ASSERT_TRUE(meta.ok()) << meta.status().message();
  EXPECT_NEAR(meta->per_node_hour, 419.0 / (54 * 24) / 2048, 1e-12);
  EXPECT_NEAR(JobMtbfSeconds(*meta, 2048) / kHour, 54.0 * 24 / 419, 1e-9);  // 3.093 h
  auto same = ParseFailureRate("419 in 54days on 2048 nodes", 8);
  ASSERT_TRUE(same.ok());
  EXPECT_NEAR(same->per_node_hour, meta->per_node_hour, 1e-15);
  // 0.04% per instance-hour on 512 instances: 1 / (0.0004 x 512) = 4.88 h.
  auto cloud = ParseFailureRate("0.04%/instance-hour", 8);
  ASSERT_TRUE(cloud.ok());
  EXPECT_NEAR(JobMtbfSeconds(*cloud, 512) / kHour, 4.8828125, 1e-9);
  // Per GPU-hour: 8 GPUs per node.
  EXPECT_NEAR(ParseFailureRate("5e-5/gpu-hour", 8)->per_node_hour, 4e-4, 1e-15);
  EXPECT_NEAR(ParseFailureRate("0.0096/node-day", 8)->per_node_hour, 4e-4, 1e-15);
}

TEST(Failure, BadRatesExplainTheForms) {
  for (const char* bad : {"0.0004", "0.0004/node", "1/gpu-fortnight", "419 in 54d on 16384",
                          "x/node-hour", "419 in soon on 16384 gpus", "3/rack-hour"}) {
    auto r = ParseFailureRate(bad, 8);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tenax::plan
