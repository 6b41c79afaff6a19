// resilience.mode = "live" through `tenax launch` (issue 34): DDP 4, HSDP 2x2 (also with a
// mixture-of-experts model) and DDP 2 around TP 2, PP 2 or CP 2 on one node, a rank (or a whole
// replica) killed, hung or lost while healing; the others train on and the replacement heals from a
// live rank, against an unfailed run of the same layout. Also a checkpoint written short-handed,
// and the layouts live mode refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "live_recovery_fixture.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

TEST_F(LiveRecoveryE2E, KilledReplicaLeavesTheOthersTrainOnAndItsReplacementHeals) {
  std::string out;
  // await-join holds rank 0 at step 10 until the replacement is in: the run is too short to
  // count on it joining by itself.
  const nlohmann::json report = Live("live", "crash:rank=2:step=6,await-join:rank=0:step=10", &out);
  ExpectHealed(report, 2, 5);
  EXPECT_NE(out.find("live epoch 1 formed by ranks 0,1,3"), std::string::npos) << out;
  // The others ran step 6's own samples before they lost rank 2 in its gradient reduction: they
  // run only rank 2's again, its 4 rows spread over the three of them (1, 1 and 2), adding to
  // the gradients they kept. The losses matched the unfailed run's within 1e-6 (Live).
  for (const char* kept : {"[rank 0] step 6: the gradients of slot(s) 0 kept through the "
                           "failure: running only slot 2's row 0",
                           "[rank 1] step 6: the gradients of slot(s) 1 kept through the "
                           "failure: running only slot 2's row 1",
                           "[rank 3] step 6: the gradients of slot(s) 3 kept through the "
                           "failure: running only slot 2's rows 2-3"}) {
    EXPECT_NE(out.find(kept), std::string::npos) << out;
  }
  EXPECT_NE(out.find("received step 9's state from rank"), std::string::npos) << out;
  // The replacement ran a step of its own on zeros before it joined (LiveWarmUp); the losses
  // above show nothing of it reached the trajectory.
  EXPECT_NE(out.find("[rank 2] live replacement: warmed up in"), std::string::npos) << out;
  const std::string html = ReadFile(*dir_ / "live/report.html");  // the run report shows it too
  EXPECT_NE(html.find("id=\"live-recoveries\""), std::string::npos);
  EXPECT_NE(html.find("injected crash (kill) at step 6"), std::string::npos);
  EXPECT_EQ(out.find("generation 1"), std::string::npos) << out;
}

// A rank lost in its setup, before it joined the first live epoch: the others wait for it to
// check in, in their setup, where their live group cannot change. The job restarts at once with
// that crash as its one failure (not a live epoch that every other member then fails to take, a
// second failure with no origin), and the restarted generation trains the unfailed run's
// trajectory.
TEST_F(LiveRecoveryE2E, ARankLostInItsSetupRestartsTheJob) {
  std::string out;
  const nlohmann::json report = Live("setup", "crash:rank=2:step=0", &out);
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["generations"].size(), 2u) << report.dump(2);
  ASSERT_EQ(report["failures"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["rank"], 2) << report.dump(2);
  EXPECT_TRUE(report["live_recoveries"].empty()) << report.dump(2);
  EXPECT_NE(out.find("injected fault: crash (kill) in its setup"), std::string::npos) << out;
  EXPECT_NE(out.find("still in their setup"), std::string::npos) << out;
}

// A rank killed inside a checkpoint save, after writing its files and before the commit: the
// others lose it in the save's collectives. They recover as from a failed step (no restart) and,
// in the next epoch, save step 6 again; the replacement heals. The checkpoint is committed once,
// and the rest is the unfailed run's trajectory.
TEST_F(LiveRecoveryE2E, ARankLostInsideASaveIsRecoveredLive) {
  std::string out;
  const nlohmann::json report =
      Live("in-save", "kill-in-ckpt:rank=2:step=6,await-join:rank=0:step=10", &out);
  ExpectHealed(report, 2, 6, "crash-in-checkpoint");
  EXPECT_NE(out.find("step 6: evaluated and saved again after the member lost in them"),
            std::string::npos)
      << out;
  // Saved (committed) once, in the second attempt.
  const std::string saved = "saved checkpoint " + (*dir_ / "in-save/checkpoints/step_00000006");
  ASSERT_NE(out.find(saved), std::string::npos) << out;
  EXPECT_EQ(out.find(saved, out.find(saved) + 1), std::string::npos) << out;
  EXPECT_EQ(out.find("generation 1"), std::string::npos) << out;
}

