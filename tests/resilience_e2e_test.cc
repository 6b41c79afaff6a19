// Recovery through `tenax launch --max-restarts`, one test per injected fault kind (crash by step
// and by time, hang inside a collective, NaN loss, failed / corrupted checkpoint write, kill in
// the middle of a checkpoint): the run reaches its final step, its final weights equal those of
// an uninterrupted run bit for bit (CPU), no committed step is lost, and goodput.json records the
// failure with its kind and timings. Also: hot spares and quarantine, stragglers, the status file
// and the Prometheus endpoint (parsed by tenax's test parser and by prometheus_client), and inputs
// that a restart cannot fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <thread>

#include "tenax/core/net.h"
#include "tenax/report/testing_prometheus.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

std::string Train(const TempDir& dir, const std::string& name, const std::string& extra = "") {
  return ResilienceTrain(dir.path(), name, extra);
}

class ResilienceE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = RunTenax("launch --nproc-per-node 2 -- " + Train(*dir_, "clean"), dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Final(const std::string& run, int shard) {
    return ReadFile(*dir_ / (run + "/checkpoints/step_00000012/model-rank0000" +
                             std::to_string(shard) + "-of-00002.safetensors"));
  }
  // Launches `name` with `flags` and `--inject inject`; expects success, bitwise-equal final
  // weights, and returns goodput.json (the default one in the run folder).
  static nlohmann::json Recover(const std::string& name, const std::string& flags,
                                const std::string& inject, const std::string& extra = "",
                                std::string* output = nullptr) {
    auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 3 " + flags + " --inject " +
                          inject + " -- " + Train(*dir_, name, extra),
                      dir_->path());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(Final(name, 0).empty()) << r.output;
    // Bitwise-equal final weights (EXPECT_TRUE: do not print megabytes on a mismatch).
    EXPECT_TRUE(Final(name, 0) == Final("clean", 0)) << name;
    EXPECT_TRUE(Final(name, 1) == Final("clean", 1)) << name;
    if (output != nullptr) *output = r.output;
    const std::string path = *dir_ / (name + "/goodput.json");
    EXPECT_TRUE(std::filesystem::exists(path)) << r.output;
    auto report = nlohmann::json::parse(ReadFile(path));
    EXPECT_EQ(report["exit_code"], 0);
    EXPECT_EQ(report["step"], 12);
    return report;
  }
  // The one failure of `report`: its kind, rank, and timings that add up.
  static void ExpectFailure(const nlohmann::json& report, const std::string& kind, int rank) {
    ASSERT_GE(report["failures"].size(), 1u) << report.dump(2);
    const auto& f = report["failures"][0];
    EXPECT_EQ(f["kind"], kind) << report.dump(2);
    if (rank >= 0) EXPECT_EQ(f["rank"], rank) << report.dump(2);
    EXPECT_EQ(report["failures_by_kind"][kind], 1) << report.dump(2);
    EXPECT_GE(f["detection_s"].get<double>(), 0.0);
    EXPECT_GT(f["recovery_s"].get<double>(), 0.0) << report.dump(2);
    EXPECT_LT(f["time_s"].get<double>(), report["wall_s"].get<double>());
    const auto& t = report["time_s"];
    const double sum = t["productive"].get<double>() + t["checkpoint"].get<double>() +
                       t["lost"].get<double>() + t["detection"].get<double>() +
                       t["restart"].get<double>() + t["idle"].get<double>();
    EXPECT_NEAR(sum, report["wall_s"].get<double>(), 0.05) << report.dump(2);
    EXPECT_GT(t["productive"].get<double>(), 0.0);
    EXPECT_GT(t["restart"].get<double>(), 0.0);
    const double ratio = report["effective_training_ratio"].get<double>();
    EXPECT_GT(ratio, 0.0);
    EXPECT_LT(ratio, 1.0);
  }
  static TempDir* dir_;
};
TempDir* ResilienceE2E::dir_ = nullptr;

