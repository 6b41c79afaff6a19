// Soak test of recovery: 4 ranks + 1 hot spare under a stream of seeded random failures (crashes
// by SIGKILL and by exit, NaN losses, loss spikes, failed checkpoint writes, kills in the middle
// of a checkpoint, a hang), one per launch generation, for a couple of minutes, with asynchronous
// checkpoints and memory replicas on (so restarts restore from RAM and the background writer's
// commit protocol meets every kind of failure). The run must finish, end with the weights of an
// uninterrupted run (bitwise, CPU), record every failure in goodput.json and report its effective
// training time.
// The failures are placed by step, not by wall time, so that the plan is the same on a loaded
// machine: each one lands a few steps after the checkpoint the previous restart resumed from.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "test_util.h"

namespace tenax::testing {
namespace {

constexpr int kSteps = 96;
constexpr int kInterval = 4;  // checkpoint.interval
constexpr int kRanks = 4;

std::string Train(const TempDir& dir, const std::string& name) {
  return "train --defaults --set data.source=synthetic --set model.preset=debug-tiny "
         "--set training.seq_len=32 --set data.synthetic.train_tokens=80000 "
         "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32 "
         "--set data.synthetic.order=1 --set metrics.eval_tokens=1024 "
         "--set metrics.eval_interval=100 --set metrics.progress=never --set optimizer.lr=3e-3 "
         "--set checkpoint.interval=" +
         std::to_string(kInterval) + " --set training.steps=" + std::to_string(kSteps) +
         " --set training.local_batch_size=2 --set training.on_nonfinite=restart "
         "--set training.loss_spike_factor=3 --set training.on_loss_spike=restart "
         "--set checkpoint.async=true --set checkpoint.memory_replicas=true "
         "--set job.dump_folder=" +
         dir.path() + " --set job.name=" + name;
}

struct Planned {
  std::string spec;  // one FAULT of the --inject grammar
  std::string kind;  // as goodput.json names it
};

// One fault per generation until the next one would land past the last step.
std::vector<Planned> Plan(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Planned> plan;
  int resume = 0;  // the step the generation resumes from
  bool hung = false;
  for (int gen = 0;; ++gen) {
    const std::string g = ":gen=" + std::to_string(gen);
    const int rank = pick(0, kRanks - 1);
    int kind = pick(0, hung ? 4 : 5);
    if (kind == 5) kind = hung ? 4 : 5;
    // Past at least one new checkpoint, so every generation makes progress.
    const int step = resume + kInterval + pick(1, kInterval);
    const int ckpt_step = (resume / kInterval + 2) * kInterval;  // a checkpoint after a new one
    if (step > kSteps - 2 || ckpt_step > kSteps - kInterval) break;
    if (kind == 0 || kind == 1) {
      plan.push_back({"crash:rank=" + std::to_string(rank) + ":step=" + std::to_string(step) +
                          ":how=" + (kind == 0 ? "kill" : "exit") + g,
                      "crash"});
      resume = (step - 1) / kInterval * kInterval;
    } else if (kind == 2 || (kind == 4 && step <= 8)) {
      plan.push_back(
          {"nan:rank=" + std::to_string(rank) + ":step=" + std::to_string(step) + g, "nonfinite"});
      resume = (step - 1) / kInterval * kInterval;
    } else if (kind == 4) {  // spike detection needs 8 earlier steps
      plan.push_back({"spike:rank=" + std::to_string(rank) + ":step=" + std::to_string(step) + g,
                      "loss-spike"});
      resume = (step - 1) / kInterval * kInterval;
    } else if (kind == 3) {
      if (pick(0, 1) == 0) {
        plan.push_back(
            {"ckpt-fail:step=" + std::to_string(ckpt_step) + ":rank=" + std::to_string(rank) + g,
             "checkpoint-write"});
      } else {
        plan.push_back(
            {"kill-in-ckpt:rank=" + std::to_string(rank) + ":step=" + std::to_string(ckpt_step) + g,
             "crash-in-checkpoint"});
      }
      resume = ckpt_step - kInterval;
    } else {
      hung = true;
      plan.push_back(
          {"hang:rank=" + std::to_string(rank) + ":step=" + std::to_string(step) + g, "hang"});
      resume = (step - 1) / kInterval * kInterval;
    }
  }
  return plan;
}

// The launcher's own lines of a run's output (its verdicts, restarts and the faults that never
// fired), which say what went wrong in a few dozen lines; put last in a failure message, they
// survive a log that keeps only the head and the tail.
std::string LauncherLines(const std::string& output) {
  std::string out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("launch:", 0) == 0 || line.rfind("error: launch:", 0) == 0 ||
        line.rfind("warning: launch:", 0) == 0) {
      out += line + "\n";
    }
  }
  return out;
}

