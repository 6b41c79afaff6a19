#include "tenax/config/resume_changes.h"

#include <gtest/gtest.h>

#include "tenax/config/config.h"

namespace tenax {
namespace {

Config Parse(const std::string& text) {
  Result<Config> c = ParseConfig(text, {}, "t.toml");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : Config{};
}

TEST(ResumeChanges, SameSettingsSayNothing) {
  // Written out in full on one side, left at defaults on the other: equal after normalising.
  const Config c = Parse("[optimizer]\nlr = 3e-4\n");
  Result<std::vector<std::string>> d = TrajectoryChanges(ConfigToToml(Config{}), c);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->empty()) << (*d)[0];
  // Settings outside the trajectory (logging, checkpoints, layout) are not reported.
  d = TrajectoryChanges("", Parse("[metrics]\nlog_interval = 5\n[parallelism]\n"
                                  "data_parallel_shard = 2\n[checkpoint]\ninterval = 3\n"));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(ResumeChanges, NamesEveryChangedKeyWithBothValues) {
  const std::string saved = ConfigToToml(Parse("[optimizer]\nlr = 3e-4\n[training]\nsteps = 20\n"));
  const Config now = Parse(
      "[optimizer]\nlr = 1e-4\nweight_decay = 0.0\n[lr_scheduler]\nname = \"wsd\"\n"
      "[training]\nsteps = 40\nmax_norm = 0.5\n[job]\nseed = 3\n");
  Result<std::vector<std::string>> d = TrajectoryChanges(saved, now);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const std::vector<std::string> want = {"optimizer.lr: 0.0003 -> 0.0001",
                                         "optimizer.weight_decay: 0.1 -> 0",
                                         "lr_scheduler.name: \"cosine\" -> \"wsd\"",
                                         "training.steps: 20 -> 40",
                                         "training.max_norm: 1 -> 0.5",
                                         "job.seed: 0 -> 3"};
  EXPECT_EQ(*d, want);
}

TEST(ResumeChanges, UnreadableSavedConfigIsAnError) {
  Result<std::vector<std::string>> d = TrajectoryChanges("[optimizer]\nlearning_rate = 1\n", {});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("learning_rate"), std::string::npos);
}

}  // namespace
}  // namespace tenax