TEST_F(ResilienceE2E, CrashedRankIsRestartedAndTrainingEndsIdentical) {
  for (const std::string how : {"kill", "exit"}) {
    const std::string name = "crash_" + how;
    const std::string goodput = *dir_ / (name + ".json");
    auto r = RunTenax("launch --nproc-per-node 2 --max-restarts 2 --goodput-file " + goodput +
                          " --inject crash:rank=1:step=8:how=" + how + " -- " + Train(*dir_, name),
                      dir_->path());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("injected fault: crash (" + how + ") at step 8"), std::string::npos);
    EXPECT_NE(r.output.find("resuming from " + *dir_ / (name + "/checkpoints/step_00000006")),
              std::string::npos)
        << r.output;
    // Bit-identical final weights: the restart lost no step and changed none.
    EXPECT_TRUE(Final(name, 0) == Final("clean", 0)) << how;
    EXPECT_TRUE(Final(name, 1) == Final("clean", 1)) << how;
    auto report = nlohmann::json::parse(ReadFile(goodput));
    EXPECT_EQ(report["exit_code"], 0);
    EXPECT_EQ(report["restarts"], 1);
    ASSERT_EQ(report["failures"].size(), 1u);
    EXPECT_EQ(report["failures"][0]["rank"], 1);
    EXPECT_EQ(report["failures"][0]["exit_code"], how == "kill" ? 137 : 1);
    EXPECT_EQ(report["failures"][0]["resumed_from"], 6);
    EXPECT_EQ(report["steps_redone"], 1);  // step 7 ran twice; step 8 never finished
    ExpectFailure(report, "crash", 1);
  }
}

TEST_F(ResilienceE2E, CrashAtAWallTime) {
  // 0.2 s after the launch started: before the run can end however fast it is (the whole run
  // takes under a second on an idle machine since the chunked loss), in start-up or the first
  // steps. A timer fires it, at once if the rank comes up later than that.
  auto report = Recover("crash_time", "", "crash:rank=0:time=0.2:how=exit:code=9");
  ExpectFailure(report, "crash", 0);
  EXPECT_EQ(report["failures"][0]["exit_code"], 9);
}

// A rank that stops making progress inside a collective (stuck, not dead): the launcher sees no
// heartbeat for the hang timeout, has every rank dump its flight record, names the rank the others
// wait for (both ranks show the same step, so heartbeats alone cannot), stops everyone, restarts,
// and the run ends identical.
TEST_F(ResilienceE2E, HungRankIsDetectedAndRestarted) {
  std::string out;
  auto report = Recover("hang", "--hang-timeout 3", "hang:rank=1:step=8", "", &out);
  EXPECT_NE(out.find("launch: hang: no rank finished a step"), std::string::npos) << out;
  EXPECT_NE(out.find("hang at step 8 before the gradient all-reduce"), std::string::npos) << out;
  EXPECT_NE(out.find("launch: flight records:"), std::string::npos) << out;
  EXPECT_NE(out.find("the others wait for rank 1"), std::string::npos) << out;
  ExpectFailure(report, "hang", 1);
  const double detection = report["failures"][0]["detection_s"].get<double>();
  EXPECT_GE(detection, 3.0);
  EXPECT_LT(detection, 60.0);
  EXPECT_GE(report["time_s"]["detection"].get<double>(), 3.0);
}

// A NaN loss with training.on_nonfinite = "restart": exit code 8, restart from step 6, and the
// rerun (the fault was transient) is the uninterrupted trajectory.
TEST_F(ResilienceE2E, NanLossRestartsFromTheLastCheckpoint) {
  auto report =
      Recover("nan_restart", "", "nan:rank=1:step=8", "--set training.on_nonfinite=restart");
  ExpectFailure(report, "nonfinite", -1);
  EXPECT_EQ(report["failures"][0]["exit_code"], 8);
  EXPECT_EQ(report["failures"][0]["resumed_from"], 6);
  // The default stops: divergence is not restartable.
  auto stop = RunTenax("launch --nproc-per-node 2 --max-restarts 2 --inject nan:rank=0:step=2 -- " +
                           Train(*dir_, "nonfinite_stop"),
                       dir_->path());
  EXPECT_EQ(stop.exit_code, 7) << stop.output;
  EXPECT_NE(stop.output.find("not restarting"), std::string::npos) << stop.output;
}