// The same in the last step's save: the others settle it in the run's last quorum round and
// finish; the run's final checkpoint is committed.
TEST_F(LiveRecoveryE2E, ARankLostInsideTheLastSaveIsRecoveredLive) {
  std::string out;
  const nlohmann::json report = Live("in-last-save", "kill-in-ckpt:rank=1:step=16", &out);
  EXPECT_EQ(report["exit_code"], 0);
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  ASSERT_EQ(report["live_recoveries"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["live_recoveries"][0]["rank"], 1);
  EXPECT_EQ(report["live_recoveries"][0]["kind"], "crash-in-checkpoint");
  EXPECT_NE(out.find("step 16: evaluated and saved again after the member lost in them"),
            std::string::npos)
      << out;
}

// A rank killed in an evaluation (step 5's), once it evaluated its windows: the others lose it
// where the windows' losses are combined. They recover and evaluate again in the next epoch, the
// lost rank's windows included: one evaluation line, the unfailed run's value (Live checks).
TEST_F(LiveRecoveryE2E, ARankLostInsideAnEvaluationIsRecoveredLive) {
  std::string out;
  const nlohmann::json report =
      Live("in-eval", "crash:rank=1:step=5:at=eval,await-join:rank=0:step=9", &out);
  ExpectHealed(report, 1, 5);
  EXPECT_NE(out.find("injected fault: crash (kill) at step 5's evaluation"), std::string::npos)
      << out;
  EXPECT_NE(out.find("step 5: evaluated and saved again after the member lost in them"),
            std::string::npos)
      << out;
}

TEST_F(LiveRecoveryE2E, LosingRankZeroMovesTheMetricsToTheNextRank) {
  std::string out;
  const nlohmann::json report = Live("rank0", "crash:rank=0:step=4,await-join:rank=1:step=9", &out);
  ExpectHealed(report, 0, 3);
  EXPECT_NE(out.find("live epoch 1 formed by ranks 1,2,3"), std::string::npos) << out;
}

// --spares 1: a standby process, started (its libraries loaded) before any failure, takes the
// lost rank's place; once that replacement has healed, a new standby starts in the freed slot and
// takes the next lost rank's.
TEST_F(LiveRecoveryE2E, WithSparesEachReplacementIsAStandbyStartedInAdvance) {
  std::string out;
  const nlohmann::json report = Live("spares",
                                     "crash:rank=1:step=4,await-join:rank=0:step=7,"
                                     "crash:rank=3:step=10,await-join:rank=0:step=13",
                                     &out, "--spares 1");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  ASSERT_EQ(by_rank.size(), 2u) << report.dump(2);
  EXPECT_EQ(by_rank[1]["slot"], 4) << "the standby's slot";
  EXPECT_EQ(by_rank[3]["slot"], 1) << "the new standby, in the slot rank 1 left";
  for (int rank : {1, 3}) {
    EXPECT_GE(by_rank[rank]["healed_at_s"].get<double>(), by_rank[rank]["ready_at_s"].get<double>())
        << by_rank[rank].dump(2);
  }
  EXPECT_NE(out.find("launch: slot 1 excluded; the spare in slot 4"), std::string::npos) << out;
  EXPECT_NE(out.find("launch: slot 3 excluded; the spare in slot 1"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 3] live replacement: set up in"), std::string::npos) << out;
  // Every process of the job starts as a standby (the first ranks are assigned at once) and opens
  // its data before its assignment: ranks 1 and 3 did twice, as first ranks and as replacements.
  auto count = [&out](const std::string& line) {
    int n = 0;
    for (size_t at = out.find(line); at != std::string::npos; at = out.find(line, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("[rank 1] data: opened while this process waited as a standby"), 2) << out;
  EXPECT_EQ(count("[rank 3] data: opened while this process waited as a standby"), 2) << out;
  EXPECT_EQ(count("[rank 2] data: opened while this process waited as a standby"), 1) << out;
}

// A rank stopped (SIGSTOP) inside step 8: the others wait in its all-reduce, the launcher's hang
// check names it from their flight records and kills it alone; the rest is a live recovery.
TEST_F(LiveRecoveryE2E, AHungRankIsKilledAloneAndReplaced) {
  std::string out;
  const nlohmann::json report =
      Live("hang", "stop:rank=1:step=8,await-join:rank=0:step=12", &out, "--hang-timeout 4");
  ExpectHealed(report, 1, 7, "hang");
  EXPECT_NE(out.find("killing rank 1 only"), std::string::npos) << out;
  EXPECT_NE(out.find("live epoch 1 formed by ranks 0,2,3"), std::string::npos) << out;
}

// Two ranks stopped (SIGSTOP) inside step 8, as two frozen nodes' would be: neither leaves a
// flight record, so the analysis cannot name one; they are of two replicas while two others are
// left to train on, so both are killed at once and one epoch drops them both (no restart). The
// replacements are standbys (--spares 2): rank 0 waits at step 12 for both to join, making no
// step meanwhile, and two cold starts at once took over the 4 s hang timeout beside two CI runs.
TEST_F(LiveRecoveryE2E, TwoHungRanksOfTwoReplicasAreTakenOutTogether) {
  std::string out;
  const nlohmann::json report =
      Live("hang2", "stop:rank=1:step=8,stop:rank=2:step=8,await-join:rank=0:step=12", &out,
           "--hang-timeout 4 --spares 2");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_NE(out.find("ranks 1,2 alone left no flight record, of replicas 1,2"), std::string::npos)
      << out;
  EXPECT_NE(out.find("killing ranks 1,2 only"), std::string::npos) << out;
  EXPECT_NE(out.find("live epoch 1 formed by ranks 0,3"), std::string::npos) << out;
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  const std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  for (int rank : {1, 2}) {
    ASSERT_EQ(by_rank.count(rank), 1u) << report.dump(2);
    const nlohmann::json& l = by_rank.at(rank);
    EXPECT_EQ(l["kind"], "hang");
    EXPECT_EQ(l["step"], 7) << "the last step it finished";
    EXPECT_EQ(l["epoch"], 1);
    EXPECT_EQ(l["members"], nlohmann::json({0, 3}));
    EXPECT_GT(l["healed_bytes"].get<int64_t>(), 100000);
    EXPECT_TRUE(l["healed_from"] == 0 || l["healed_from"] == 3) << l.dump();
  }
}

// Two replicas: rank 0 killed at step 6's start, then rank 1 stopped (SIGSTOP) at step 8's while
// rank 0's replacement waits to join. The hang is rank 1's: the replacement makes no steps only
// because it is in no collective yet (it was taken for the culprit, as the rank at the lowest
// step, when rank 1's missing flight record left the analysis undecided). Nobody is left holding
// the state, so the job restarts from its checkpoint, the hang recorded as its failure.
TEST_F(LiveRecoveryE2E, AMemberHungWhileAReplacementWaitsIsTheCulprit) {
  TempDir dir;
  auto r = RunTenax(
      "launch --nproc-per-node 2 --hang-timeout 4 --inject crash:rank=0:step=6,stop:rank=1:step=8 "
      "-- " +
          LiveTrain(dir, "two",
                    "--set training.steps=16 --set parallelism.data_parallel_replicate=2 "
                    "--set parallelism.data_parallel_shard=1 --set resilience.mode=live"),
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json g = nlohmann::json::parse(ReadFile(dir / "two/goodput.json"));
  EXPECT_EQ(g["step"], 16);
  ASSERT_EQ(g["failures"].size(), 1u) << g.dump(2);
  EXPECT_EQ(g["failures"][0]["kind"], "hang") << g.dump(2);
  EXPECT_EQ(g["failures"][0]["rank"], 1) << g.dump(2);
  EXPECT_GT(g["failures"][0]["detection_s"].get<double>(), 4) << g.dump(2);
  EXPECT_EQ(r.output.find("killing rank 0 only"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("killing rank 1 only"), std::string::npos) << r.output;
  ASSERT_EQ(g["live_recoveries"].size(), 1u) << g.dump(2);
  const auto& l = g["live_recoveries"][0];
  EXPECT_EQ(l["rank"], 0);
  EXPECT_EQ(l["healed_at_s"], -1);
  EXPECT_NE(
      l["outcome"].get<std::string>().find("discarded: the generation ended before it healed"),
      std::string::npos)
      << l.dump(2);
}

// A replacement lost while it heals (killed before it connects to the group that takes it in,
// killed inside the state transfer, or stopped there so that the hang check kills it) is
// discarded: its record says so, the others train on without it, and the next replacement heals.
// The first await-join holds the group until the first replacement is announced, the second
// until the next one is.
TEST_F(LiveRecoveryE2E, AReplacementLostWhileHealingIsDiscardedAndTheNextOneHeals) {
  struct Case {
    std::string name, heal_fail, flags, second_kind;
  };
  for (const Case& c :
       {Case{"heal-warmup", "at=warmup", "", "crash"}, Case{"heal-form", "at=form", "", "crash"},
        Case{"heal-transfer", "at=transfer", "", "crash"},
        Case{"heal-stop", "at=transfer:how=stop", "--hang-timeout 4", "hang"}}) {
    SCOPED_TRACE(c.name);
    std::string out;
    const nlohmann::json report = Live(c.name,
                                       "crash:rank=2:step=6,heal-fail:rank=2:" + c.heal_fail +
                                           ",await-join:rank=0:step=9,await-join:rank=0:step=12",
                                       &out, c.flags);
    EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
    EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
    ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2) << out;
    const auto& lost = report["live_recoveries"][0];
    const auto& healed = report["live_recoveries"][1];
    EXPECT_EQ(lost["rank"], 2);
    EXPECT_EQ(lost["step"], 5);
    EXPECT_EQ(lost["healed_at_s"], -1);
    EXPECT_NE(lost["outcome"].get<std::string>().find(
                  c.second_kind == "hang" ? "discarded while healing: it was killed for a hang"
                                          : "discarded while healing: it was killed by signal 9"),
              std::string::npos)
        << lost.dump(2);
    EXPECT_GE(lost["steps_short_handed"].get<int64_t>(), 1);
    EXPECT_EQ(healed["rank"], 2);
    EXPECT_EQ(healed["kind"], c.second_kind) << healed.dump(2);
    EXPECT_EQ(healed["epoch"], 3);  // 1: without rank 2, 2: its first replacement, 3: without
    EXPECT_EQ(healed["members"].size(), 3u);
    EXPECT_EQ(healed["joined_epoch"], 4);
    EXPECT_GT(healed["healed_bytes"].get<int64_t>(), 100000);
    EXPECT_EQ(healed["step"].get<int64_t>(),
              lost["step"].get<int64_t>() + lost["steps_short_handed"].get<int64_t>());
    EXPECT_NE(out.find("the replacement for rank 2 is discarded while healing"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("generation 1"), std::string::npos) << out;
  }
}

// Replica 0 (ranks 0 and 1) lost in step 6 by rank 1's crash, replica 1 (ranks 2 and 3) trained
// on, and replica 0's new ranks healed position by position. `kept`: what replica 1's ranks say
// they kept of step 6 and ran again (its data slots: one per replica, or per shard under HSDP).
static void ExpectReplicaOfTwoRecovered(
    const nlohmann::json& report, const std::string& out,
    const std::vector<std::string>& kept = {
        "slot(s) 1 kept through the failure: running only slot(s) 0"}) {
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  // Rank 0 is killed with rank 1, or (a pipeline stage) exits first, having lost its peer.
  EXPECT_TRUE(out.find("killing rank 0 with rank 1 of its replica") != std::string::npos ||
              out.find("launch: rank 0 exited with code 10 (lost a peer that failed first)") !=
                  std::string::npos)
      << out;
  EXPECT_NE(out.find("live epoch 1 formed by ranks 2,3"), std::string::npos) << out;
  // Both ranks of replica 1 kept their gradients of step 6 and run replica 0's samples only.
  for (const std::string& k : kept) {
    EXPECT_NE(out.find("step 6: the gradients of " + k), std::string::npos) << out;
  }
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  std::map<int, nlohmann::json> by_rank;
  for (const auto& l : report["live_recoveries"]) by_rank[l["rank"].get<int>()] = l;
  ASSERT_EQ(by_rank.count(0) + by_rank.count(1), 2u) << report.dump(2);
  EXPECT_EQ(by_rank[1]["kind"], "crash");
  EXPECT_EQ(by_rank[0]["kind"], "peer-lost");
  for (int rank : {0, 1}) {
    const auto& l = by_rank[rank];
    EXPECT_EQ(l["replica"], 0);
    EXPECT_EQ(l["incarnation"], 1);
    EXPECT_EQ(l["step"], 5) << "the last step it finished";
    EXPECT_EQ(l["healed_from"], rank + 2) << "the rank of replica 1 at its position";
    EXPECT_GT(l["healed_bytes"].get<int64_t>(), 30000);  // its part of the weights and moments
    EXPECT_EQ(l["joined_epoch"], by_rank[1]["joined_epoch"]);  // together
    EXPECT_GE(l["steps_short_handed"].get<int64_t>(), 1);
  }
  EXPECT_EQ(out.find("generation 1"), std::string::npos) << out;
}

// Under HSDP 2 x 2 the data slots are the shards: replica 1's ranks run replica 0's at their own
// shard index.
const std::vector<std::string> kHsdpKept = {
    "slot(s) 2 kept through the failure: running only slot(s) 0",
    "slot(s) 3 kept through the failure: running only slot(s) 1"};

// HSDP 2 x 2: a replica is two ranks, each holding half of the model (ranks 0, 1 and 2, 3).
// Rank 1 killed at step 6's start: the launcher kills rank 0 with it (a replica's shard group
// cannot lose a rank), replica 1 trains on with replica 0's samples, and both of replica 0's
// ranks are replaced together, each healing its own shard from replica 1's rank at the same
// shard index. Against an unfailed HSDP run: the same samples, losses within 1e-6 at every step.
TEST_F(LiveRecoveryE2E, HsdpLosesAWholeReplicaAndItsRanksHealShardByShard) {
  const std::string hsdp = kHsdp;
  ASSERT_NO_FATAL_FAILURE(HsdpClean());
  std::string out;
  const nlohmann::json report =
      Live("hsdp", "crash:rank=1:step=6,await-join:rank=2:step=10", &out, "", hsdp, "hsdp_clean");
  // Replica 1 had run step 6's own samples: each of its ranks runs only replica 0's at its shard
  // index again, adding to the shard's gradient it kept.
  ExpectReplicaOfTwoRecovered(report, out, kHsdpKept);
  // Both new ranks warmed up together (their shard group's collectives between them), and the
  // losses still match the unfailed run's (above).
  for (const char* rank : {"[rank 0]", "[rank 1]"}) {
    EXPECT_NE(out.find(std::string(rank) + " live replacement: warmed up in"), std::string::npos)
        << out;
  }
  // An eighth of the test's 32-token sequences.
  EXPECT_NE(out.find("(the forward and backward of one row of 4 zeros, with the other new ranks "
                     "of its replica)"),
            std::string::npos)
      << out;
  const auto by_rank = RecoveriesByRank(report);
  ASSERT_EQ(by_rank.count(0), 1u);
  EXPECT_NE(by_rank.at(0)["cause"].get<std::string>().find("killed with rank 1 of its replica"),
            std::string::npos)
      << by_rank.at(0).dump(2);
  EXPECT_GT(by_rank.at(0)["healed_bytes"].get<int64_t>(), 50000);  // half the weights and moments
}

// DDP 2 around a replica of two ranks split by tensor, pipeline or context parallelism. Rank 1
// crashes right before step 6's gradient reduction: its peer (rank 0) is killed with it, replica
// 1's two ranks train on with both replicas' samples (their own groups untouched), and replica 0's
// new ranks heal position by position. Against the unfailed run of the same layout, as every
// case. The crash's place matters under TP: had rank 0 summed its gradients across replicas
// before its TP sum, rank 2 would have got through its reduction across replicas and waited in
// the TP sum for rank 3, which waits in the replica's vote (Fsdp::FinishStep does every sum
// inside a replica first).
TEST_F(LiveRecoveryE2E, TensorParallelReplicaIsLostWholeAndItsRanksHealPositionByPosition) {
  const std::string tp =
      "--set parallelism.data_parallel_replicate=2 --set parallelism.data_parallel_shard=1 "
      "--set parallelism.tensor_parallel=2";
  auto clean = RunTenax("launch --nproc-per-node 4 -- " + Ddp("tp_clean", tp), dir_->path());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  std::string out;
  const nlohmann::json report =
      Live("tp", "crash:rank=1:step=6:at=reduce,await-join:rank=2:step=10", &out, "", tp,
           "tp_clean", 128);
  ExpectReplicaOfTwoRecovered(report, out);
}

// The same with a replica of two pipeline stages (each short-handed micro-batch runs the whole
// schedule), and of two context-parallel ranks (each holding half of every sequence). The
// pipeline's rank 1 crashes at the start of step 6: rank 0, its other stage, fails its send or
// receive and usually exits before the launcher kills it with its replica; either way its record
// is peer-lost (its slot not blamed).
TEST_F(LiveRecoveryE2E, PipelineAndContextParallelReplicasAreRecoveredLive) {
  struct Case {
    std::string name, layout, crash;
  };
  for (const Case& c : std::vector<Case>{
           {"pp", "--set parallelism.pipeline_parallel=2 --set parallelism.microbatches=2",
            "crash:rank=1:step=6"},
           {"cp", "--set parallelism.context_parallel=2", "crash:rank=1:step=6:at=reduce"}}) {
    SCOPED_TRACE(c.name);
    const std::string flags =
        "--set parallelism.data_parallel_replicate=2 --set parallelism.data_parallel_shard=1 " +
        c.layout;
    auto clean =
        RunTenax("launch --nproc-per-node 4 -- " + Ddp(c.name + "_clean", flags), dir_->path());
    ASSERT_EQ(clean.exit_code, 0) << clean.output;
    std::string out;
    const nlohmann::json report = Live(c.name, c.crash + ",await-join:rank=2:step=10", &out, "",
                                       flags, c.name + "_clean", 128);
    ExpectReplicaOfTwoRecovered(report, out);
    // One row of zeros is no schedule of micro-batches over two stages: no warm-up there.
    EXPECT_EQ(out.find("live replacement: no warm-up step (pipeline stages)") != std::string::npos,
              c.name == "pp")
        << out;
  }
}

// A replica split two ways: HSDP 2 x 2 with tensor parallelism 2 inside (8 ranks; replica 0 is
// ranks 0-3: shard groups {0, 2} and {1, 3}, TP groups {0, 1} and {2, 3}). Rank 1 crashes before
// step 6's reduction: its three replica peers are killed with it, replica 1 trains on with replica
// 0's samples, and the four new ranks heal position by position. Each group inside a replica
// meets through a store named by its kind and first rank: named by kind alone, the two shard
// groups met in one store and the unfailed run hung in its setup until Gloo's timeout.
TEST_F(LiveRecoveryE2E, HsdpWithTensorParallelInsideEachReplicaIsRecoveredLive) {
  const std::string layout = std::string(kHsdp) + " --set parallelism.tensor_parallel=2";
  auto clean = RunTenax("launch --nproc-per-node 8 -- " +
                            Ddp("hsdp_tp_clean", "--set resilience.mode=live " + layout),
                        dir_->path());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  std::string out;
  const nlohmann::json report =
      Live("hsdp_tp", "crash:rank=1:step=6:at=reduce,await-join:rank=4:step=10", &out, "", layout,
           "hsdp_tp_clean", 256, 8);
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_NE(out.find("live epoch 1 formed by ranks 4,5,6,7"), std::string::npos) << out;
  // The four new ranks warmed up together, through their shard and TP groups.
  for (const char* rank : {"[rank 0]", "[rank 1]", "[rank 2]", "[rank 3]"}) {
    EXPECT_NE(out.find(std::string(rank) + " live replacement: warmed up in"), std::string::npos)
        << out;
  }
  // Each shard index of replica 1 (its TP pair) ran its own samples and runs replica 0's again.
  for (const char* kept : {"[rank 4] step 6: the gradients of slot(s) 2 kept through the failure: "
                           "running only slot(s) 0",
                           "[rank 7] step 6: the gradients of slot(s) 3 kept through the failure: "
                           "running only slot(s) 1"}) {
    EXPECT_NE(out.find(kept), std::string::npos) << out;
  }
  const std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  ASSERT_EQ(by_rank.size(), 4u) << report.dump(2);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(by_rank.count(rank), 1u) << report.dump(2);
    const nlohmann::json& l = by_rank.at(rank);
    EXPECT_EQ(l["kind"], rank == 1 ? "crash" : "peer-lost");
    EXPECT_EQ(l["replica"], 0);
    EXPECT_EQ(l["healed_from"], rank + 4) << "the rank of replica 1 at its position";
    EXPECT_EQ(l["joined_epoch"], by_rank.at(1)["joined_epoch"]);  // together
  }
}

// A mixture-of-experts model, HSDP 2 x 2 with its experts split over each replica's two ranks
// (expert_parallel 2) and the sigmoid router's balancing biases: routing is counted within each
// replica (model/moe.h), so replica 1 runs replica 0's samples as replica 0 would have, and the
// biases, which move by the whole batch's counts, reach the replacements with the state. Against
// an unfailed live run: losses, the aux loss and the biases at the end.
TEST_F(LiveRecoveryE2E, MixtureOfExpertsReplicaIsRecoveredLive) {
  const std::string moe = std::string(kHsdp) +
                          " --set model.preset=debug-moe --set parallelism.expert_parallel=2 "
                          "--set model.moe_router=sigmoid --set model.moe_bias_update_rate=0.01 "
                          "--set model.n_shared_experts=1";
  auto clean = RunTenax(
      "launch --nproc-per-node 4 -- " + Ddp("moe_clean", "--set resilience.mode=live " + moe),
      dir_->path());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  ASSERT_NE(clean.output.find("(expert_parallel 2 within dp_shard)"), std::string::npos)
      << clean.output;
  std::string out;
  const nlohmann::json report = Live(
      "moe", "crash:rank=1:step=6:at=reduce,await-join:rank=2:step=10", &out, "", moe, "moe_clean");
  ExpectReplicaOfTwoRecovered(report, out, kHsdpKept);
  const std::vector<double> clean_aux =
                                ReadMetric(*dir_ / "moe_clean/metrics.jsonl", "moe_aux_loss"),
                            aux = ReadMetric(*dir_ / "moe/metrics.jsonl", "moe_aux_loss");
  ASSERT_EQ(aux.size(), 16u);
  ASSERT_EQ(clean_aux.size(), aux.size());
  for (size_t i = 0; i < aux.size(); ++i) {
    EXPECT_NEAR(aux[i], clean_aux[i], 1e-6 * std::abs(clean_aux[i])) << "step " << i + 1;
  }
  const nlohmann::json a = FinalState("moe_clean"), b = FinalState("moe");
  ASSERT_TRUE(a.contains("moe_expert_bias")) << a.dump();
  double moved = 0;
  for (const auto& row : a["moe_expert_bias"]) {
    for (const auto& x : row) moved += std::abs(x.get<double>());
  }
  EXPECT_GT(moved, 0.01) << "the biases moved";
  EXPECT_EQ(b["moe_expert_bias"], a["moe_expert_bias"]);
}

// HSDP 2 x 2, a hang: rank 2 stopped (SIGSTOP) inside step 8. The hang check names it from the
// others' flight records and kills it alone; then its replica (rank 3 with it) is taken out and
// replaced as after a crash, while replica 0 trains on.
TEST_F(LiveRecoveryE2E, HsdpAHungRankTakesItsReplicaOutAndTheOtherTrainsOn) {
  const std::string hsdp = kHsdp;
  ASSERT_NO_FATAL_FAILURE(HsdpClean());
  std::string out;
  const nlohmann::json report = Live("hsdp_hang", "stop:rank=2:step=8,await-join:rank=0:step=12",
                                     &out, "--hang-timeout 4", hsdp, "hsdp_clean");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_NE(out.find("killing rank 2 only"), std::string::npos) << out;
  EXPECT_NE(out.find("killing rank 3 with rank 2 of its replica"), std::string::npos) << out;
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  EXPECT_EQ(by_rank[2]["kind"], "hang");
  EXPECT_EQ(by_rank[3]["kind"], "peer-lost");
  for (int rank : {2, 3}) {
    EXPECT_EQ(by_rank[rank]["replica"], 1);
    EXPECT_EQ(by_rank[rank]["healed_from"], rank - 2);
    EXPECT_GT(by_rank[rank]["healed_bytes"].get<int64_t>(), 50000);
  }
}

// HSDP 2 x 2, a whole replica hung (a frozen node's): ranks 2 and 3 stopped inside step 8. Neither
// leaves a flight record, so the records name no single rank; the silent ranks are all of replica
// 1, which is taken out as for one hung rank, and replica 0 trains on (before: a restart).
TEST_F(LiveRecoveryE2E, HsdpAWholeHungReplicaIsTakenOutAndTheOtherTrainsOn) {
  const std::string hsdp = kHsdp;
  ASSERT_NO_FATAL_FAILURE(HsdpClean());
  std::string out;
  const nlohmann::json report =
      Live("hsdp_hang_replica", "stop:rank=2:step=8,stop:rank=3:step=8,await-join:rank=0:step=12",
           &out, "--hang-timeout 4", hsdp, "hsdp_clean");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_NE(out.find("ranks 2,3 alone left no flight record, all of replica 1"), std::string::npos)
      << out;
  EXPECT_NE(out.find("killing rank 2 only"), std::string::npos) << out;
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  EXPECT_EQ(by_rank[2]["kind"], "hang");
  for (int rank : {2, 3}) {
    EXPECT_EQ(by_rank[rank]["replica"], 1);
    EXPECT_EQ(by_rank[rank]["healed_from"], rank - 2);
  }
}

// HSDP 2 x 2, a failure at a loss spike: rank 0's loss at step 11 is inflated (a spike, skipped),
// and rank 3 is killed right after the spike's record is written, before the ranks meet to
// confirm it. That meeting is a collective across replicas after the step's vote, voted on too
// (Trainer::CheckSpike): replica 1 is taken out, replica 0 runs step 11 again on its own (the
// spike found again, its update skipped again, the record not written twice) and the
// replacements heal. Against an unfailed run with the same spike: the same samples, and the same
// losses at every step but 11 (where the injected factor is averaged over two ranks instead of
// four).
TEST_F(LiveRecoveryE2E, HsdpAFailureAtALossSpikeIsRecoveredLive) {
  const std::string layout =
      "--set parallelism.data_parallel_replicate=2 --set parallelism.data_parallel_shard=2 "
      "--set training.loss_spike_factor=3 --set training.on_loss_spike=skip ";
  auto clean = RunTenax(
      "launch --nproc-per-node 4 --inject spike:rank=0:step=11 -- " + Ddp("spike_clean", layout),
      dir_->path());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  auto r = RunTenax(
      "launch --nproc-per-node 4 --inject "
      "spike:rank=0:step=11,crash:rank=3:step=11:at=spike,await-join:rank=0:step=14 -- " +
          Ddp("spike_live", layout + "--set resilience.mode=live"),
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("injected fault: crash (kill) at step 11's loss spike"),
            std::string::npos)
      << r.output;
  const nlohmann::json report = nlohmann::json::parse(ReadFile(*dir_ / "spike_live/goodput.json"));
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  ASSERT_EQ(report["live_recoveries"].size(), 2u) << report.dump(2);
  std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  EXPECT_EQ(by_rank[3]["kind"], "crash");
  EXPECT_EQ(by_rank[2]["kind"], "peer-lost");
  ASSERT_EQ(report["loss_spikes"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["loss_spikes"][0]["step"], 11);
  EXPECT_EQ(report["loss_spikes"][0]["action"], "skip");
  const std::vector<double> a = Losses("spike_clean"), b = Losses("spike_live");
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 16u);
  for (size_t i = 0; i < a.size(); ++i) {
    if (i + 1 == 11) {
      EXPECT_GT(b[i], 3 * b[i - 1]) << "step 11 is a spike live too";
      continue;
    }
    EXPECT_NEAR(b[i], a[i], 1e-6 * std::abs(a[i])) << "step " << i + 1;
  }
  const nlohmann::json x = FinalState("spike_clean"), y = FinalState("spike_live");
  EXPECT_EQ(y["data"]["position"], x["data"]["position"]);
  EXPECT_EQ(y["optimizer_step"], x["optimizer_step"]);
}

// HSDP 2 x 2: replica 0 lost (rank 1 killed at step 6, rank 0 with it), and its first new rank 1
// killed in the warm-up step that the replica's two new ranks run together: its partner, waiting
// for it in their shard group, fails too, the launcher discards both, and the replica's next
// new ranks heal.
TEST_F(LiveRecoveryE2E, HsdpAReplacementLostInItsReplicasWarmUpIsDiscardedWithItsPartner) {
  ASSERT_NO_FATAL_FAILURE(HsdpClean());
  std::string out;
  const nlohmann::json report =
      Live("hsdp_heal_warmup",
           "crash:rank=1:step=6,heal-fail:rank=1:at=warmup,await-join:rank=2:step=9,"
           "await-join:rank=2:step=12",
           &out, "", kHsdp, "hsdp_clean");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  EXPECT_NE(out.find("[rank 1] injected fault: crash (kill) while healing, in its warm-up step"),
            std::string::npos)
      << out;
  // The first new ranks of replica 0 (incarnation 1) discarded together, the next (2) healed.
  // The partner is killed by the launcher with rank 1, or exits first having lost it in their
  // collective: either order is right.
  EXPECT_NE(out.find("the replacement for rank 1 is discarded while healing: it was killed by "
                     "signal 9 (Killed): injected crash (kill) while healing, in its warm-up step"),
            std::string::npos)
      << out;
  EXPECT_TRUE(out.find("the replacement for rank 0 is discarded while healing: it was killed "
                       "with rank 1 of its replica") != std::string::npos ||
              out.find("the replacement for rank 0 is discarded while healing: it exited with "
                       "code 10 (lost a peer that failed first)") != std::string::npos)
      << out;
  ASSERT_EQ(report["live_recoveries"].size(), 4u) << report.dump(2);
  int healed = 0;
  for (const auto& l : report["live_recoveries"]) {
    const int rank = l["rank"].get<int>();
    ASSERT_TRUE(rank == 0 || rank == 1) << l.dump(2);
    EXPECT_EQ(l["kind"], rank == 1 ? "crash" : "peer-lost") << l.dump(2);
    EXPECT_EQ(l["replica"], 0) << l.dump(2);
    if (l["incarnation"] == 1) {
      EXPECT_EQ(l["healed_at_s"], -1) << l.dump(2);
      const std::string outcome = l["outcome"].get<std::string>();
      EXPECT_TRUE(outcome.find("in its warm-up step") != std::string::npos ||
                  (rank == 0 && outcome.find("lost a peer that failed first") != std::string::npos))
          << l.dump(2);
    } else {
      EXPECT_EQ(l["incarnation"], 2) << l.dump(2);
      EXPECT_EQ(l["healed_from"], rank + 2) << l.dump(2);
      ++healed;
    }
  }
  EXPECT_EQ(healed, 2) << report.dump(2);
  for (const char* rank : {"[rank 0]", "[rank 1]"}) {
    EXPECT_NE(out.find(std::string(rank) + " live replacement: warmed up in"), std::string::npos)
        << out;
  }
}

// HSDP 2 x 2 with two standbys: rank 1 killed, rank 0 killed with it. Both replacements are
// standbys started in advance: rank 1's because its slot is to blame, rank 0's because its own
// slot's process is gone while a standby is up (a replica heals only once both ranks are in).
TEST_F(LiveRecoveryE2E, HsdpWithSparesBothRanksOfTheReplicaAreStandbys) {
  const std::string hsdp = kHsdp;
  ASSERT_NO_FATAL_FAILURE(HsdpClean());
  std::string out;
  const nlohmann::json report = Live("hsdp_spares", "crash:rank=1:step=6,await-join:rank=2:step=10",
                                     &out, "--spares 2", hsdp, "hsdp_clean");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);
  std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  ASSERT_EQ(by_rank.size(), 2u) << report.dump(2);
  EXPECT_GE(by_rank[0]["slot"].get<int>(), 4) << "a spare slot";
  EXPECT_GE(by_rank[1]["slot"].get<int>(), 4) << "a spare slot";
  EXPECT_NE(by_rank[0]["slot"], by_rank[1]["slot"]);
  EXPECT_NE(out.find("launch: slot 1 excluded; the spare in slot"), std::string::npos) << out;
  EXPECT_NE(out.find("takes slot 0's rank"), std::string::npos) << out;
}

// HSDP 2 x 2, rank 3 killed inside step 6's save: its replica (rank 2 with it) is taken out,
// replica 0 saves step 6 again on its own (its two shards) and the replacements heal.
TEST_F(LiveRecoveryE2E, HsdpARankLostInsideASaveIsRecoveredLive) {
  const std::string hsdp = kHsdp;
  ASSERT_NO_FATAL_FAILURE(HsdpClean());
  std::string out;
  const nlohmann::json report =
      Live("hsdp_save", "kill-in-ckpt:rank=3:step=6,await-join:rank=0:step=10", &out, "", hsdp,
           "hsdp_clean");
  EXPECT_EQ(report["generations"].size(), 1u) << report.dump(2);  // nobody restarted
  EXPECT_TRUE(report["failures"].empty()) << report.dump(2);
  std::map<int, nlohmann::json> by_rank = RecoveriesByRank(report);
  ASSERT_EQ(by_rank.size(), 2u) << report.dump(2);
  EXPECT_EQ(by_rank[3]["kind"], "crash-in-checkpoint");
  EXPECT_EQ(by_rank[2]["kind"], "peer-lost");
  for (int rank : {2, 3}) EXPECT_EQ(by_rank[rank]["healed_from"], rank - 2);
  EXPECT_NE(out.find("step 6: evaluated and saved again after the member lost in them"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("saved checkpoint " + (*dir_ / "hsdp_save/checkpoints/step_00000006")),
            std::string::npos)
      << out;
}

// A checkpoint written while a rank was missing (three files' worth of the group that wrote it)
// is an ordinary checkpoint: the run resumed from it on all four ranks ends on the same
// trajectory.
TEST_F(LiveRecoveryE2E, ACheckpointWrittenShortHandedResumes) {
  // Killed at step 6's start: the others run step 6 and save it before any step boundary could
  // take a replacement in.
  auto r = RunTenax("launch --nproc-per-node 4 --inject crash:rank=2:step=6 -- " +
                        Ddp("short", "--set resilience.mode=live --set training.stop_at=9"),
                    dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(
      *dir_ / "short/checkpoints/step_00000006/model-rank00000-of-00003.safetensors"))
      << r.output;
  r = RunTenax("launch --nproc-per-node 4 -- " + Ddp("short"), dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> clean = Losses("clean"), resumed = Losses("short");
  ASSERT_EQ(resumed.size(), 16u) << r.output;
  for (size_t i = 0; i < clean.size(); ++i) {
    EXPECT_NEAR(resumed[i], clean[i], 1e-6 * std::abs(clean[i])) << "step " << i + 1;
  }
  EXPECT_EQ(FinalState("short")["data"]["position"], FinalState("clean")["data"]["position"]);
}

TEST_F(LiveRecoveryE2E, LayoutsItCannotRunAreRefusedBeforeAnyRankTrains) {
  // FSDP (the default layout): one replica, nothing to survive its loss.
  auto r = RunTenax(
      "launch --nproc-per-node 2 -- " + LiveTrain(*dir_, "fsdp", "--set resilience.mode=live"),
      dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("resilience.mode = \"live\" needs data-parallel replicas that can "
                          "outlive each other"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("generation 0: started"), std::string::npos) << r.output;  // no rank
  r = RunTenax(
      "launch --nproc-per-node 1 -- " + LiveTrain(*dir_, "one", "--set resilience.mode=live"),
      dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("needs at least 2 ranks"), std::string::npos) << r.output;
  r = RunTenax(
      "launch --nproc-per-node 2 --inject await-join:rank=0:step=2 -- " + LiveTrain(*dir_, "aj"),
      dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("await-join waits for a replacement"), std::string::npos) << r.output;
  // Several nodes: only with the node agents (the membership lives in etcd), and a replica's
  // ranks on one node (they are replaced together). Both said before any connection.
  const std::string ddp4 =
      "--set resilience.mode=live --set parallelism.data_parallel_replicate=4 "
      "--set parallelism.data_parallel_shard=1";
  r = RunTenax("launch --nnodes 2 --node-rank 0 --rdzv 127.0.0.1:9 --nproc-per-node 2 -- " +
                   LiveTrain(*dir_, "static", ddp4),
               dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("on several nodes needs the node agents (--rdzv etcd://HOST:PORT)"),
            std::string::npos)
      << r.output;
  r = RunTenax(
      "launch --nnodes 4 --job-id span --rdzv etcd://127.0.0.1:9 --nproc-per-node 2 -- " +
          LiveTrain(*dir_, "span",
                    "--set resilience.mode=live --set parallelism.data_parallel_replicate=2 "
                    "--set parallelism.data_parallel_shard=4"),
      dir_->path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("a replica (4 ranks: the world over parallelism.data_parallel_replicate) "
                          "must not span nodes: --nproc-per-node 2 must be a multiple of it"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace tenax::testing
