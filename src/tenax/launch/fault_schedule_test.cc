// The poisson schedule: arrivals are a function of the seed alone, their gaps, kinds and ranks
// have the distributions the spec asks for, the exposure clock stands while the job is not
// exposed and between an injected failure and its verdict, and a skipped arrival stops nothing.
#include "tenax/launch/fault_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace tenax::launch {
namespace {

protocol::Fault Spec(const std::string& text) {
  Result<std::vector<protocol::Fault>> f = protocol::ParseFaults(text);
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f->front();
}

// The first `n` arrivals, each applied and resolved the moment it is due (no time paused).
std::vector<Arrival> Draw(const std::string& spec, int ranks, int n) {
  FaultSchedule s(Spec(spec), ranks);
  std::vector<Arrival> out;
  double now = 0;
  s.Tick(now, true);
  while (static_cast<int>(out.size()) < n) {
    now += s.SecondsUntilDue(now);
    s.Tick(now, true);
    const std::optional<Arrival> a = s.Due();
    if (!a) continue;  // rounding left it a hair short
    out.push_back(*a);
    s.Applied(now, 0, a->local_rank, 0, "test");
    s.Resolved(now);
  }
  return out;
}

TEST(FaultSchedule, TheSeedAloneDecidesTheArrivals) {
  const auto a = Draw("poisson:crash=60/h:hang=30/h:nan=30/h:seed=5", 4, 50);
  const auto b = Draw("poisson:crash=60/h:hang=30/h:nan=30/h:seed=5", 4, 50);
  const auto c = Draw("poisson:crash=60/h:hang=30/h:nan=30/h:seed=6", 4, 50);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, static_cast<int>(i));
    EXPECT_DOUBLE_EQ(a[i].exposure_s, b[i].exposure_s);
    EXPECT_EQ(a[i].kind, b[i].kind);
    EXPECT_EQ(a[i].local_rank, b[i].local_rank);
    differ += a[i].exposure_s != c[i].exposure_s;
    if (i > 0) {
      EXPECT_GT(a[i].exposure_s, a[i - 1].exposure_s);
    }
  }
  EXPECT_EQ(differ, 50);
}

TEST(FaultSchedule, GapsKindsAndRanksFollowTheRates) {
  // 120 failures per hour in all: a mean gap of 30 s; kinds 1/2, 1/3, 1/6; ranks uniform over 3.
  const int n = 30000;
  const auto a = Draw("poisson:crash=60/h:hang=40/h:nan=20/h:seed=11", 3, n);
  const double mean_gap = a.back().exposure_s / n;
  EXPECT_NEAR(mean_gap, 30.0, 3 * 30.0 / std::sqrt(n));  // 3 standard errors
  std::map<ScheduledKind, int> kinds;
  std::map<int, int> ranks;
  double sq = 0, prev = 0;
  for (const Arrival& x : a) {
    ++kinds[x.kind];
    ++ranks[x.local_rank];
    sq += (x.exposure_s - prev) * (x.exposure_s - prev);
    prev = x.exposure_s;
  }
  // Exponential gaps: the variance equals the squared mean (a fixed period would give 0).
  EXPECT_NEAR(sq / n - mean_gap * mean_gap, 900.0, 60.0);
  auto share = [&](int count) { return static_cast<double>(count) / n; };
  const double se = 3 * std::sqrt(0.25 / n);
  EXPECT_NEAR(share(kinds[ScheduledKind::kCrash]), 0.5, se);
  EXPECT_NEAR(share(kinds[ScheduledKind::kHang]), 1.0 / 3, se);
  EXPECT_NEAR(share(kinds[ScheduledKind::kNan]), 1.0 / 6, se);
  ASSERT_EQ(ranks.size(), 3u);
  for (const auto& [rank, count] : ranks) EXPECT_NEAR(share(count), 1.0 / 3, se) << rank;
  // A kind without a rate never comes up.
  for (const Arrival& x : Draw("poisson:hang=10/h:seed=2", 2, 200)) {
    EXPECT_EQ(x.kind, ScheduledKind::kHang);
  }
}

