// When the launcher restarts: by default within a budget of restarts per trailing window, with
// --max-restarts by count, never on fixed nodes unless asked; each generation counted once.
#include "tenax/launch/restart_policy.h"

#include <gtest/gtest.h>

namespace tenax::launch {
namespace {

LaunchOptions Options(const std::string& budget = "", int max_restarts = -1) {
  LaunchOptions o;
  if (!budget.empty()) {
    o.restart_budget = budget;
    o.restart_budget_given = true;
  }
  if (max_restarts >= 0) {
    o.max_restarts = max_restarts;
    o.max_restarts_given = true;
  }
  return o;
}

TEST(RestartPolicy, ByDefaultTenRestartsWithinAnyHour) {
  RestartPolicy p = *RestartPolicy::FromOptions(Options());
  EXPECT_DOUBLE_EQ(p.budget_per_second(), 10.0 / 3600);
  EXPECT_GT(p.max_generation(), 1000000);
  for (int g = 0; g < 10; ++g) {
    EXPECT_EQ(p.Take(g, 100.0 * g), std::nullopt) << g;  // 10 restarts in 900 s
  }
  EXPECT_NE(p.Describe(9, 900).find("restart 10 (10 in the last 1h"), std::string::npos)
      << p.Describe(9, 900);
  const std::optional<std::string> no = p.Take(10, 1000);
  ASSERT_TRUE(no);
  EXPECT_NE(no->find("restart budget spent: 10 restart(s) in the last 1h (--restart-budget 10/h)"),
            std::string::npos)
      << *no;
  // An hour after the first restart, it no longer counts.
  EXPECT_EQ(p.Take(10, 3600.5), std::nullopt);
  // A generation reported twice (several failure reports) is one restart.
  EXPECT_EQ(p.Take(10, 3601), std::nullopt);
}

TEST(RestartPolicy, ACountReplacesTheBudgetOrAddsToItWhenBothAreGiven) {
  RestartPolicy count = *RestartPolicy::FromOptions(Options("", 2));
  EXPECT_EQ(count.budget_per_second(), 0);
  EXPECT_EQ(count.max_generation(), 2);
  EXPECT_EQ(count.Take(0, 0), std::nullopt);
  EXPECT_EQ(count.Take(1, 0), std::nullopt);
  EXPECT_EQ(count.Describe(1, 0), "restart 2 of 2");
  EXPECT_EQ(*count.Take(2, 0), "no restarts left (2 used, --max-restarts)");
  RestartPolicy zero = *RestartPolicy::FromOptions(Options("", 0));
  EXPECT_TRUE(zero.Take(0, 0));  // stop at the first failure
  RestartPolicy both = *RestartPolicy::FromOptions(Options("1/min", 5));
  EXPECT_EQ(both.Take(0, 0), std::nullopt);
  EXPECT_NE(both.Take(1, 30)->find("restart budget spent"), std::string::npos);
  EXPECT_EQ(both.Take(1, 61), std::nullopt);
}

TEST(RestartPolicy, FixedNodesRestartOnlyWhenAskedAndBadBudgetsAreRefused) {
  LaunchOptions fixed = Options();
  fixed.nnodes = 2;
  fixed.rdzv = "10.0.0.1:29500";
  RestartPolicy none = *RestartPolicy::FromOptions(fixed);
  EXPECT_NE(none.Take(0, 0)->find("fixed --rdzv HOST:PORT cannot restart"), std::string::npos);
  fixed.restart_budget_given = true;
  EXPECT_FALSE(RestartPolicy::FromOptions(fixed).ok());
  LaunchOptions etcd = Options();
  etcd.nnodes = 2;
  etcd.rdzv = "etcd://10.0.0.1:2379";
  EXPECT_DOUBLE_EQ(RestartPolicy::FromOptions(etcd)->budget_per_second(), 10.0 / 3600);
  for (const std::string bad : {"10", "10/day", "-1/h", "x/h", "/h"}) {
    Result<RestartPolicy> r = RestartPolicy::FromOptions(Options(bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--restart-budget " + bad + ": expected N/h, N/min or N/s"),
              std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tenax::launch
