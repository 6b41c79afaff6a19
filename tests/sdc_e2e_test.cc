// Silent data corruption found by replay (resilience.sdc_check_interval, train/sdc_check.h), run
// by `tenax launch` as a user would, with a defective device played by `--inject sdc:...` in each
// of its three places (a gradient bucket, an activation, a weight), under DDP, FSDP, tensor,
// pipeline and expert parallelism, and under live recovery. Each run must: detect the corruption
// at the first check after it began (within sdc_check_interval steps), name the right rank in
// sdc.json, goodput.json and the report, quarantine its slot (a spare takes the rank), and end
// with weights bit-identical to an uncorrupted run; every committed checkpoint equals the
// uncorrupted run's of the same step, so none holds corrupted state. Also: the checks themselves
// change nothing, and layouts the check cannot run are refused before any rank trains. Random
// ranks and steps, 20 trials per kind: bench/sdc.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include "test_util.h"

namespace tenax::testing {
namespace {

constexpr int kInterval = 5;  // resilience.sdc_check_interval

const std::map<std::string, std::string> kLayouts = {
    {"ddp", "--set parallelism.data_parallel_replicate=4 --set parallelism.data_parallel_shard=1"},
    {"fsdp", "--set parallelism.data_parallel_replicate=1 --set parallelism.data_parallel_shard=4"},
    {"tp",
     "--set parallelism.data_parallel_replicate=1 --set parallelism.data_parallel_shard=3 "
     "--set parallelism.tensor_parallel=2"},
    // HSDP: three and four replicas of two ranks (checked live: a rank against the rank at its
    // place in another replica).
    {"hsdp3",
     "--set parallelism.data_parallel_replicate=3 --set parallelism.data_parallel_shard=2"},
    {"hsdp4",
     "--set parallelism.data_parallel_replicate=4 --set parallelism.data_parallel_shard=2"},
    // Three replicas of a tensor-parallel pair.
    {"dp3tp",
     "--set parallelism.data_parallel_replicate=3 --set parallelism.data_parallel_shard=1 "
     "--set parallelism.tensor_parallel=2"},
    // Three replicas of two pipeline stages.
    {"dp3pp",
     "--set parallelism.data_parallel_replicate=3 --set parallelism.data_parallel_shard=1 "
     "--set parallelism.pipeline_parallel=2 --set parallelism.microbatches=2"},
    // Mixture of experts (8 experts, top 2, softmax router with its load-balancing loss), FSDP.
    {"moe",
     "--set parallelism.data_parallel_replicate=1 --set parallelism.data_parallel_shard=4 "
     "--set model.preset=debug-moe"},
    // The same over 6 ranks with expert parallelism 2: three expert-parallel groups.
    {"moe-ep",
     "--set parallelism.data_parallel_replicate=1 --set parallelism.data_parallel_shard=6 "
     "--set model.preset=debug-moe --set parallelism.expert_parallel=2"},
    // HSDP 3 x 2 with it: three replicas, each one expert-parallel group.
    {"hsdp3-ep",
     "--set parallelism.data_parallel_replicate=3 --set parallelism.data_parallel_shard=2 "
     "--set model.preset=debug-moe --set parallelism.expert_parallel=2"},
};
int Ranks(const std::string& layout) {
  static const std::map<std::string, int> kNotFour = {{"tp", 6},      {"hsdp3", 6}, {"hsdp4", 8},
                                                      {"dp3tp", 6},   {"dp3pp", 6}, {"moe-ep", 6},
                                                      {"hsdp3-ep", 6}};
  const auto it = kNotFour.find(layout);
  return it == kNotFour.end() ? 4 : it->second;
}

class SdcE2E : public ::testing::Test {
 protected:
  static std::string Train(const std::string& name, const std::string& layout,
                           const std::string& extra = "") {
    return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
           "--set training.seq_len=32 --set data.synthetic.train_tokens=40000 "
           "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
           "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 "
           "--set metrics.eval_interval=5 --set metrics.progress=never --set optimizer.lr=3e-3 "
           "--set checkpoint.interval=4 --set training.steps=12 "
           "--set training.local_batch_size=4 --set job.dump_folder=" +
           dir_->path() + " --set job.name=" + name + " " + kLayouts.at(layout) + " " + extra;
  }
  static std::string Checked(const std::string& name, const std::string& layout,
                             const std::string& extra = "") {
    return Train(name, layout,
                 "--set resilience.sdc_check_interval=" + std::to_string(kInterval) + " " + extra);
  }
  // ctest runs each test in a process of its own: the uncorrupted run of a layout is made when a
  // test first needs it, not for every layout in every process.
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  // `extra` and `suffix` as Corrupt's: the reference run of those settings.
  static std::string Clean(const std::string& layout, const std::string& extra = "",
                           const std::string& suffix = "") {
    const std::string name = "clean-" + layout + suffix;
    if (!std::filesystem::exists(*dir_ / (name + "/checkpoints/step_00000012/COMMITTED"))) {
      auto r = RunTenax("launch --nproc-per-node " + std::to_string(Ranks(layout)) + " -- " +
                            Checked(name, layout, extra),
                        dir_->path());
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
    return name;
  }
  static void TearDownTestSuite() { delete dir_; }

  // Every committed checkpoint of `run` against `reference`'s of the same step: the same
  // tensors, bit for bit. Returns how many were compared.
  static int ExpectCheckpointsEqual(const std::string& run, const std::string& reference) {
    namespace fs = std::filesystem;
    int compared = 0;
    for (const auto& step : fs::directory_iterator(*dir_ / (run + "/checkpoints"))) {
      if (!fs::exists(step.path() / "COMMITTED")) continue;
      const fs::path ref = fs::path(*dir_ / (reference + "/checkpoints")) / step.path().filename();
      EXPECT_TRUE(fs::exists(ref / "COMMITTED")) << step.path();
      for (const auto& f : fs::directory_iterator(step.path())) {
        if (f.path().extension() != ".safetensors") continue;
        // EXPECT_TRUE: do not print megabytes on a mismatch.
        EXPECT_TRUE(ReadFile(f.path()) == ReadFile(ref / f.path().filename())) << f.path();
        ++compared;
      }
    }
    return compared;
  }

  // Runs `layout` with a defective device on `rank` from `step` on; checks the recovery and
  // returns goodput.json. `extra`: more training settings (`suffix` names the run apart); with
  // `same_reference` the checkpoints are compared with an uncorrupted run of those settings
  // too, otherwise with the layout's restart-mode run.
  static nlohmann::json Corrupt(const std::string& layout, const std::string& where, int rank,
                                int step, const std::vector<int>& named, int spares = 1,
                                const std::string& extra = "", const std::string& suffix = "",
                                bool same_reference = false) {
    const std::string name = layout + "-" + where + suffix;
    auto r = RunTenax("launch --nproc-per-node " + std::to_string(Ranks(layout)) + " --spares " +
                          std::to_string(spares) + " --max-restarts 2 --inject sdc:rank=" +
                          std::to_string(rank) + ":step=" + std::to_string(step) +
                          ":where=" + where + " -- " + Checked(name, layout, extra),
                      dir_->path());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::filesystem::exists(*dir_ / (name + "/checkpoints/step_00000012/COMMITTED")))
        << r.output;
    EXPECT_GE(
        ExpectCheckpointsEqual(name, same_reference ? Clean(layout, extra, suffix) : Clean(layout)),
        3 * Ranks(layout) / 2)
        << name;

    const auto sdc = nlohmann::json::parse(ReadFile(*dir_ / (name + "/sdc.json")))["detections"];
    EXPECT_EQ(sdc.size(), named.size()) << sdc.dump(2);
    for (size_t i = 0; i < sdc.size() && i < named.size(); ++i) {
      const auto& d = sdc[i];
      EXPECT_EQ(d["rank"], named[i]) << d.dump(2);
      EXPECT_EQ(d["generation"], 0);
      const int detected = d["step"].get<int>();
      EXPECT_GE(detected, step) << d.dump(2);
      EXPECT_LT(detected - step, kInterval) << "detected within sdc_check_interval steps";
      EXPECT_NE(d["own"], d["replay"]) << d.dump(2);
      EXPECT_FALSE(d["host"].get<std::string>().empty()) << d.dump(2);
    }
    for (int q : named) {
      EXPECT_NE(r.output.find("slot " + std::to_string(q) +
                              " computed wrong results (found by replay): quarantined at once"),
                std::string::npos)
          << r.output;
    }
    const auto g = nlohmann::json::parse(ReadFile(*dir_ / (name + "/goodput.json")));
    EXPECT_EQ(g["exit_code"], 0);
    EXPECT_EQ(g["failures"].size(), 1u) << g.dump(2);
    if (!g["failures"].empty()) {
      EXPECT_EQ(g["failures"][0]["kind"], "silent-corruption") << g.dump(2);
      EXPECT_NE(std::find(named.begin(), named.end(), g["failures"][0]["rank"].get<int>()),
                named.end())
          << g.dump(2);
    }
    EXPECT_EQ(g["sdc"], sdc);
    const std::string report = ReadFile(*dir_ / (name + "/report.html"));
    EXPECT_NE(report.find("<table id=\"sdc\">"), std::string::npos);
    EXPECT_NE(r.output.find("silent data corruption at step"), std::string::npos) << r.output;
    return g;
  }
  // Live, short of a replica: rank `killed` is killed at the start of step 5 while rank `bad`'s
  // device has gone bad. The replicas left run step 5 again with the lost one's samples; the check
  // of that step replays, in each ring, the samples the rank before runs now (its own and a part
  // of the lost replica's), names `bad`, and the job resumes from step 4's checkpoint with its slot
  // quarantined (a spare took the lost replica's place live, another takes `bad`'s): its
  // checkpoints are the unfailed run's, bit for bit. `said`: the check's line for the short epoch.
  static void ExpectShortOfAReplicaNamesTheRank(const std::string& name, const std::string& layout,
                                                int spares, int killed, int bad,
                                                const std::string& said,
                                                const std::vector<int>& mismatched) {
    const std::string q = std::to_string(bad);
    auto r = RunTenax(
        "launch --nproc-per-node " + std::to_string(Ranks(layout)) + " --spares " +
            std::to_string(spares) + " --max-restarts 2 --inject crash:rank=" +
            std::to_string(killed) + ":step=5,sdc:rank=" + q + ":step=5:where=grad -- " +
            Train(name, layout, "--set resilience.mode=live --set resilience.sdc_check_interval=1"),
        dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("step 5: silent-data-corruption check over the " + said),
              std::string::npos)
        << r.output;
    const auto sdc = nlohmann::json::parse(ReadFile(*dir_ / (name + "/sdc.json")))["detections"];
    ASSERT_EQ(sdc.size(), 1u) << sdc.dump(2);
    EXPECT_EQ(sdc[0]["rank"], bad) << sdc.dump(2);
    EXPECT_EQ(sdc[0]["step"], 5) << sdc.dump(2);
    EXPECT_EQ(sdc[0]["mismatched"], nlohmann::json(mismatched)) << sdc.dump(2);
    EXPECT_NE(r.output.find("slot " + q +
                            " computed wrong results (found by replay): quarantined at once"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("has no healthy slot left"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("silent data corruption is not recovered live"), std::string::npos)
        << r.output;
    const auto g = nlohmann::json::parse(ReadFile(*dir_ / (name + "/goodput.json")));
    ASSERT_FALSE(g["failures"].empty()) << g.dump(2);
    EXPECT_EQ(g["failures"].back()["kind"], "silent-corruption") << g.dump(2);
    EXPECT_EQ(g["failures"].back()["rank"], bad) << g.dump(2);
    EXPECT_EQ(g["restarts"], 1) << g.dump(2);
    EXPECT_GE(ExpectCheckpointsEqual(name, Clean(layout)), 3 * Ranks(layout) / 2);
  }
  static void ExpectMoeChecksChangeNothing(const std::string& layout) {
    const std::string sigmoid =
        "--set model.moe_router=sigmoid --set model.moe_bias_update_rate=0.01 "
        "--set model.moe_aux_loss_coef=0";
    auto r = RunTenax("launch --nproc-per-node " + std::to_string(Ranks(layout)) + " -- " +
                          Train(layout + "-unchecked", layout, sigmoid),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = RunTenax("launch --nproc-per-node " + std::to_string(Ranks(layout)) + " -- " +
                     Checked(layout + "-checked", layout, sigmoid),
                 dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GE(ExpectCheckpointsEqual(layout + "-checked", layout + "-unchecked"), 6);
    // Every step's routing counts as an unchecked run's (each token once per chosen expert): the
    // replays (at steps 2, 4, 5, 8, 10, 12) added none (the own pass starts the step's statistics
    // afresh).
    const auto routing = [&](const std::string& run) {
      std::vector<nlohmann::json> out;
      for (const auto& j : ReadJsonl(*dir_ / (run + "/metrics.jsonl"))) {
        if (j.contains("loss")) out.push_back(j["moe_expert_tokens"]);
      }
      return out;
    };
    const std::vector<nlohmann::json> counted = routing(layout + "-checked");
    EXPECT_EQ(counted.size(), 12u);
    EXPECT_EQ(counted, routing(layout + "-unchecked"));
    // The biases moved, and alike (the train state holds them).
    const auto bias = [&](const std::string& run) {
      return nlohmann::json::parse(ReadFile(
          *dir_ / (run + "/checkpoints/step_00000012/train_state.json")))["moe_expert_bias"];
    };
    const nlohmann::json checked = bias(layout + "-checked");
    EXPECT_EQ(checked, bias(layout + "-unchecked"));
    double moved = 0;
    for (const auto& row : checked) {
      for (const auto& b : row) moved += std::abs(b.get<double>());
    }
    EXPECT_GT(moved, 0.0) << "the biases never moved";
  }
  static TempDir* dir_;
};
TempDir* SdcE2E::dir_ = nullptr;

// The checks replay and compare, and otherwise change nothing: the same weights as a run without
// them, and their cost is printed at the start.
TEST_F(SdcE2E, ChecksChangeNothingAndPrintTheirCost) {
  auto r = RunTenax("launch --nproc-per-node 4 -- " + Train("unchecked-ddp", "ddp"), dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GE(ExpectCheckpointsEqual("unchecked-ddp", Clean("ddp")), 6);
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "clean-ddp/sdc.json"));
  r = RunTenax("launch --nproc-per-node 4 -- " + Checked("cost-ddp", "ddp") +
                   " --set training.steps=3 --set checkpoint.interval=100",
               dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The printed cost: the check's three parts, which add up to its total.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("silent-data-corruption checks \\(resilience.sdc_check_interval = 5\\): step 2's "
                 "check took ([0-9.]+)s \\(replaying another rank's step ([0-9.]+)s, digesting "
                 "this rank's gradients ([0-9.]+)s, gathering and comparing the digests "
                 "([0-9.]+)s\\) against ([0-9.]+)s for the step itself: about ([0-9.]+)% more")))
      << r.output;
  const double check = std::stod(m[1]), replay = std::stod(m[2]), digest = std::stod(m[3]),
               verify = std::stod(m[4]), own = std::stod(m[5]), pct = std::stod(m[6]);
  EXPECT_NEAR(check, replay + digest + verify, 0.0021);
  EXPECT_GT(replay, 0);
  EXPECT_GT(own, 0);
  // The percentage comes from the unrounded times, which lie within half a millisecond of the
  // printed ones; on a fast step (tens of milliseconds) that alone moves it by several percent.
  const double half_ms = 0.0005;
  const double lowest = 100 * std::max(0.0, check - half_ms) / 5 / (own + half_ms);
  const double highest = 100 * (check + half_ms) / 5 / std::max(half_ms, own - half_ms);
  EXPECT_GE(pct, lowest - 0.05) << "check " << check << "s, step " << own << "s";
  EXPECT_LE(pct, highest + 0.05) << "check " << check << "s, step " << own << "s";
}

TEST_F(SdcE2E, DdpGradientCorruption) { Corrupt("ddp", "grad", 2, 6, {2}); }
TEST_F(SdcE2E, DdpActivationCorruption) { Corrupt("ddp", "activation", 0, 9, {0}); }
// A corrupted weight stays corrupted in the rank's memory.
TEST_F(SdcE2E, DdpCorruptedWeight) { Corrupt("ddp", "weight", 3, 3, {3}); }
TEST_F(SdcE2E, FsdpGradientCorruption) { Corrupt("fsdp", "grad", 1, 11, {1}); }
TEST_F(SdcE2E, FsdpActivationCorruption) { Corrupt("fsdp", "activation", 2, 3, {2}); }
// Sharded: the rank's gathered copy is corrupted on every gather, from step 1 (a step no check
// sees: its wrong update reaches every replica, yet the next check still finds the rank).
TEST_F(SdcE2E, FsdpCorruptedGatheredWeight) { Corrupt("fsdp", "weight", 0, 1, {0}); }

// With a tolerance (as GPU ranks need): the statistics, not the bits, are compared; the replays
// of a CPU step agree exactly, and a corrupted activation moves them far past 1e-6. The run says
// how close the agreeing replays were.
TEST_F(SdcE2E, DdpActivationCorruptionFoundWithinATolerance) {
  const nlohmann::json g =
      Corrupt("ddp", "activation", 1, 7, {1}, 1, "--set resilience.sdc_tolerance=1e-6", "-tol");
  ASSERT_EQ(g["sdc"].size(), 1u) << g.dump(2);
  // The records carry the statistics the comparison used.
  EXPECT_NE(g["sdc"][0]["own"].get<std::string>().find(" norm "), std::string::npos) << g.dump(2);
}

// Mixture of experts: checks count each rank's routing apart (its load-balancing loss uses its
// own micro-batch's assignments), so a replay elsewhere computes the same bits, and a corrupted
// expert gradient or activation names its rank.
TEST_F(SdcE2E, MoeGradientCorruption) { Corrupt("moe", "grad", 1, 6, {1}); }
TEST_F(SdcE2E, MoeActivationCorruption) { Corrupt("moe", "activation", 3, 2, {3}); }
// A corrupted gathered weight of layer 0 moves the routing of many tokens. Counted over the whole
// batch, that moved every rank's load-balancing gradient, and every replay differed from its own
// pass ("no rank could be named"); counted per rank, only rank 2's step is wrong.
TEST_F(SdcE2E, MoeCorruptedGatheredWeight) { Corrupt("moe", "weight", 2, 1, {2}); }
// The replays add nothing to a step's routing statistics: with the DeepSeek-V3 router, whose
// selection biases move by the step's assignments, and no load-balancing loss (so counting each
// rank's routing apart changes nothing), a checked run ends where an unchecked one does.
TEST_F(SdcE2E, MoeChecksChangeNothing) { ExpectMoeChecksChangeNothing("moe"); }

// Expert parallelism 2 over 6 ranks: a group's all-to-all mixes its two ranks' tokens, so the
// group replays the group before it together (rings {0, 2, 4} and {1, 3, 5}). A corrupted
// gradient bucket stays on its rank; a corrupted activation reaches the other rank of its group
// through the all-to-all, and both are named (two spares take them).
TEST_F(SdcE2E, MoeExpertParallelGradientCorruption) { Corrupt("moe-ep", "grad", 3, 6, {3}); }
TEST_F(SdcE2E, MoeExpertParallelActivationCorruptionNamesItsGroup) {
  Corrupt("moe-ep", "activation", 2, 3, {2, 3}, /*spares=*/2);
}
TEST_F(SdcE2E, MoeExpertParallelChecksChangeNothing) { ExpectMoeChecksChangeNothing("moe-ep"); }

// Tensor parallelism: a corrupted gradient bucket stays on its rank; a corrupted activation
// crosses the TP all-reduce, so both ranks of the TP group compute wrongly, both are named and
// both slots quarantined (two spares take them).
TEST_F(SdcE2E, TensorParallelGradientCorruptionNamesTheRank) { Corrupt("tp", "grad", 3, 6, {3}); }
TEST_F(SdcE2E, TensorParallelActivationCorruptionNamesItsGroup) {
  Corrupt("tp", "activation", 3, 6, {2, 3}, /*spares=*/2);
}

// Live recovery (resilience.mode = "live"): a corruption is not recovered live (it may have
// reached every replica through the reductions since the last check), so the job goes back to
// the verified checkpoint with the faulty slot quarantined, and ends bit for bit where the
// unchecked restart-mode run does.
TEST_F(SdcE2E, LiveDdpGradientCorruption) {
  const nlohmann::json g =
      Corrupt("ddp", "grad", 2, 6, {2}, 1, "--set resilience.mode=live", "-live");
  EXPECT_TRUE(g["live_recoveries"].empty()) << g.dump(2);
}
TEST_F(SdcE2E, LiveDdpCorruptedWeight) {
  Corrupt("ddp", "weight", 1, 3, {1}, 1, "--set resilience.mode=live", "-live");
}

// Live HSDP 3 x 2: each rank replays the rank at its place in the replica before its own (rings
// {0, 2, 4} and {1, 3, 5}), the replica's two ranks at once; the faulty rank is named and the
// checkpoints are the restart-mode run's, bit for bit.
TEST_F(SdcE2E, LiveHsdpGradientCorruption) {
  const nlohmann::json g =
      Corrupt("hsdp3", "grad", 3, 6, {3}, 1, "--set resilience.mode=live", "-live");
  EXPECT_TRUE(g["live_recoveries"].empty()) << g.dump(2);
}
TEST_F(SdcE2E, LiveHsdpActivationCorruption) {
  Corrupt("hsdp3", "activation", 4, 3, {4}, 1, "--set resilience.mode=live", "-live");
}
// The same rings with a tensor-parallel pair as the replica ({0, 2, 4} and {1, 3, 5}). Against
// an uncorrupted live run: with TP inside a replica the two modes reduce the gradients in
// another order (live: every sum inside the replica first, Fsdp::FinishStep), and their weights
// differ in the last bits already at the first checkpoint (step 4), checks or not.
TEST_F(SdcE2E, LiveTensorParallelReplicasGradientCorruption) {
  Corrupt("dp3tp", "grad", 3, 6, {3}, 1, "--set resilience.mode=live", "-live",
          /*same_reference=*/true);
}

// The same rings with two pipeline stages as the replica: the stages of a replica replay its
// micro-batches together, each stage against the same stage of the replica before. A gradient
// bucket's corruption stays on its stage's rank; an activation's reaches the next stage in the
// forward and the stage before in the backward, so both stages of the replica are named (two
// spares take them).
TEST_F(SdcE2E, LivePipelineReplicasGradientCorruption) {
  Corrupt("dp3pp", "grad", 3, 6, {3}, 1, "--set resilience.mode=live", "-live");
}
TEST_F(SdcE2E, LivePipelineReplicasActivationCorruptionNamesBothStages) {
  Corrupt("dp3pp", "activation", 2, 3, {2, 3}, 2, "--set resilience.mode=live", "-live");
}

// Experts split over each replica's two ranks (HSDP 3 x 2, expert_parallel 2): a replica is an
// expert-parallel group and replays as one, as in restart mode.
TEST_F(SdcE2E, LiveExpertParallelReplicasGradientCorruption) {
  Corrupt("hsdp3-ep", "grad", 3, 6, {3}, 1, "--set resilience.mode=live", "-live");
}

// DDP 4: rank 3 lost, rank 1 bad; the three members' ring.
TEST_F(SdcE2E, LiveCheckShortOfAMemberNamesTheRank) {
  ExpectShortOfAReplicaNamesTheRank("live-short", "ddp", 2, 3, 1, "3 live members (ranks 0,1,2)",
                                    {0, 1});
}

// HSDP 4 x 2: rank 7 lost (rank 6 with it, its replica), rank 3 bad; a ring for each place in a
// replica over the three replicas left ({0, 2, 4} and {1, 3, 5}).
TEST_F(SdcE2E, LiveHsdpCheckShortOfAReplicaNamesTheRank) {
  ExpectShortOfAReplicaNamesTheRank("live-hsdp-short", "hsdp4", 3, 7, 3,
                                    "3 live replicas (ranks 0,2,4 at rank 0's place", {1, 3});
}

TEST_F(SdcE2E, LayoutsTheCheckCannotRunAreRefusedBeforeAnyRankTrains) {
  auto r = RunTenax(
      "launch --nproc-per-node 2 -- " +
          Train(
              "two", "ddp",
              "--set resilience.sdc_check_interval=5 --set parallelism.data_parallel_replicate=2"),
      dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("resilience.sdc_check_interval = 5 needs at least 3 data-parallel ranks"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("training steps"), std::string::npos) << r.output;  // no rank trained
  EXPECT_NE(r.output.find("not restarting"), std::string::npos) << r.output;  // input to fix
  r = RunTenax("launch --nproc-per-node 4 -- " + Train("ep", "moe",
                                                       "--set resilience.sdc_check_interval=5 "
                                                       "--set parallelism.expert_parallel=2"),
               dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("at least 3 expert-parallel groups"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not 4 / 2"), std::string::npos) << r.output;
  r = RunTenax("launch --nproc-per-node 4 -- " +
                   Train("live", "ddp",
                         "--set resilience.sdc_check_interval=5 --set resilience.mode=live "
                         "--set parallelism.data_parallel_replicate=2 "
                         "--set parallelism.data_parallel_shard=2"),
               dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs under resilience.mode = \"live\", at least 3 replicas"),
            std::string::npos)
      << r.output;
  r = RunTenax("launch --nproc-per-node 4 -- " +
                   Train("neg", "ddp", "--set resilience.sdc_check_interval=-1"),
               dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("resilience.sdc_check_interval"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tenax::testing