TEST_F(ResilienceE2E, FailedCheckpointWriteIsRetriedFromTheOneBefore) {
  std::string out;
  auto report = Recover("ckpt_fail", "", "ckpt-fail:step=9", "", &out);
  ExpectFailure(report, "checkpoint-write", -1);
  EXPECT_EQ(report["failures"][0]["exit_code"], 5);
  EXPECT_EQ(report["failures"][0]["resumed_from"], 6);
  EXPECT_NE(out.find("injected I/O error"), std::string::npos) << out;
}

// Step 9's checkpoint is committed, then damaged; a crash at step 11 makes the restart resume,
// which must detect the damage and fall back to step 6.
TEST_F(ResilienceE2E, CorruptedCheckpointIsSkippedAtResume) {
  std::string out;
  auto report = Recover("ckpt_corrupt", "", "ckpt-corrupt:step=9,crash:rank=1:step=11", "", &out);
  EXPECT_NE(out.find("skipping checkpoint step 9"), std::string::npos) << out;
  EXPECT_NE(out.find("resuming from " + *dir_ / "ckpt_corrupt/checkpoints/step_00000006"),
            std::string::npos)
      << out;
  ASSERT_EQ(report["failures"].size(), 2u) << report.dump(2);
  EXPECT_EQ(report["failures"][0]["kind"], "crash");
  EXPECT_EQ(report["failures"][0]["resumed_from"], 6);
  EXPECT_EQ(report["failures"][1]["kind"], "corrupt-checkpoint");
  EXPECT_EQ(report["failures_by_kind"]["corrupt-checkpoint"], 1);
  EXPECT_EQ(report["steps_redone"], 4);  // 7..10
}

TEST_F(ResilienceE2E, KillWhileWritingACheckpoint) {
  auto report = Recover("kill_in_ckpt", "", "kill-in-ckpt:rank=0:step=9");
  ExpectFailure(report, "crash-in-checkpoint", 0);
  EXPECT_EQ(report["failures"][0]["exit_code"], 137);
  EXPECT_EQ(report["failures"][0]["resumed_from"], 6);
  // The half-written step 9 was cleared and written again; the run ends committed.
  EXPECT_TRUE(std::filesystem::exists(*dir_ / "kill_in_ckpt/checkpoints/step_00000012/COMMITTED"));
}

TEST_F(ResilienceE2E, SpareTakesTheFailedSlot) {
  std::string out;
  auto report = Recover("spare", "--spares 1", "crash:rank=1:step=8", "", &out);
  ExpectFailure(report, "crash", 1);
  EXPECT_EQ(report["failures"][0]["slot"], 1);
  EXPECT_EQ(report["failures"][0]["replacement_slot"], 2);
  EXPECT_NE(out.find("slot 1 excluded; the spare in slot 2"), std::string::npos) << out;
  EXPECT_NE(out.find("rank@slot: 0@slot0 1@slot2"), std::string::npos) << out;
}

// Slot 1 fails, its rank moves to spare slot 2 and slot 1 becomes the spare; then slot 2 fails
// (rank 1 back to slot 1), then slot 1 fails a second time: quarantined, the run continues on
// slot 2 and finishes identical.
TEST_F(ResilienceE2E, RepeatedFailuresQuarantineASlotAndTheRunContinuesOnSpares) {
  std::string out;
  auto report =
      Recover("quarantine", "--spares 1",
              "crash:rank=1:step=4,crash:rank=1:step=7:gen=1,crash:rank=1:step=11:gen=2", "", &out);
  EXPECT_EQ(report["restarts"], 3);
  ASSERT_EQ(report["failures"].size(), 3u);
  EXPECT_EQ(report["failures"][0]["slot"], 1);
  EXPECT_EQ(report["failures"][1]["slot"], 2);
  EXPECT_EQ(report["failures"][2]["slot"], 1);
  EXPECT_EQ(report["failures"][2]["replacement_slot"], 2);
  EXPECT_EQ(report["failures_by_kind"]["crash"], 3);
  EXPECT_NE(out.find("slot 1 failed 2 time(s) in the last 3600s"), std::string::npos) << out;
}

