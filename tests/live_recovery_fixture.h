// The fixture of tests/live_recovery_e2e_test.cc (resilience.mode = "live" through `tenax launch`):
// the runs' settings, the unfailed DDP run every case compares with, and the checks of a live run
// against an unfailed one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace tenax::testing {

inline std::string LiveTrain(const TempDir& dir, const std::string& name,
                             const std::string& extra = "") {
  return ResilienceTrain(dir.path(), name, extra);
}

// resilience.mode = "live" (issue 34): four data-parallel replicas; a rank killed mid-run leaves
// the group while the other three train on with its samples, and a replacement heals from a
// live rank. Against an unfailed run of the same layout: the same steps, the same samples (data
// cursor and tokens), and losses within 1e-6 relative at every step (the only difference is the
// order in which fp32 gradients are summed while a rank's samples run on another).
class LiveRecoveryE2E : public ::testing::Test {
 protected:
  static std::string Ddp(const std::string& name, const std::string& extra = "") {
    return LiveTrain(*dir_, name,
                     "--set training.steps=16 --set parallelism.data_parallel_replicate=4 "
                     "--set parallelism.data_parallel_shard=1 " +
                         extra);
  }
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax("launch --nproc-per-node 4 -- " + Ddp("clean"), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::vector<double> Losses(const std::string& run) {
    return ReadMetric(*dir_ / (run + "/metrics.jsonl"), "loss");
  }
  static std::vector<double> ValLosses(const std::string& run) {
    return ReadMetric(*dir_ / (run + "/metrics.jsonl"), "val_loss");
  }
  static nlohmann::json FinalState(const std::string& run) {
    return nlohmann::json::parse(
        ReadFile(*dir_ / (run + "/checkpoints/step_00000016/train_state.json")));
  }
  // Runs `name` live with `inject`; checks the trajectory against the clean run and returns
  // goodput.json.
  // `layout`: more train arguments, for the live run and its unfailed `clean` one; `windows`: the
  // data cursor after 16 steps (4 windows per data-parallel rank).
  static nlohmann::json Live(const std::string& name, const std::string& inject,
                             std::string* output, const std::string& flags = "",
                             const std::string& layout = "", const std::string& clean_run = "clean",
                             int windows = 256, int nproc = 4) {
    auto r =
        RunTenax("launch --nproc-per-node " + std::to_string(nproc) + " " + flags + " --inject " +
                     inject + " -- " + Ddp(name, "--set resilience.mode=live " + layout),
                 dir_->path());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    *output = r.output;
    const std::vector<double> clean = Losses(clean_run), live = Losses(name);
    EXPECT_EQ(live.size(), 16u) << r.output;  // every step logged, whoever led the group
    for (size_t i = 0; i < clean.size() && i < live.size(); ++i) {
      EXPECT_NEAR(live[i], clean[i], 1e-6 * std::abs(clean[i])) << "step " << i + 1;
    }
    // Every evaluation (steps 5, 10, 15, 16) logged once, over all of the validation windows
    // (short-handed, the missing replicas' too).
    const std::vector<double> clean_val = ValLosses(clean_run), live_val = ValLosses(name);
    EXPECT_EQ(clean_val.size(), 4u);
    EXPECT_EQ(live_val.size(), clean_val.size()) << r.output;
    for (size_t i = 0; i < clean_val.size() && i < live_val.size(); ++i) {
      EXPECT_NEAR(live_val[i], clean_val[i], 1e-6 * std::abs(clean_val[i])) << "evaluation " << i;
    }
    const nlohmann::json a = FinalState(clean_run), b = FinalState(name);
    EXPECT_EQ(b["data"]["position"], a["data"]["position"]);  // no sample lost or trained twice
    EXPECT_EQ(b["data"]["position"], windows);
    EXPECT_EQ(b["tokens_seen"], a["tokens_seen"]);
    EXPECT_EQ(b["optimizer_step"], a["optimizer_step"]);
    return nlohmann::json::parse(ReadFile(*dir_ / (name + "/goodput.json")));
  }
  // The one live recovery of `report`: rank `rank` failed after `step`, healed from a live rank.
  static void ExpectHealed(const nlohmann::json& report, int rank, int step,
                           const std::string& kind = "crash") {
    EXPECT_EQ(report["exit_code"], 0);
    EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
    EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
    ASSERT_EQ(report["live_recoveries"].size(), 1u) << report.dump(2);
    const auto& l = report["live_recoveries"][0];
    EXPECT_EQ(l["rank"], rank);
    EXPECT_EQ(l["kind"], kind);
    EXPECT_EQ(l["step"], step) << "the last step it finished";
    EXPECT_EQ(l["epoch"], 1);
    EXPECT_EQ(l["members"].size(), 3u);
    EXPECT_EQ(l["joined_epoch"], 2);
    EXPECT_GT(l["healed_bytes"].get<int64_t>(), 100000);  // weights and Adam moments
    EXPECT_GE(l["healed_from"].get<int>(), 0);
    EXPECT_NE(l["healed_from"], rank);
    EXPECT_GE(l["steps_short_handed"].get<int64_t>(), 1);
    EXPECT_GT(l["healed_at_s"].get<double>(), l["time_s"].get<double>());
    // Its replacement was seen ready (set up) in between: the healing's two parts.
    ASSERT_TRUE(l.contains("ready_at_s")) << l.dump();
    EXPECT_GE(l["ready_at_s"].get<double>(), l["time_s"].get<double>());
    EXPECT_LE(l["ready_at_s"].get<double>(), l["healed_at_s"].get<double>());
  }
  // HSDP 2 x 2, and its unfailed run (`hsdp_clean`, made once per test process).
  static constexpr const char* kHsdp =
      "--set parallelism.data_parallel_replicate=2 --set parallelism.data_parallel_shard=2";
  static void HsdpClean() {
    if (std::filesystem::exists(*dir_ / "hsdp_clean/metrics.jsonl")) return;
    auto clean = RunTenax("launch --nproc-per-node 4 -- " + Ddp("hsdp_clean", kHsdp), dir_->path());
    ASSERT_EQ(clean.exit_code, 0) << clean.output;
  }
  // goodput.json's live_recoveries, by the rank each is for.
  static std::map<int, nlohmann::json> RecoveriesByRank(const nlohmann::json& report) {
    std::map<int, nlohmann::json> by_rank;
    for (const auto& l : report["live_recoveries"]) by_rank[l["rank"].get<int>()] = l;
    return by_rank;
  }
  inline static TempDir* dir_ = nullptr;
};

}  // namespace tenax::testing
