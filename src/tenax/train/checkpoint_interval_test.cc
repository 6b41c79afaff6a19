// checkpoint.interval = "auto": the Gamma-Poisson failure rate, the Young/Daly interval in
// steps, the policy the trainer asks every step, and the config keys that drive it.
#include "tenax/train/checkpoint_interval.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "tenax/config/config.h"

namespace tenax::train {
namespace {

TEST(CheckpointIntervalTest, PosteriorFailureRate) {
  // No observations: the prior.
  EXPECT_DOUBLE_EQ(PosteriorFailureRatePerHour(0.1, 1, 0, 0), 0.1);
  // Prior 0.1/h worth 1 failure = 10 h of exposure; 3 failures in 10 h -> (1 + 3) / (10 + 10).
  EXPECT_DOUBLE_EQ(PosteriorFailureRatePerHour(0.1, 1, 3, 10), 0.2);
  // A long quiet run pulls the estimate down: 1 / (10 + 90).
  EXPECT_DOUBLE_EQ(PosteriorFailureRatePerHour(0.1, 1, 0, 90), 0.01);
  // A heavier prior moves less: (4 + 3) / (40 + 10).
  EXPECT_DOUBLE_EQ(PosteriorFailureRatePerHour(0.1, 4, 3, 10), 0.14);
}

TEST(CheckpointIntervalTest, OptimalIntervalStepsIsDalyOverStepTime) {
  // Daly(C = 60 s, M = 3 h) = 1098.77 s (plan/failure_test.cc); 10 s steps -> 110 steps.
  EXPECT_EQ(OptimalIntervalSteps(60, 10, 1.0 / 3.0, 100000), 110);
  // Daly(300 s, 1800 s) = 848.85 s; 2 s steps -> 424 steps (848.85 / 2 = 424.4).
  EXPECT_EQ(OptimalIntervalSteps(300, 2, 2.0, 100000), 424);
  // Clamped to the run's length and to at least one step.
  EXPECT_EQ(OptimalIntervalSteps(60, 10, 1.0 / 3.0, 50), 50);
  EXPECT_EQ(OptimalIntervalSteps(1e-6, 1000, 100, 50), 1);
  // Nothing measured: as rarely as possible.
  EXPECT_EQ(OptimalIntervalSteps(60, 0, 0.1, 77), 77);
}

TEST(CheckpointIntervalTest, FixedPolicyKeepsTheModuloRule) {
  IntervalPolicyOptions o;
  o.interval = 25;
  o.total_steps = 1000;
  CheckpointIntervalPolicy p(o, /*resume_step=*/10);
  EXPECT_FALSE(p.ShouldSave(24));
  EXPECT_TRUE(p.ShouldSave(25));  // not 35: same steps as before interval = "auto" existed
  p.RecordStepTime(1);
  EXPECT_FALSE(p.RecordSave(25, 100, 10));
  EXPECT_EQ(p.interval(), 25);
}

TEST(CheckpointIntervalTest, AutoPolicyUsesTheConfiguredIntervalUntilMeasured) {
  IntervalPolicyOptions o;
  o.automatic = true;
  o.interval = 20;
  o.total_steps = 100000;
  o.prior_rate_per_hour = 1.0 / 3.0;
  CheckpointIntervalPolicy p(o, /*resume_step=*/0);
  EXPECT_EQ(p.interval(), 20);
  EXPECT_FALSE(p.ShouldSave(19));
  EXPECT_TRUE(p.ShouldSave(20));
  // Step times 9, 10, 11, 50 (an outlier): the median 11 (upper median of 4) is used.
  for (double s : {9.0, 10.0, 11.0, 50.0}) p.RecordStepTime(s);
  EXPECT_TRUE(p.RecordSave(20, /*blocking_seconds=*/60, /*process_elapsed_s=*/0));
  // Daly(60, 10800) = 1098.77 s / 11 s = 99.9 -> 100 steps.
  EXPECT_EQ(p.interval(), 100);
  EXPECT_FALSE(p.ShouldSave(119));
  EXPECT_TRUE(p.ShouldSave(120));  // counted from the last save
  EXPECT_NE(p.Explain().find("checkpoint cost 60.000 s, step 11.000 s, 0.3333 failures/hour"),
            std::string::npos)
      << p.Explain();
  // Same inputs again: no change, nothing logged.
  EXPECT_FALSE(p.RecordSave(120, 60, 0));
  // Another rank's interval (rank 0's, broadcast) is adopted, clamped to the run.
  p.AdoptInterval(37);
  EXPECT_EQ(p.interval(), 37);
  EXPECT_TRUE(p.ShouldSave(157));
  p.AdoptInterval(0);
  EXPECT_EQ(p.interval(), 1);
}

TEST(CheckpointIntervalTest, ObservedFailuresShortenTheInterval) {
  IntervalPolicyOptions quiet;
  quiet.automatic = true;
  quiet.total_steps = 1000000;
  quiet.prior_rate_per_hour = 0.1;
  IntervalPolicyOptions failing = quiet;
  failing.observed.restarts = 3;
  failing.observed.run_elapsed_s = 10 * 3600;  // 3 failures in 10 h: rate 0.2/h
  CheckpointIntervalPolicy a(quiet, 0), b(failing, 0);
  for (auto* p : {&a, &b}) {
    p->RecordStepTime(1);
    p->RecordSave(10, 30, 0);
  }
  EXPECT_DOUBLE_EQ(a.failure_rate_per_hour(), 0.1);
  EXPECT_DOUBLE_EQ(b.failure_rate_per_hour(), 0.2);
  // Daly(30, 36000) = 1449.76 s; Daly(30, 18000) = 1019.33 s (1 s steps).
  EXPECT_EQ(a.interval(), OptimalIntervalSteps(30, 1, 0.1, 1000000));
  EXPECT_EQ(b.interval(), OptimalIntervalSteps(30, 1, 0.2, 1000000));
  EXPECT_EQ(a.interval(), 1450);
  EXPECT_EQ(b.interval(), 1019);
}

TEST(CheckpointIntervalTest, ConfigAcceptsAnIntegerOrAuto) {
  Result<Config> fixed = ParseConfig("[checkpoint]\ninterval = 40\n", {}, "t.toml");
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(fixed->checkpoint.interval, 40);
  EXPECT_FALSE(fixed->checkpoint.interval_auto);
  EXPECT_FALSE(fixed->checkpoint.async);

  Result<Config> autos =
      ParseConfig("[checkpoint]\ninterval = \"auto\"\nfailure_rate_per_hour = 0.5\nasync = true\n",
                  {}, "t.toml");
  ASSERT_TRUE(autos.ok()) << autos.status().message();
  EXPECT_TRUE(autos->checkpoint.interval_auto);
  EXPECT_EQ(autos->checkpoint.interval, 100);  // the default, used until measured
  EXPECT_DOUBLE_EQ(autos->checkpoint.failure_rate_per_hour, 0.5);
  EXPECT_TRUE(autos->checkpoint.async);
  // Round trip through the TOML a checkpoint records.
  Result<Config> again = ParseConfig(ConfigToToml(*autos), {}, "roundtrip");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(again->checkpoint.interval_auto);
  EXPECT_TRUE(again->checkpoint.async);

  Result<Config> over = ParseConfig("", {"checkpoint.interval=auto"}, "t.toml");
  ASSERT_TRUE(over.ok()) << over.status().message();
  EXPECT_TRUE(over->checkpoint.interval_auto);

  Result<Config> bad = ParseConfig("[checkpoint]\ninterval = \"often\"\n", {}, "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("checkpoint.interval = \"often\" is invalid: expected an "
                                        "integer or \"auto\""),
            std::string::npos)
      << bad.status().message();
  Result<Config> zero = ParseConfig("[checkpoint]\nfailure_rate_per_hour = 0\n", {}, "t.toml");
  EXPECT_FALSE(zero.ok());
}

}  // namespace
}  // namespace tenax::train
