// End-to-end tests of `tenax plan` and `tenax simulate`, run as a user runs them: the real binary,
// real hardware profiles from configs/hardware, exit codes and the numbers it prints.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tenax/plan/failure.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

nlohmann::json ParseJson(const CommandResult& r) {
  const size_t start = r.output.find('{');
  EXPECT_NE(start, std::string::npos) << r.output;
  return nlohmann::json::parse(r.output.substr(start == std::string::npos ? 0 : start));
}

const char* k405bOn16k =
    "plan --model llama3-405b --gpus 16384 --gpu h100-sxm --seq-len 8192 "
    "--global-batch-tokens 16Mi";

TEST(PlanE2E, ValidationTablePasses) {
  TempDir dir;
  auto r = RunTenax("plan --validate", dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"Calibration error (component measurements", "Validation error (published",
                        "#### Calibration rows", "#### Validation rows", "| pass |",
                        "Narayanan et al. 2021", "The Llama 3 Herd of Models"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST(PlanE2E, FullSearchPrintsRankedLayoutsDaysAndCost) {
  TempDir dir;
  auto r = RunTenax(std::string(k405bOn16k) +
                        " --tokens 15.6T --price-per-gpu-hour 2 --top 3 --json --fix fp8=no --all",
                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_GT(j["search"]["evaluated"].get<int64_t>(), 100000);
  std::printf("search time: %.3f s\n", j["search"]["seconds"].get<double>());
  ASSERT_EQ(j["layouts"].size(), 3u);
  double last = 0;
  for (const auto& l : j["layouts"]) {
    EXPECT_EQ(l["tp"].get<int64_t>() * l["cp"].get<int64_t>() * l["pp"].get<int64_t>() *
                  l["dp_replicate"].get<int64_t>() * l["dp_shard"].get<int64_t>(),
              16384);
    EXPECT_FALSE(l["fp8"].get<bool>());
    EXPECT_LE(l["memory_bytes"].get<double>(), 79.6 * 1073741824.0);
    EXPECT_GE(l["step_s"].get<double>(), last);
    last = l["step_s"].get<double>();
    // Days follow from the printed throughput, and the cost from the days.
    const auto& t = l["training"];
    const double days = 15.6e12 / l["tokens_per_s"].get<double>() / 86400.0;
    EXPECT_NEAR(t["days"].get<double>(), days, 1e-9 * days);
    EXPECT_NEAR(t["cost"].get<double>(), days * 24 * 16384 * 2, 1e-6 * t["cost"].get<double>());
  }
  // No slower than Meta's 400 TFLOP/s/GPU on this cluster (docs/planner.md).
  EXPECT_GE(j["layouts"][0]["tflops_per_gpu"].get<double>(), 400);
  // What the issue asks the JSON to carry: parameter counts, the per-layer breakdown, hardware
  // FLOPs beside model FLOPs, and whether tenax train runs the layout.
  EXPECT_NEAR(j["model"]["params"]["total"].get<double>(), 405.85e9, 0.01e9);
  const auto& l0 = j["layouts"][0];
  for (const char* k : {"matmul", "attention", "elementwise", "recompute", "tp_exposed",
                        "tp_hidden", "cp_exposed", "total"}) {
    EXPECT_TRUE(l0["layer_s"].contains(k)) << k;
  }
  for (const char* k : {"compute", "bubble", "pp_exposed", "dp_exposed", "tp_exposed"}) {
    EXPECT_TRUE(l0["time_s"].contains(k)) << k;
  }
  EXPECT_GE(l0["hardware_tflops_per_gpu"].get<double>(), l0["tflops_per_gpu"].get<double>());
  EXPECT_TRUE(l0["tenax_train"]["runnable"].is_boolean());
}

TEST(PlanE2E, FailureRateAddsTimeToTrain) {
  TempDir dir;
  auto r = RunTenax(std::string(k405bOn16k) +
                        " --tokens 15.6T --top 1 --json --failure-rate '419 in 54d on 16384 gpus' "
                        "--checkpoint-cost 10s --restart-cost 6m",
                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto t = ParseJson(r)["layouts"][0]["training"];
  const double clean = t["days"].get<double>(), failing = t["with_failures"]["days"].get<double>();
  EXPECT_GT(failing, clean);
  EXPECT_NEAR(t["with_failures"]["effective"].get<double>(), clean / failing, 1e-9);
  EXPECT_NEAR(t["with_failures"]["mtbf_s"].get<double>() / 3600, 54.0 * 24 / 419, 1e-6);
}

// Silent-data-corruption checks: plan counts one replay (the step less its exposed data-parallel
// traffic and optimizer) per interval in the days, and says tenax train checks CPU ranks only so
// far; simulate takes the measured share and counts the replays as lost time.
TEST(PlanE2E, SdcChecksAreCountedInThePlanAndTheSimulation) {
  TempDir dir;
  const std::string plan = std::string(k405bOn16k) + " --tokens 15.6T --top 1 --json";
  auto r = RunTenax(plan, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plain = ParseJson(r)["layouts"][0];
  r = RunTenax(plan + " --sdc-check-interval 50", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto checked = ParseJson(r)["layouts"][0];
  EXPECT_EQ(checked["step_s"], plain["step_s"]);
  const double overhead = checked["sdc_overhead"].get<double>();
  EXPECT_GT(overhead, 0.5 / 50);  // most of a step is the replayed compute
  EXPECT_LT(overhead, 1.0 / 50);  // but not its gradient reduction or optimizer
  EXPECT_NEAR(checked["training"]["days"].get<double>(),
              plain["training"]["days"].get<double>() * (1 + overhead), 1e-9);
  r = RunTenax(std::string(k405bOn16k) + " --top 1 --sdc-check-interval 50", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("silent-data-corruption checks every 50 steps"), std::string::npos);
  EXPECT_NE(r.output.find("tenax train checks CPU ranks only so far"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("resilience.sdc_check_interval=50"), std::string::npos);  // GPUs refuse
  EXPECT_NE(RunTenax(plan + " --sdc-check-interval -1", dir.path()).exit_code, 0);

  const std::string sim =
      "simulate --gpus 1024 --failure-rate 0.001/node-hour --checkpoint-cost 10s "
      "--restart-cost 5m --spares 4 --duration 10d --runs 50 --seed 3 --json";
  r = RunTenax(sim, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double effective = ParseJson(r)["effective"]["mean"].get<double>();
  r = RunTenax(sim + " --sdc-overhead 2%", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_DOUBLE_EQ(j["sdc_overhead"].get<double>(), 0.02);
  EXPECT_EQ(j["duration_s"].get<double>(), 10 * 86400.0);  // the useful computation
  EXPECT_LT(j["effective"]["mean"].get<double>(), effective / 1.02 + 0.005);
  EXPECT_GT(j["effective"]["mean"].get<double>(), effective / 1.02 - 0.005);
  r = RunTenax(sim + " --sdc-overhead lots", dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--sdc-overhead lots is not a share"), std::string::npos) << r.output;
}

TEST(PlanE2E, FailureRateAloneGivesTheDalyInterval) {
  TempDir dir;
  auto r = RunTenax(std::string(k405bOn16k) +
                        " --top 1 --json --failure-rate '419 in 54d on 16384 gpus' "
                        "--checkpoint-cost 60s --restart-cost 6m",
                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto f = ParseJson(r)["failures"];
  const double mtbf = 54.0 * 24 * 3600 / 419;
  EXPECT_NEAR(f["mtbf_s"].get<double>(), mtbf, 1e-6 * mtbf);
  // Daly (2006): sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C.
  const double c = 60, x = std::sqrt(c / (2 * mtbf));
  EXPECT_NEAR(f["daly_interval_s"].get<double>(),
              std::sqrt(2 * c * mtbf) * (1 + x / 3 + x * x / 9) - c, 1e-6);
  EXPECT_GT(f["effective"].get<double>(), 0.8);
  EXPECT_LT(f["effective"].get<double>(), 1.0);
}

TEST(PlanE2E, ExplainShowsTheBreakdown) {
  TempDir dir;
  auto r = RunTenax(
      "plan --model llama3-8b --gpus 8 --gpu h100-hbm2e-500w --seq-len 8192 "
      "--global-batch-tokens 128Ki --fix dp_shard=8,mbs=2,ac=op,fp8=no,reshard=yes "
      "--explain",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // ac=op is not tenax train's: the pinned layout is still shown, saying what it lacks.
  EXPECT_NE(r.output.find("ranked: every layout; tenax train cannot run any layout that fits "
                          "these constraints"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("#1 needs what tenax train lacks: recompute = op"), std::string::npos);
  for (const char* s : {"tp1 pp1 fsdp8 mbs2x1 ac=op bf16", "one micro-batch through", "attention",
                        "bubble", "memory per GPU", "activations", "= total", "hardware TFLOP/s"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
}

// Any shape on the command line, GPT-style blocks and software options of the run; the report
// names the shape.
TEST(PlanE2E, ShapeFlagsAndSoftwareOptions) {
  TempDir dir;
  auto r = RunTenax(
      "plan --layers 96 --hidden 12288 --heads 96 --ffn 49152 --vocab 51200 --arch gpt "
      "--seq-len 2048 --gpus 384 --gpu a100-80g --global-batch-tokens 3Mi "
      "--attention materialized --dropout 0.1 --kernels fused --sequence-parallel no "
      "--dp-overlap no --fix tp=8,pp=12,dp_shard=1,mbs=1,ac=full --top 2 --json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_EQ(j["model"]["name"],
            "96 layers, hidden 12288, 96 heads, ffn 49152, vocab 51200, gelu, layernorm, biases, "
            "learned positions, tied embeddings");
  // GPT-3 175B: 12 l h^2 + biases and norms + (V + s) h.
  EXPECT_NEAR(j["model"]["params"]["total"].get<double>(), 174.6e9, 0.1e9);
  EXPECT_EQ(j["software"]["attention"], "materialized");
  const auto& l0 = j["layouts"][0];
  EXPECT_EQ(l0["tp"], 8);
  EXPECT_EQ(l0["pp"], 12);
  EXPECT_FALSE(l0["tenax_train"]["runnable"].get<bool>());
  // Full recomputation: hardware FLOPs exceed model FLOPs by the recomputed forward.
  EXPECT_GT(l0["hardware_tflops_per_gpu"].get<double>(), 1.3 * l0["tflops_per_gpu"].get<double>());
  // A shape alone needs all its sizes.
  r = RunTenax("plan --layers 4 --hidden 256 --gpus 1 --seq-len 128 --global-batch-tokens 1Ki",
               dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--heads --ffn --vocab"), std::string::npos) << r.output;
  // A kernel the profile has no measurements for is refused before any search.
  r = RunTenax(
      "plan --model llama3-8b --gpus 8 --gpu a100-80g --seq-len 8192 --global-batch-tokens 1Mi "
      "--attention flash3",
      dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[attention.flash3]"), std::string::npos) << r.output;
  // torchtitan's software: PyTorch's ring attention and complex rotary, shown in the JSON; a
  // misspelt value is refused with the choices.
  r = RunTenax(
      "plan --model llama3-8b --gpus 8 --seq-len 65536 --global-batch-tokens 512Ki --all "
      "--kernels fused --cp-attention ring --complex-rotary yes --fix cp=2 --top 1 --json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json t = ParseJson(r);
  EXPECT_EQ(t["software"]["cp_attention"], "ring");
  EXPECT_EQ(t["software"]["complex_rotary"], true);
  EXPECT_EQ(t["layouts"][0]["cp"], 2);
  r = RunTenax(
      "plan --model llama3-8b --gpus 8 --seq-len 8192 --global-batch-tokens 1Mi "
      "--cp-attention rings",
      dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("expected all-gather or ring"), std::string::npos) << r.output;
}

TEST(PlanE2E, RunnableLayoutsAreMarked) {
  TempDir dir;
  auto r = RunTenax(
      "plan --model llama3-8b --gpus 8 --seq-len 8192 --global-batch-tokens 64Ki "
      "--fix dp_shard=8,mbs=1,ac=alternate,fp8=no,reshard=yes --top 1 --json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto t = ParseJson(r)["layouts"][0]["tenax_train"];
  EXPECT_TRUE(t["runnable"].get<bool>()) << t.dump();
  r = RunTenax(
      "plan --model llama3-8b --gpus 8 --seq-len 8192 --global-batch-tokens 128Ki "
      "--fix dp_shard=8,mbs=2,ac=op,fp8=yes --top 1 --json --all",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto u = ParseJson(r)["layouts"][0]["tenax_train"];
  EXPECT_FALSE(u["runnable"].get<bool>());
  EXPECT_NE(u["missing"].dump().find("fp8"), std::string::npos) << u.dump();
}

// By default only what tenax train runs is ranked (the README's 405B example), with the --set
// words that run #1; what is faster but not runnable is listed apart with what it needs.
TEST(PlanE2E, RanksRunnableLayoutsAndPrintsHowToRunThem) {
  TempDir dir;
  auto r = RunTenax(std::string(k405bOn16k) + " --top 3", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ranked: the layouts `tenax train` runs today"), std::string::npos);
  EXPECT_NE(r.output.find("run #1 with tenax train"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tenax launch --nnodes 2048 --nproc-per-node 8"), std::string::npos);
  EXPECT_NE(r.output.find("--set parallelism.tensor_parallel="), std::string::npos);
  EXPECT_NE(r.output.find("faster layouts tenax train cannot run yet"), std::string::npos);
  EXPECT_NE(r.output.find("needs context parallelism"), std::string::npos) << r.output;
  r = RunTenax(std::string(k405bOn16k) + " --top 3 --json", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_EQ(j["ranked"], "runnable");
  ASSERT_EQ(j["layouts"].size(), 3u);
  for (const auto& l : j["layouts"]) {
    EXPECT_TRUE(l["tenax_train"]["runnable"].get<bool>()) << l["name"];
    EXPECT_FALSE(l["fp8"].get<bool>());
    EXPECT_EQ(l["cp"], 1);
    EXPECT_FALSE(l["tenax_train"]["set"].empty());
  }
  ASSERT_FALSE(j["faster_not_runnable"].empty());
  EXPECT_LT(j["faster_not_runnable"][0]["step_s"].get<double>(),
            j["layouts"][0]["step_s"].get<double>());
  EXPECT_FALSE(j["faster_not_runnable"][0]["tenax_train"]["runnable"].get<bool>());
  // Software options tenax train lacks rule out every layout: all are ranked, saying why.
  r = RunTenax(std::string(k405bOn16k) + " --top 1 --kernels fused", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ranked: every layout; tenax train cannot run fused kernels"),
            std::string::npos)
      << r.output;
}

// A plan for a config takes its batch and sequence length, and the --set words it prints train:
// tenax launch runs them (the planned layout: 2 tensor-parallel ranks) and the run folder's
// config records the layout.
TEST(PlanE2E, PlannedSettingsRunWithTenaxTrain) {
  TempDir dir;
  WriteFile(dir / "tiny.toml",
            "[job]\nname = \"planned\"\n[model]\npreset = \"debug-tiny\"\n"
            "[data]\nsource = \"synthetic\"\n[data.synthetic]\nvocab_size = 32\norder = 1\n"
            "train_tokens = 20000\nval_tokens = 2000\n"
            "[training]\nsteps = 2\nseq_len = 32\nlocal_batch_size = 4\ndevice = \"cpu\"\n"
            "[metrics]\neval_tokens = 256\ntensorboard = false\n[checkpoint]\nenable = false\n");
  auto r = RunTenax("plan --model tiny.toml --gpus 2 --gpu h100-sxm --fix tp=2 --top 1 --json",
                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_EQ(j["seq_len"], 32);
  // local_batch_size 4 x seq_len 32 x 1 data-parallel rank (tp 1 x pp 1 on 2 GPUs is dp 2).
  EXPECT_EQ(j["global_batch_tokens"], 4 * 32 * 2);
  const auto& l = j["layouts"][0];
  EXPECT_EQ(l["tp"], 2);
  std::string sets;
  for (const auto& s : l["tenax_train"]["set"]) sets += " --set " + s.get<std::string>();
  // fp32 after the plan's bf16: Gloo (the CPU backend) has no bf16 collectives.
  r = RunTenax("launch --nproc-per-node 2 -- train --config tiny.toml" + sets +
                   " --set training.mixed_precision=fp32",
               dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("layout dp_replicate 1 x dp_shard 1 x pp 1 x tp 2"), std::string::npos)
      << r.output;
  const std::string recorded = ReadFile(dir / "runs/planned/config.toml");
  EXPECT_NE(recorded.find("tensor_parallel = 2"), std::string::npos) << recorded;
  // Without --global-batch-tokens and with a config, nothing else is asked for.
  r = RunTenax("plan --model tiny.toml --gpus 2 --top 1", dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch from tiny.toml: local_batch_size 4 x grad_accum_steps 1 x "
                          "seq_len 32 x 2 data-parallel ranks"),
            std::string::npos)
      << r.output;
}

// Context parallelism as tenax runs it (ring attention): a plan fixed to cp 2 is runnable, its
// --set words train on 2 ranks with the sequence split in two; a long-context search may choose
// it, and with the default all-gather model it says what tenax would need.
// The zero-bubble schedules are ranked beside 1F1B, and one the planner prints runs as printed.
TEST(PlanE2E, PlannedZeroBubblePipelineRunsWithTenaxTrain) {
  TempDir dir;
  WriteFile(dir / "pp.toml",
            "[job]\nname = \"planned_zbv\"\n[model]\npreset = \"debug-tiny\"\nn_layers = 4\n"
            "[data]\nsource = \"synthetic\"\n[data.synthetic]\nvocab_size = 32\norder = 1\n"
            "train_tokens = 20000\nval_tokens = 4000\n"
            "[training]\nsteps = 2\nseq_len = 32\nlocal_batch_size = 8\ndevice = \"cpu\"\n"
            "[metrics]\neval_tokens = 1024\ntensorboard = false\n[checkpoint]\nenable = false\n");
  auto r = RunTenax("plan --model pp.toml --gpus 2 --gpu h100-sxm --fix pp=2,vpp=2 --top 40 --json",
                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = ParseJson(r);
  std::map<std::string, int> schedules;
  nlohmann::json pick;
  for (const auto& l : plan["layouts"]) {
    const std::string s = l["pipeline_schedule"].get<std::string>();
    ++schedules[s];
    if (pick.is_null() && (s == "zbv" || s == "dualpipev") &&
        l["tenax_train"]["runnable"].get<bool>()) {
      pick = l;
    }
  }
  EXPECT_GT(schedules["zbv"], 0) << r.output;
  EXPECT_GT(schedules["dualpipev"], 0) << r.output;
  ASSERT_FALSE(pick.is_null()) << r.output;
  std::string sets;
  for (const auto& s : pick["tenax_train"]["set"]) sets += " --set " + s.get<std::string>();
  EXPECT_NE(
      sets.find("parallelism.pipeline_schedule=" + pick["pipeline_schedule"].get<std::string>()),
      std::string::npos)
      << sets;
  EXPECT_NE(sets.find("parallelism.virtual_stages=2"), std::string::npos) << sets;
  r = RunTenax("launch --nproc-per-node 2 -- train --config pp.toml" + sets +
                   " --set training.mixed_precision=fp32",
               dir.path());
  ASSERT_EQ(r.exit_code, 0) << sets << "\n" << r.output;
  EXPECT_NE(r.output.find("x pp 2 x tp 1"), std::string::npos) << r.output;
}

TEST(PlanE2E, PlannedContextParallelismRunsWithTenaxTrain) {
  TempDir dir;
  WriteFile(dir / "long.toml",
            "[job]\nname = \"planned_cp\"\n[model]\npreset = \"debug-tiny\"\n"
            "[data]\nsource = \"synthetic\"\n[data.synthetic]\nvocab_size = 32\norder = 1\n"
            "train_tokens = 20000\nval_tokens = 4000\n"
            "[training]\nsteps = 2\nseq_len = 512\nlocal_batch_size = 2\ndevice = \"cpu\"\n"
            "[metrics]\neval_tokens = 1024\ntensorboard = false\n[checkpoint]\nenable = false\n");
  auto r = RunTenax(
      "plan --model long.toml --gpus 2 --gpu h100-sxm --fix cp=2 --cp-attention ring --top 1 "
      "--json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json l = ParseJson(r)["layouts"][0];
  EXPECT_EQ(l["cp"], 2);
  EXPECT_TRUE(l["tenax_train"]["runnable"].get<bool>()) << l.dump();
  std::string sets;
  for (const auto& s : l["tenax_train"]["set"]) sets += " --set " + s.get<std::string>();
  EXPECT_NE(sets.find("parallelism.context_parallel=2"), std::string::npos) << sets;
  r = RunTenax("launch --nproc-per-node 2 -- train --config long.toml" + sets +
                   " --set training.mixed_precision=fp32",
               dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("x pp 1 x cp 2 x tp 1"), std::string::npos) << r.output;
  // 128K tokens of context on 8 H100s: the fastest runnable layout splits the sequence.
  r = RunTenax(
      "plan --model llama3-8b --gpus 8 --gpu h100-sxm --seq-len 131072 "
      "--global-batch-tokens 1Mi --cp-attention ring --top 1 --json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json best = ParseJson(r)["layouts"][0];
  EXPECT_GT(best["cp"].get<int>(), 1) << best.dump();
  EXPECT_TRUE(best["tenax_train"]["runnable"].get<bool>()) << best.dump();
  r = RunTenax("plan --model long.toml --gpus 2 --gpu h100-sxm --fix cp=2 --top 1 --json --all",
               dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json ag = ParseJson(r)["layouts"][0]["tenax_train"];
  EXPECT_FALSE(ag["runnable"].get<bool>());
  EXPECT_NE(ag["missing"].dump().find("--cp-attention ring"), std::string::npos) << ag.dump();
}

TEST(PlanE2E, ProfilesAreFoundBesideTheExecutableFromAnyFolder) {
  TempDir dir;  // no configs/ here, and no TENAX_SOURCE_DIR: only /proc/self/exe can find them
  auto r = RunCommand("env -u TENAX_SOURCE_DIR '" + TenaxBinary() +
                          "' plan --model llama3-8b --gpus 8 --gpu h200 --seq-len 8192 "
                          "--global-batch-tokens 1Mi --top 1",
                      dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 8 x h200"), std::string::npos) << r.output;
}

TEST(PlanE2E, BadInputsAreClearErrors) {
  TempDir dir;
  auto r = RunTenax(
      "plan --model llama3-8b --gpus 8 --gpu tpu-v9 --seq-len 8192 "
      "--global-batch-tokens 1Mi",
      dir.path());
  EXPECT_EQ(r.exit_code, 3) << r.output;  // kNotFound
  EXPECT_NE(r.output.find("known profiles:"), std::string::npos) << r.output;
  r = RunTenax("plan --model llama3-8b --gpus 8 --seq-len 8192 --global-batch-tokens 1M",
               dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;  // kInvalidArgument: 1,000,000 is not whole sequences
  EXPECT_NE(r.output.find("whole number of 8192-token sequences"), std::string::npos) << r.output;
  WriteFile(dir / "bad.toml", "inherits = \"h100-sxm\"\n[memory]\nhbm_gib = -1\n");
  r = RunTenax("plan --model llama3-8b --gpus 8 --seq-len 8192 --global-batch-tokens 1Mi --gpu " +
                   dir / "bad.toml",
               dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[memory] hbm_gib must be a number"), std::string::npos) << r.output;
  r = RunTenax("plan --model llama3-405b --gpus 8 --seq-len 8192 --global-batch-tokens 64Ki",
               dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no layout fits: even the leanest"), std::string::npos) << r.output;
}

TEST(PlanE2E, ModelFromAConfigTakesItsSequenceLength) {
  TempDir dir;
  WriteFile(dir / "c.toml",
            "[model]\npreset = \"llama3-8b\"\nn_layers = 8\n"
            "[training]\nseq_len = 4096\n");
  auto r = RunTenax("plan --model c.toml --gpus 8 --global-batch-tokens 512Ki --top 1", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at seq_len 4096"), std::string::npos) << r.output;
}

TEST(PlanE2E, CalibrateFromARunFolderWritesAUsableProfile) {
  TempDir dir;
  WriteFile(dir / "config.toml",
            "[model]\npreset = \"llama3.2-1b\"\n[training]\nseq_len = 2048\n"
            "local_batch_size = 4\nmixed_precision = \"bf16\"\ndevice = \"cuda\"\n");
  std::string metrics;
  for (int step = 1; step <= 6; ++step) {
    metrics += "{\"step\": " + std::to_string(step) +
               ", \"loss\": 3.0, \"tokens_per_s\": 30000, \"mfu\": 0.4}\n";
  }
  WriteFile(dir / "metrics.jsonl", metrics);
  auto r = RunTenax("plan --calibrate . --gpu h100-sxm --out mine.toml", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("after 30000.0 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("after 0.00%"), std::string::npos) << r.output;
  EXPECT_NE(ReadFile(dir / "mine.toml").find("inherits = \"h100-sxm\""), std::string::npos);
  // The calibrated profile predicts what was measured.
  r = RunTenax(
      "plan --model llama3.2-1b --gpus 1 --gpu mine.toml --seq-len 2048 "
      "--global-batch-tokens 8Ki --fix mbs=4,ac=none,fp8=no --json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(ParseJson(r)["layouts"][0]["tokens_per_s_per_gpu"].get<double>(), 30000, 30);
}

TEST(SimulateE2E, LlamaThreeLikeJobIsMostlyTraining) {
  TempDir dir;
  const std::string args =
      "simulate --gpus 16384 --failure-rate '419 in 54d on 16384 gpus' --checkpoint-cost 10s "
      "--restart-cost 5m --spares 16 --swap-time 1m --repair-time 24h --duration 54d "
      "--runs 200 --seed 7 --price-per-gpu-hour 2 --json";
  auto r = RunTenax(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_GT(j["effective"]["ci95"][0].get<double>(), 0.90);
  EXPECT_NEAR(j["mtbf_s"].get<double>() / 3600, 3.093, 0.001);
  EXPECT_NEAR(j["observed_mtbf_s"].get<double>() / j["mtbf_s"].get<double>(), 1.0, 0.03);
  EXPECT_NEAR(j["wall_s"]["mean"].get<double>() / j["daly_expected_wall_s"].get<double>(), 1.0,
              0.01);
  EXPECT_GT(j["lost_cost"].get<double>(), 0);
  // Same seed, same numbers.
  EXPECT_EQ(RunTenax(args, dir.path()).output, r.output);
  // The text form names the pieces the issue asks for.
  r = RunTenax(
      "simulate --gpus 4096 --failure-rate 0.04%/instance-hour --checkpoint-cost 1m "
      "--restart-cost 10m --spares 4 --duration 30d --runs 100",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"job MTBF 4.88 h", "Young", "Daly", "effective training", "failures",
                        "95% CI", "time lost"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
}

TEST(SimulateE2E, BadRateIsAClearError) {
  TempDir dir;
  auto r = RunTenax(
      "simulate --gpus 8 --failure-rate often --checkpoint-cost 1m "
      "--restart-cost 1m --duration 1d",
      dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--failure-rate 'often'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tenax::testing

namespace tenax::testing {
namespace {

// A mixture-of-experts model on 64 H100s: the plan runs, counts total and active parameters,
// picks an expert-parallel degree and explains the choice against the other degrees it tried.
TEST(PlanE2E, MixtralOn64H100ChoosesAndExplainsExpertParallelism) {
  TempDir dir;
  const std::string args =
      "plan --model mixtral-8x7b --gpus 64 --gpu h100-sxm --seq-len 4096 "
      "--global-batch-tokens 4Mi";
  auto r = RunTenax(args + " --explain", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"46.70B parameters, 12.88B active: 2 of 8 experts per token",
                        "expert parallelism: 32 MoE layers of 8 experts", "<- chosen", "all-to-all",
                        "routed experts"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
  auto j = RunTenax(args + " --json --top 3", dir.path());
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const nlohmann::json plan = ParseJson(j);
  EXPECT_NEAR(plan["model"]["params"]["active"].get<double>() / 1e9, 12.88, 0.01);
  const auto& best = plan["layouts"][0];
  const int64_t ep = best["ep"].get<int64_t>();
  EXPECT_EQ(best["dp_shard"].get<int64_t>() % ep, 0);
  if (ep > 1) {
    EXPECT_GT(best["all_to_all_bytes_sent_per_step"].get<double>(), 0);
    EXPECT_GT(best["time_s"]["ep_all_to_all"].get<double>(), 0);
  }
  if (ep > 1) EXPECT_NE(r.output.find(" ep" + std::to_string(ep) + " "), std::string::npos);
  // Pinned: an ep that does not divide dp_shard leaves no layout.
  auto bad = RunTenax(args + " --fix dp_shard=4,ep=8", dir.path());
  EXPECT_NE(bad.exit_code, 0) << bad.output;
}

// An MoE checkpoint holds every expert: simulate (and plan --failure-rate) derive its stall from
// the total parameters, 12 bytes each, at the given bandwidth: 46.70B x 12 B / 10 GB/s = 56.0 s.
TEST(PlanE2E, SimulateSizesMoeCheckpointsByAllExperts) {
  TempDir dir;
  auto r = RunTenax(
      "simulate --gpus 64 --failure-rate 0.0004/node-hour --model mixtral-8x7b "
      "--checkpoint-bandwidth 10GB/s --restart-cost 10m --duration 30d --runs 100 --json",
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ParseJson(r);
  EXPECT_NE(j["checkpoint_cost_from"].get<std::string>().find("every expert"), std::string::npos);
  const double stall = 46702792704.0 * 12 / 10e9;  // 56.04 s
  EXPECT_NEAR(j["daly_interval_s"].get<double>(),
              plan::DalyInterval(stall, j["mtbf_s"].get<double>()), 1e-6);
  auto text = RunTenax(
      "simulate --gpus 64 --failure-rate 0.0004/node-hour --model mixtral-8x7b "
      "--checkpoint-bandwidth 10GB/s --restart-cost 10m --duration 30d --runs 10",
      dir.path());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("46.70G parameters (every expert; 12.88G active per token)"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("56.0 s stall"), std::string::npos) << text.output;
  auto both = RunTenax(
      "simulate --gpus 64 --failure-rate 0.0004/node-hour --model mixtral-8x7b "
      "--checkpoint-bandwidth 10G --checkpoint-cost 30s --restart-cost 10m --duration 30d",
      dir.path());
  EXPECT_EQ(both.exit_code, 2) << both.output;
}

}  // namespace
}  // namespace tenax::testing
