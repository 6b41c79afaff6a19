// RunPaths names every file of a run folder once; a relative checkpoint folder sits inside the run
// folder, an absolute one where it says, an empty one at the default.
#include "tenax/core/run_paths.h"

#include <gtest/gtest.h>

namespace tenax {
namespace {

TEST(RunPaths, NamesEveryFileOfTheRunFolder) {
  const RunPaths p = RunPaths::Of("runs", "demo", "checkpoints");
  EXPECT_EQ(p.root(), "runs/demo");
  EXPECT_EQ(p.config(), "runs/demo/config.toml");
  EXPECT_EQ(p.metrics(), "runs/demo/metrics.jsonl");
  EXPECT_EQ(p.tensorboard(), "runs/demo/tb");
  EXPECT_EQ(p.loss_spikes(), "runs/demo/loss_spikes.json");
  EXPECT_EQ(p.goodput(), "runs/demo/goodput.json");
  EXPECT_EQ(p.report_html(), "runs/demo/report.html");
  EXPECT_EQ(p.flight(), "runs/demo/flight");
  EXPECT_EQ(p.lock(), "runs/demo/.tenax.lock");
  EXPECT_EQ(p.owner(), "runs/demo/.tenax.owner");
  EXPECT_EQ(p.checkpoints(), "runs/demo/checkpoints");
}

TEST(RunPaths, CheckpointFolderIsRelativeToTheRunUnlessAbsolute) {
  EXPECT_EQ(RunPaths("r", "ckpt").checkpoints(), "r/ckpt");
  EXPECT_EQ(RunPaths("r", "/shared/ckpt").checkpoints(), "/shared/ckpt");
  EXPECT_EQ(RunPaths("r", "").checkpoints(), "r/checkpoints");
  EXPECT_EQ(RunPaths("r").checkpoints(), "r/checkpoints");
}

TEST(RunPaths, ReportChartsSitBesideThePage) {
  EXPECT_EQ(RunPaths::ReportChartsBeside("runs/x/report.html"), "runs/x/report");
  EXPECT_EQ(RunPaths::ReportChartsBeside("page.html"), "./report");
}

}  // namespace
}  // namespace tenax