TEST(Soak, FourRanksAndASpareSurviveRandomFailures) {
  TempDir dir;
  const uint32_t seed = 20240601;
  const std::vector<Planned> plan = Plan(seed);
  ASSERT_GE(plan.size(), 5u) << "the plan should hold several failures";
  std::string inject;
  std::map<std::string, int> expected_kinds;
  for (const Planned& p : plan) {
    inject += (inject.empty() ? "" : ",") + p.spec;
    ++expected_kinds[p.kind];
  }
  auto clean = RunTenax("launch --nproc-per-node 4 -- " + Train(dir, "soak_clean"), dir.path());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  // The hang timeout is the only timing in the test: a stall of a loaded CI machine (an fsync
  // behind other tests' checkpoints) longer than it would be a failure the plan does not hold,
  // which takes the place of a planned one (it then never fires: exit code 2). 10 s costs the
  // planned hang 7 s more than the 3 s it had (a CI run once failed as such a stall would).
  auto r = RunTenax(
      "launch --nproc-per-node 4 --spares 1 --quarantine-after 100 "
      "--hang-timeout 10 --max-restarts " +
          std::to_string(plan.size()) + " --inject " + inject + " -- " + Train(dir, "soak"),
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << "seed " << seed << ", inject " << inject << "\n"
                            << r.output << "\nthe launcher's lines:\n"
                            << LauncherLines(r.output);
  for (int shard = 0; shard < kRanks; ++shard) {
    const std::string file = "/checkpoints/step_000000" + std::to_string(kSteps) +
                             "/model-rank0000" + std::to_string(shard) + "-of-00004.safetensors";
    const std::string want = ReadFile(dir / ("soak_clean" + file));
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(ReadFile(dir / ("soak" + file)) == want) << "shard " << shard << ", " << inject;
  }
  auto report = nlohmann::json::parse(ReadFile(dir / "soak/goodput.json"));
  EXPECT_EQ(report["step"], kSteps);
  EXPECT_EQ(report["restarts"], plan.size());
  ASSERT_EQ(report["failures"].size(), plan.size()) << report.dump(2);
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(report["failures"][i]["kind"], plan[i].kind) << i << ": " << plan[i].spec << "\n"
                                                           << report["failures"][i].dump(2) << "\n"
                                                           << r.output;
    EXPECT_GT(report["failures"][i]["recovery_s"].get<double>(), 0.0) << i;
  }
  for (const auto& [kind, n] : expected_kinds) EXPECT_EQ(report["failures_by_kind"][kind], n);
  const double ratio = report["effective_training_ratio"].get<double>();
  EXPECT_GT(ratio, 0.0);
  EXPECT_LT(ratio, 1.0);
  EXPECT_GT(report["steps_redone"].get<int>(), 0);
  EXPECT_NE(r.output.find("effective training time ratio"), std::string::npos) << r.output;
  std::printf("soak: %zu failures in %.1f s, effective training time ratio %.3f\n", plan.size(),
              report["wall_s"].get<double>(), ratio);
}

}  // namespace
}  // namespace tenax::testing
