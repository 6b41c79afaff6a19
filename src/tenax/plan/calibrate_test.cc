#include "tenax/plan/calibrate.h"

#include <gtest/gtest.h>

#include "tenax/core/check.h"
#include "tenax/core/fs.h"
#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

using testing::TempDir;

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }

Measurement Make(const std::string& preset, int64_t gpus, int64_t seq, int64_t seqs,
                 const std::string& fix) {
  Measurement m;
  int64_t ignored = 0;
  m.name = preset + "@" + std::to_string(gpus);
  m.workload = *MakeWorkload(*LoadPlanModel(preset, &ignored), seq, seqs * seq);
  m.gpus = gpus;
  m.layout = *ParseLayoutConstraints(fix);
  return m;
}

TEST(Calibrate, RecoversTheEfficienciesThatMadeTheMeasurements) {
  // "Measure" with a machine whose GEMMs and attention are slower than the profile says, then
  // calibrate the profile back from those numbers.
  HardwareProfile truth = H100();
  truth.eff.matmul = 0.55;
  truth.eff.attention = 0.7;
  std::vector<Measurement> ms = {
      Make("llama3-8b", 8, 8192, 16, "tp=1,pp=1,cp=1,dp_shard=8,mbs=2,ac=op,fp8=no"),
      Make("llama3-8b", 8, 32768, 8, "tp=1,pp=1,cp=1,dp_shard=8,mbs=1,ac=full,fp8=no"),
      Make("llama3.2-1b", 1, 2048, 8, "mbs=4,ac=none,fp8=no")};
  for (auto& m : ms) m.tokens_per_s_per_gpu = *PredictTokensPerSecond(m, truth);
  auto r = Calibrate(ms, H100(), {"matmul", "attention"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->fitted.eff.matmul, 0.55, 0.002);
  EXPECT_NEAR(r->fitted.eff.attention, 0.7, 0.005);
  EXPECT_GT(r->rms_log_error_before, 0.1);
  EXPECT_LT(r->rms_log_error_after, 0.002);
  ASSERT_EQ(r->rows.size(), 3u);
  const std::string toml =
      CalibratedProfileToml(*r, "h100-sxm", "mine", "tenax plan --calibrate x");
  EXPECT_NE(toml.find("inherits = \"h100-sxm\""), std::string::npos) << toml;
  EXPECT_NE(toml.find("[efficiency]\nmatmul = 0.5"), std::string::npos) << toml;
  // The written profile loads and carries the fitted values.
  TempDir dir;
  auto p = LoadHardwareProfile(dir.Write("mine.toml", toml), testing::HardwareDirs());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_NEAR(p->eff.attention, 0.7, 0.01);
}

TEST(Calibrate, NeedsEnoughMeasurementsAndKnownNames) {
  std::vector<Measurement> one = {Make("llama3.2-1b", 1, 2048, 8, "mbs=4")};
  one[0].tokens_per_s_per_gpu = 1000;
  EXPECT_FALSE(Calibrate(one, H100(), {"matmul", "attention"}).ok());
  auto bad = Calibrate(one, H100(), {"tensor_cores"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensor_cores"), std::string::npos);
}

TEST(Calibrate, ReadsJsonLinesMeasurements) {
  TempDir dir;
  const std::string path = dir.Write(
      "m.jsonl",
      "# published\n"
      "{\"name\": \"a\", \"model\": \"llama3-8b\", \"gpus\": 8, \"seq_len\": 8192, "
      "\"global_batch_tokens\": 131072, \"layout\": \"dp_shard=8,mbs=2\", \"kernels\": \"fused\", "
      "\"tokens_per_s_per_gpu\": 5762}\n"
      "{\"name\": \"b\", \"model\": \"llama3-405b\", \"gpus\": 8192, \"seq_len\": 8192, "
      "\"global_batch_tokens\": 16777216, \"layout\": \"tp=8,pp=16\", \"tflops_per_gpu\": 430}\n");
  auto ms = LoadMeasurements(path);
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ((*ms)[0].workload.sw.kernels, Kernels::kFused);
  EXPECT_EQ(*(*ms)[0].layout.dp_shard, 8);
  EXPECT_DOUBLE_EQ((*ms)[1].tokens_per_s_per_gpu, 430e12 / (*ms)[1].workload.flops_per_token);

  const std::string bad = dir.Write("bad.jsonl", "{\"name\": \"a\", \"model\": \"llama3-8b\"}\n");
  auto r = LoadMeasurements(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad.jsonl:1: missing \"gpus\""), std::string::npos)
      << r.status().message();
}

// Writes a run folder as tenax's trainer leaves it: config.toml and metrics.jsonl with two warm-up
// steps, then a median of 21,004 tokens/s (one slow checkpointing step).
void WriteRun(const TempDir& dir, const std::string& parallelism) {
  dir.Write("config.toml",
            "[model]\npreset = \"llama3.2-1b\"\n[training]\nseq_len = 2048\n"
            "local_batch_size = 4\ngrad_accum_steps = 2\nmixed_precision = \"bf16\"\n"
            "device = \"cuda\"\n[parallelism]\n" +
                parallelism);
  std::string metrics;
  for (int step = 1; step <= 7; ++step) {
    const double speed = step <= 2 ? 5000 : step == 5 ? 9000 : 21000 + step;
    metrics += "{\"step\": " + std::to_string(step) +
               ", \"loss\": 2.0, \"tokens_per_s\": " + std::to_string(speed) + ", \"mfu\": 0.3}\n";
  }
  metrics += "{\"step\": 7, \"val_loss\": 2.1}\n";
  dir.Write("metrics.jsonl", metrics);
}

TEST(Calibrate, ReadsATenaxRunFolder) {
  TempDir dir;
  WriteRun(dir, "");
  auto ms = LoadMeasurements(dir.path());
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  ASSERT_EQ(ms->size(), 1u);
  const Measurement& m = ms->front();
  EXPECT_EQ(m.gpus, 1);
  EXPECT_EQ(*m.layout.micro_batch, 4);
  EXPECT_EQ(*m.layout.recompute, Recompute::kNone);
  EXPECT_EQ(m.workload.global_batch_tokens, 4 * 2048 * 2);
  EXPECT_EQ(m.workload.model.name, "llama3.2-1b");
  EXPECT_DOUBLE_EQ(m.tokens_per_s_per_gpu, 21004);  // median of 9000, 21003, 21004, 21006, 21007
}

TEST(Calibrate, ReadsAMultiProcessRunFolder) {
  TempDir dir;
  WriteRun(dir, "data_parallel_shard = 4\nactivation_checkpoint = \"full\"\n");
  auto ms = LoadMeasurements(dir.path());
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  const Measurement& m = ms->front();
  EXPECT_EQ(m.gpus, 4);
  EXPECT_EQ(*m.layout.dp_shard, 4);
  EXPECT_EQ(*m.layout.recompute, Recompute::kFull);
  EXPECT_EQ(m.workload.global_batch_tokens, 4 * 2048 * 2 * 4);
  EXPECT_DOUBLE_EQ(m.tokens_per_s_per_gpu, 21004.0 / 4);  // metrics.jsonl is the whole job's

  // data_parallel_shard = -1: the checkpoint manifest says how many processes wrote it.
  TempDir resolved;
  WriteRun(resolved, "");
  TENAX_CHECK(LocalFs().CreateDirs(resolved.Join("checkpoints/step_00000007")).ok());
  resolved.Write("checkpoints/step_00000007/manifest.json", "{\"world_size\": 8}");
  ms = LoadMeasurements(resolved.path());
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_EQ(ms->front().gpus, 8);
  EXPECT_EQ(*ms->front().layout.dp_shard, 8);
}

TEST(Calibrate, RefusesRunsItCannotModel) {
  TempDir dir;
  // tenax's "selective" (every second block) is the planner's `alternate` policy.
  WriteRun(dir, "activation_checkpoint = \"selective\"\n");
  auto r = LoadMeasurements(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r->front().layout.recompute, Recompute::kAlternate);
  dir.Write("config.toml",
            "[model]\npreset = \"llama3.2-1b\"\n[training]\nmixed_precision = \"fp32\"\n");
  r = LoadMeasurements(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bf16"), std::string::npos);
  // No MFU in the metrics: not a GPU the trainer knows (a CPU run with device = "auto").
  WriteRun(dir, "");
  dir.Write("metrics.jsonl",
            "{\"step\": 1, \"loss\": 2, \"tokens_per_s\": 9, \"mfu\": null}\n"
            "{\"step\": 2, \"loss\": 2, \"tokens_per_s\": 9, \"mfu\": null}\n"
            "{\"step\": 3, \"loss\": 2, \"tokens_per_s\": 9, \"mfu\": null}\n");
  r = LoadMeasurements(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no MFU"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tenax::plan