// Quarantine never ends a job: with every slot quarantined and no spare left, the rank runs
// again in place and only the restart policy (here --max-restarts) decides when to stop.
TEST_F(ResilienceE2E, NoHealthySlotLeftKeepsRunningInPlace) {
  std::string out;
  auto report = Recover("no_spare", "--spares 1 --quarantine-after 1",
                        "crash:rank=1:step=4,crash:rank=1:step=5:gen=1", "", &out);
  EXPECT_NE(out.find("local rank 1 has no healthy slot left (quarantined: 1, 2); it runs again "
                     "in slot 2"),
            std::string::npos)
      << out;
  EXPECT_EQ(report["restarts"], 2);
  ASSERT_EQ(report["failures"].size(), 2u);
  EXPECT_EQ(report["failures"][0]["slot"], 1);
  EXPECT_EQ(report["failures"][1]["slot"], 2);
}

// Without --max-restarts the launcher restarts within its budget (10 an hour by default): a
// crash is survived and the run ends identical to the clean one. A budget of 1 an hour stops at
// the second failure; --max-restarts 0 at the first.
TEST_F(ResilienceE2E, RestartsByDefaultWithinTheBudget) {
  auto r = RunTenax(
      "launch --nproc-per-node 2 --inject crash:rank=1:step=5 -- " + Train(*dir_, "default_budget"),
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("restart 1 (1 in the last 1h; --restart-budget allows 10)"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(Final("default_budget", 0) == Final("clean", 0));
  EXPECT_TRUE(Final("default_budget", 1) == Final("clean", 1));

  r = RunTenax(
      "launch --nproc-per-node 2 --restart-budget 1/h "
      "--inject crash:rank=0:step=2,crash:rank=0:step=5:gen=1 -- " +
          Train(*dir_, "budget_spent"),
      dir_->path());
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("restart budget spent: 1 restart(s) in the last 1h (--restart-budget "
                          "1/h)"),
            std::string::npos)
      << r.output;

  r = RunTenax("launch --nproc-per-node 2 --max-restarts 0 --inject crash:rank=1:step=5 -- " +
                   Train(*dir_, "no_restarts"),
               dir_->path());
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("1 failure(s) and 0 restart(s)"), std::string::npos) << r.output;
}

TEST_F(ResilienceE2E, NoRestartsLeftStopsWithAReport) {
  auto r = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 1 "
      "--inject crash:rank=0:step=2,crash:rank=0:step=5:gen=1 -- " +
          Train(*dir_, "exhausted"),
      dir_->path());
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("no restarts left (1 used, --max-restarts)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("2 failure(s) and 1 restart(s)"), std::string::npos) << r.output;
}