TEST(FaultSchedule, TheClockStandsWhenNotExposedAndUntilTheVerdict) {
  FaultSchedule s(Spec("poisson:crash=36/h:seed=3"), 2);  // a mean gap of 100 s
  EXPECT_TRUE(std::isinf(s.SecondsUntilDue(0)));          // not exposed yet
  s.Tick(50, false);                                      // start-up: not exposed
  EXPECT_DOUBLE_EQ(s.exposure_s(), 0);
  s.Tick(60, true);  // the first generation is ready at 60
  EXPECT_DOUBLE_EQ(s.exposure_s(), 0);
  const double due = s.SecondsUntilDue(60);
  ASSERT_GT(due, 0);
  s.Tick(60 + due / 2, true);
  EXPECT_NEAR(s.exposure_s(), due / 2, 1e-9);
  EXPECT_FALSE(s.Due());
  s.Tick(60 + due + 1, true);
  const std::optional<Arrival> a = s.Due();
  ASSERT_TRUE(a);
  EXPECT_NEAR(a->exposure_s, due, 1e-9);
  s.Applied(60 + due + 1, 2, a->local_rank, 123, "SIGKILL");
  EXPECT_EQ(s.awaiting(), 0);
  EXPECT_TRUE(std::isinf(s.SecondsUntilDue(70 + due)));
  s.Tick(60 + due + 30, true);  // detecting: the clock stands
  EXPECT_NEAR(s.exposure_s(), due + 1, 1e-9);
  EXPECT_FALSE(s.Due());
  s.Resolved(60 + due + 31);  // the verdict: the restart is exposed
  EXPECT_EQ(s.awaiting(), -1);
  s.Tick(60 + due + 41, true);
  EXPECT_NEAR(s.exposure_s(), due + 11, 1e-9);

  const nlohmann::json r = s.Report();
  EXPECT_EQ(r["spec"], "poisson:crash=36/h:seed=3");
  EXPECT_DOUBLE_EQ(r["rates_per_hour"]["crash"].get<double>(), 36);
  EXPECT_DOUBLE_EQ(r["rates_per_hour"]["hang"].get<double>(), 0);
  EXPECT_EQ(r["seed"], 3);
  ASSERT_EQ(r["injected"].size(), 1u);
  const nlohmann::json& x = r["injected"][0];
  EXPECT_EQ(x["kind"], "crash");
  EXPECT_EQ(x["generation"], 2);
  EXPECT_EQ(x["step"], 123);
  EXPECT_EQ(x["how"], "SIGKILL");
  EXPECT_NEAR(x["exposure_s"].get<double>(), due, 1e-9);
  EXPECT_NEAR(x["applied_exposure_s"].get<double>(), due + 1, 1e-9);
  EXPECT_NEAR(x["time_s"].get<double>(), 61 + due, 1e-9);
}

TEST(FaultSchedule, ASkippedArrivalIsRecordedAndTheClockRunsOn) {
  FaultSchedule s(Spec("poisson:crash=36/h:seed=4"), 4);
  s.Tick(0, true);
  const double due = s.SecondsUntilDue(0);
  s.Tick(due, true);
  const std::optional<Arrival> a = s.Due();
  ASSERT_TRUE(a);
  s.Skipped(due, a->local_rank, "its replica is being replaced");
  EXPECT_EQ(s.awaiting(), -1);
  const std::optional<Arrival> next = s.Due();  // the next one is drawn, not yet due
  EXPECT_TRUE(!next || next->index == 1);
  s.Tick(due + 5, true);
  EXPECT_NEAR(s.exposure_s(), due + 5, 1e-9);  // the clock did not stand
  const nlohmann::json r = s.Report();
  EXPECT_TRUE(r["injected"].empty());
  ASSERT_EQ(r["skipped"].size(), 1u);
  EXPECT_EQ(r["skipped"][0]["index"], 0);
  EXPECT_EQ(r["skipped"][0]["rank"], a->local_rank);
  EXPECT_EQ(r["skipped"][0]["why"], "its replica is being replaced");
  // The arrivals after it are the ones the seed gives without the skip.
  FaultSchedule t(Spec("poisson:crash=36/h:seed=4"), 4);
  t.Tick(0, true);
  t.Tick(due, true);
  t.Applied(due, 0, a->local_rank, 0, "test");
  t.Resolved(due);
  EXPECT_NEAR(s.SecondsUntilDue(due + 5), t.SecondsUntilDue(due + 5), 1e-9);
}

}  // namespace
}  // namespace tenax::launch