// Rank 1 computes 40x longer per step from step 2: reported by rank and host; slowness alone is
// not a failure, so the run is otherwise untouched. The threshold is 8x (as in the multi-node
// test): with the default 1.5x and a 4x slowdown, two suites on the 2-core machine once made the
// healthy rank 0's ~5 ms steps take 65 ms three steps in a row, over 1.5x the slowed rank 1's.
TEST_F(ResilienceE2E, StragglerIsReportedByRankAndHost) {
  std::string out;
  auto r = RunTenax(
      "launch --nproc-per-node 2 --straggler-factor 8 "
      "--inject slow:rank=1:factor=40:from=2 -- " +
          Train(*dir_, "slow"),
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launch: straggler: rank 1 on "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("launch: straggler: rank 0"), std::string::npos) << r.output;
  EXPECT_TRUE(Final("slow", 0) == Final("clean", 0));
  auto report = nlohmann::json::parse(ReadFile(*dir_ / "slow/goodput.json"));
  ASSERT_EQ(report["stragglers"].size(), 1u) << report.dump(2);
  const auto& s = report["stragglers"][0];
  EXPECT_EQ(s["rank"], 1);
  EXPECT_FALSE(s["host"].get<std::string>().empty());
  EXPECT_GT(s["compute_s"].get<double>(), 8 * s["median_s"].get<double>());
  EXPECT_EQ(report["failures"].size(), 0u);
}

// The status file, the live page and the Prometheus endpoint, read while the run is going:
// two scrapes at different steps, each parsed by the text-format rules (HELP and TYPE before the
// samples, counters named _total), with every counter monotonic between them and the training
// series (loss, lr, tokens, FLOP/s, memory, the last checkpoint) present.
TEST_F(ResilienceE2E, StatusFileLivePageAndMetricsDuringARun) {
  const int port = FreeTcpPort();
  const std::string status = *dir_ / "status.json";
  CommandResult r;
  std::thread run([&] {
    r = RunTenax("launch --nproc-per-node 2 --spares 1 --status-file " + status +
                     " --metrics-port " + std::to_string(port) +
                     " --inject slow:rank=0:factor=25 -- " +
                     Train(*dir_, "monitored",
                           "--set training.steps=40 "
                           "--set checkpoint.interval=10"),
                 dir_->path());
  });
  // Waits for a status (from the file) that `ready` accepts; then reads the endpoints.
  nlohmann::json seen;
  auto wait = [&](const std::function<bool(const nlohmann::json&)>& ready) {
    return WaitFor(
        [&] {
          if (!std::filesystem::exists(status)) return false;
          auto j = nlohmann::json::parse(ReadFile(status), nullptr, false);
          if (!j.is_object() || !ready(j)) return false;
          seen = j;
          return true;
        },
        300);
  };
  const bool first_seen = wait([](const nlohmann::json& j) {
    return j["step"].get<int64_t>() < 30 && j["ranks_alive"] == 2 &&
           j.value("training", nlohmann::json::object()).contains("last_checkpoint_step");
  });
  const nlohmann::json first = seen;
  const std::string metrics1 = HttpGet(port, "/metrics");
  // What the checkpoint folder held just after the scrape, for a failure's message.
  std::string listing;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(*dir_ / "monitored/checkpoints", ec)) {
    listing += e.path().filename().string() + " ";
  }
  const std::string page = HttpGet(port, "/");
  const bool second_seen = first_seen && wait([&](const nlohmann::json& j) {
                             return j["step"].get<int64_t>() >= first["step"].get<int64_t>() + 3 &&
                                    j["ranks_alive"] == 2;
                           });
  const std::string metrics2 = HttpGet(port, "/metrics");
  run.join();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(first_seen && second_seen) << "never saw a running status; " << r.output;
  EXPECT_EQ(first["ranks"].size(), 2u);
  EXPECT_EQ(first["restarts"], 0);
  EXPECT_EQ(first["spares_ready"], 1) << first.dump(2);
  EXPECT_GT(first["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(first["training"]["loss"].get<double>(), 0.0);
  EXPECT_NE(r.output.find("launch: live page at http://127.0.0.1:" + std::to_string(port) + "/"),
            std::string::npos);

  // The page embeds the status and fetches nothing.
  EXPECT_NE(page.find("200 OK"), std::string::npos) << page.substr(0, 300);
  EXPECT_NE(page.find("<title>tenax live</title>"), std::string::npos);
  EXPECT_NE(page.find("\"source\":\"tenax launch\""), std::string::npos);
  EXPECT_EQ(page.find(" src="), std::string::npos);

  std::map<std::string, report::testing::PromFamily> a, b;
  ASSERT_NE(metrics1.find("\r\n\r\n"), std::string::npos) << metrics1;
  ASSERT_EQ(report::testing::ParsePrometheus(metrics1.substr(metrics1.find("\r\n\r\n") + 4), &a),
            "")
      << metrics1;
  ASSERT_EQ(report::testing::ParsePrometheus(metrics2.substr(metrics2.find("\r\n\r\n") + 4), &b),
            "")
      << metrics2;
  using report::testing::PromValue;
  EXPECT_EQ(PromValue(a, "tenax_ranks_alive"), 2);
  EXPECT_EQ(PromValue(a, "tenax_restarts_total"), 0);
  for (const char* name :
       {"tenax_train_loss", "tenax_learning_rate", "tenax_grad_norm", "tenax_tokens_total",
        "tenax_tokens_per_second", "tenax_model_flops_per_second", "tenax_memory_peak_bytes",
        "tenax_seconds_since_last_checkpoint", "tenax_last_checkpoint_step",
        "tenax_effective_training_ratio"}) {
    EXPECT_FALSE(std::isnan(PromValue(a, name)))
        << name << "\n"
        << metrics1 << "\nstatus file: " << first.dump(2) << "\ncheckpoints: " << listing;
  }
  EXPECT_FALSE(std::isnan(PromValue(a, "tenax_goodput_seconds", {{"bucket", "productive"}})));
  EXPECT_GE(PromValue(a, "tenax_last_checkpoint_step"), 10);
  EXPECT_GE(PromValue(a, "tenax_seconds_since_last_checkpoint"), 0);
  // 2 ranks x 4 sequences x 32 tokens per step.
  EXPECT_EQ(std::fmod(PromValue(a, "tenax_tokens_total"), 256.0), 0.0);
  EXPECT_GT(PromValue(b, "tenax_tokens_total"), PromValue(a, "tenax_tokens_total"));
  EXPECT_GT(PromValue(b, "tenax_step"), PromValue(a, "tenax_step"));
  int counters = 0;
  for (const auto& [name, family] : a) {
    if (family.type != "counter") continue;
    for (const auto& sample : family.samples) {
      ++counters;
      EXPECT_GE(PromValue(b, name, sample.labels), sample.value) << name;
    }
  }
  EXPECT_GE(counters, 4);
  // Prometheus' own Python client parses both scrapes and finds its conventions kept (typed and
  // documented families, counters named *_total that never go down).
  WriteFile(*dir_ / "scrape1.txt", metrics1.substr(metrics1.find("\r\n\r\n") + 4));
  WriteFile(*dir_ / "scrape2.txt", metrics2.substr(metrics2.find("\r\n\r\n") + 4));
  const CommandResult client =
      RunCommand(Python() + " " + SourceDir() + "/tests/reference/interop_libs.py prometheus " +
                 *dir_ / "scrape1.txt" + " " + *dir_ / "scrape2.txt");
  ASSERT_EQ(client.exit_code, 0) << client.output << "\n(prometheus_client is installed by "
                                 << "./scripts/setup into " << Python() << ")";
  const auto parsed = nlohmann::json::parse(client.output);
  EXPECT_GE(parsed["families"].get<int>(), 10) << client.output;
  const auto client_counters = parsed["counters"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(client_counters.begin(), client_counters.end(), "tenax_restarts_total"),
            client_counters.end())
      << client.output;
  EXPECT_NE(std::find(client_counters.begin(), client_counters.end(), "tenax_tokens_total"),
            client_counters.end())
      << client.output;
  auto last = nlohmann::json::parse(ReadFile(status));
  EXPECT_EQ(last["step"], 40);
  EXPECT_EQ(last["ranks_alive"], 0);
  // The launcher wrote the run's report at the end.
  EXPECT_NE(r.output.find("launch: report written to"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(*dir_ / "monitored/report.html"));
  EXPECT_TRUE(std::filesystem::exists(*dir_ / "monitored/report/timeline.svg"));
}

// Loss spikes (training.loss_spike_factor = 3; the injected spike multiplies rank 1's reported
// loss at step 10 by 100). "restart" with a transient spike: rolled back to step 9, the rerun is
// normal, and the run ends identical to the uninterrupted one.
TEST_F(ResilienceE2E, TransientLossSpikeRollsBackAndEndsIdentical) {
  std::string out;
  auto report =
      Recover("spike_restart", "", "spike:rank=1:step=10",
              "--set training.loss_spike_factor=3 --set training.on_loss_spike=restart", &out);
  ExpectFailure(report, "loss-spike", -1);
  EXPECT_EQ(report["failures"][0]["exit_code"], 8);
  EXPECT_EQ(report["failures"][0]["resumed_from"], 9);
  ASSERT_EQ(report["loss_spikes"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["loss_spikes"][0]["step"], 10);
  EXPECT_EQ(report["loss_spikes"][0]["action"], "restart");
  EXPECT_NE(out.find("step 10: loss spike"), std::string::npos) << out;
  EXPECT_NE(out.find("loss spike: step 10"), std::string::npos) << out;  // the summary line
}

// A batch that spikes every time (gen=all): "restart" rolls back once, the spike comes back at
// the same step, and that step's update is skipped; the result equals skipping in place
// ("skip", no restart) bit for bit, and differs from the uninterrupted run. "warn" changes
// nothing; "stop" exits 7 and is not restarted.
TEST_F(ResilienceE2E, LossSpikeThatComesBackIsSkipped) {
  const std::string detect = "--set training.loss_spike_factor=3 --set training.on_loss_spike=";
  auto rolled = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 3 "
      "--inject spike:rank=1:step=10:gen=all -- " +
          Train(*dir_, "spike_data", detect + "restart"),
      dir_->path());
  ASSERT_EQ(rolled.exit_code, 0) << rolled.output;
  auto report = nlohmann::json::parse(ReadFile(*dir_ / "spike_data/goodput.json"));
  EXPECT_EQ(report["restarts"], 1);
  ASSERT_EQ(report["loss_spikes"].size(), 2u) << report.dump(2);
  EXPECT_EQ(report["loss_spikes"][0]["action"], "restart");
  EXPECT_EQ(report["loss_spikes"][0]["generation"], 0);
  EXPECT_EQ(report["loss_spikes"][1]["action"], "skip");
  EXPECT_EQ(report["loss_spikes"][1]["generation"], 1);
  EXPECT_EQ(report["loss_spikes"][1]["step"], 10);

  auto skipped = RunTenax("launch --nproc-per-node 2 --inject spike:rank=1:step=10 -- " +
                              Train(*dir_, "spike_skip", detect + "skip"),
                          dir_->path());
  ASSERT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("skipping this step's update"), std::string::npos);
  for (int shard : {0, 1}) {
    EXPECT_TRUE(Final("spike_data", shard) == Final("spike_skip", shard)) << shard;
    EXPECT_FALSE(Final("spike_skip", shard) == Final("clean", shard)) << shard;
  }
  auto warned = Recover("spike_warn", "", "spike:rank=1:step=10", detect + "warn");
  EXPECT_EQ(warned["restarts"], 0);
  ASSERT_EQ(warned["loss_spikes"].size(), 1u);
  EXPECT_EQ(warned["loss_spikes"][0]["action"], "warn");

  auto stop = RunTenax(
      "launch --nproc-per-node 2 --max-restarts 2 "
      "--inject spike:rank=0:step=10 -- " +
          Train(*dir_, "spike_stop", detect + "stop"),
      dir_->path());
  EXPECT_EQ(stop.exit_code, 7) << stop.output;
  EXPECT_NE(stop.output.find("training.on_loss_spike = \"stop\""), std::string::npos)
      << stop.output;
  EXPECT_NE(stop.output.find("not restarting"), std::string::npos) << stop.output;
}

// The checkpoint faults with asynchronous saves (checkpoint.async): the injection fires on the
// writer thread at the same points as in synchronous saves. A failed background write surfaces at
// the next save (exit 5, "checkpoint-write"); a rank killed while its writer thread writes counts
// as a crash in a checkpoint; a checkpoint damaged after its commit is skipped at resume. Each
// run resumes from step 6 and ends identical.
TEST_F(ResilienceE2E, CheckpointFaultsWithAsynchronousSaves) {
  const std::string async = "--set checkpoint.async=true";
  std::string out;
  auto fail = Recover("async_ckpt_fail", "", "ckpt-fail:step=9", async, &out);
  ExpectFailure(fail, "checkpoint-write", -1);
  EXPECT_EQ(fail["failures"][0]["exit_code"], 5);
  EXPECT_EQ(fail["failures"][0]["resumed_from"], 6);
  EXPECT_NE(out.find("injected I/O error"), std::string::npos) << out;

  auto kill = Recover("async_kill_in_ckpt", "", "kill-in-ckpt:rank=0:step=9", async);
  ExpectFailure(kill, "crash-in-checkpoint", 0);
  EXPECT_EQ(kill["failures"][0]["exit_code"], 137);
  EXPECT_EQ(kill["failures"][0]["resumed_from"], 6);

  auto corrupt =
      Recover("async_ckpt_corrupt", "", "ckpt-corrupt:step=9,crash:rank=1:step=11", async, &out);
  EXPECT_NE(out.find("skipping checkpoint step 9"), std::string::npos) << out;
  ASSERT_EQ(corrupt["failures"].size(), 2u) << corrupt.dump(2);
  EXPECT_EQ(corrupt["failures"][0]["resumed_from"], 6);
}

// Memory replicas (checkpoint.memory_replicas): after a crash the ranks restore the newest
// checkpoint from the copies in /dev/shm, not from storage. Step 9's weights file on storage is
// damaged after its commit, so a restore from storage would fall back to step 6; from RAM the
// run resumes at step 9 (one step redone) and ends identical. The copies are freed at the end.
TEST_F(ResilienceE2E, MemoryReplicasRestoreWithoutReadingStorage) {
  const std::string job = "memory_replica_e2e";
  std::string out;
  auto report = Recover(job, "", "ckpt-corrupt:step=9,crash:rank=1:step=11",
                        "--set checkpoint.memory_replicas=true", &out);
  EXPECT_NE(out.find("resumed from step 9 out of memory replicas"), std::string::npos) << out;
  EXPECT_EQ(out.find("skipping checkpoint step 9"), std::string::npos) << out;
  ExpectFailure(report, "crash", 1);
  EXPECT_EQ(report["failures"][0]["resumed_from"], 9);
  EXPECT_EQ(report["steps_redone"], 1);  // step 10
  // The launcher's own RAM folder (named after the job and the launcher's pid, so a concurrent
  // run of the same job name elsewhere on this host has another one) is gone at the end.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("out of memory replicas in (\\S+):"))) << out;
  const std::string root = m[1];
  EXPECT_EQ(root.rfind("/dev/shm/tenax-ram-" + job + "-", 0), 0u) << root;
  EXPECT_FALSE(std::filesystem::exists(root)) << root;
  EXPECT_FALSE(std::filesystem::exists(root + ".owner")) << root;
}

// Inputs a restart cannot fix stop the launch before any rank starts, with a message that
// names the key or flag: a bad config value, a malformed or impossible fault spec, a flag that is
// not a finite number in range, an output path that cannot be written.
TEST_F(ResilienceE2E, BadInputStopsBeforeAnyRankStarts) {
  auto expect_refused = [&](const std::string& flags, const std::string& extra,
                            const std::string& message) {
    auto r = RunTenax(
        "launch --nproc-per-node 2 --max-restarts 3 " + flags + " -- " + Train(*dir_, "bad", extra),
        dir_->path());
    EXPECT_EQ(r.exit_code, 2) << flags << extra << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("generation 0"), std::string::npos) << r.output;  // nothing started
  };
  expect_refused("", "--set optimizer.lr=-1", "optimizer.lr");
  expect_refused("--inject crash:rank=1", "", "a crash needs rank=R and step=S");
  expect_refused("--inject slow:rank=1", "", "a slow needs factor=F");
  expect_refused("--inject crash:rank=7:step=3", "", "rank 7 does not exist in a job of 2");
  expect_refused("--inject nan:rank=0:step=99", "", "step 99 is after the run's last step (12");
  expect_refused("--inject hang:rank=0:step=2:gen=4", "", "generation 4 never runs");
  expect_refused("--hang-timeout nan", "", "--hang-timeout nan is invalid");
  expect_refused("--hang-timeout -1", "", "--hang-timeout -1 is invalid");
  expect_refused("--goodput-file /proc/tenax/goodput.json", "", "--goodput-file");
  expect_refused("", "--set training.bogus=1", "training.bogus");
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "bad/goodput.json"));
}

}  // namespace
}  // namespace tenax::testing
