#include "tenax/plan/hardware.h"

#include <gtest/gtest.h>

#include "tenax/plan/testing.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

using testing::HardwareDirs;
using testing::TempDir;

std::string Message(const Result<HardwareProfile>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(Hardware, ShippedProfilesLoad) {
  for (const char* name : {"h100-sxm", "h100-hbm2e-500w", "h200", "a100-80g", "b200"}) {
    auto p = LoadHardwareProfile(name, HardwareDirs());
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().message();
    EXPECT_EQ(p->name, name);
    EXPECT_GT(p->peak_bf16, 1e14) << name;
    EXPECT_GT(p->usable_bytes(), 40 * kGiB) << name;
    EXPECT_EQ(p->gpus_per_node, 8) << name;
  }
  auto h100 = *LoadHardwareProfile("h100-sxm", HardwareDirs());
  EXPECT_DOUBLE_EQ(h100.peak_bf16, 989.4e12);
  EXPECT_DOUBLE_EQ(h100.network.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(h100.nvlink.latency, 3.1e-6);
  EXPECT_EQ(h100.sm_count, 132);
  EXPECT_DOUBLE_EQ(h100.gemm_overhead, 6e-6);
  ASSERT_EQ(h100.attention.count("flash2"), 1u);
  // PyTorch 2.11's flash (FlashAttention-2) and cuDNN SDPA backends measured on an H100 at 16K.
  EXPECT_DOUBLE_EQ(h100.attention.at("flash2").flops.back(), 308.4e12);
  EXPECT_DOUBLE_EQ(h100.attention.at("flash3").flops.back(), 541.9e12);
  EXPECT_DOUBLE_EQ(h100.eff.memory_bound, 0.69);
  EXPECT_EQ(h100.calibration.gemm_bf16.size(), 35u);  // 2 MAMF + 33 OpenXLA shapes
  ASSERT_EQ(h100.calibration.layers.size(), 7u);  // 5 Llama (8B, 70B, recompute, compiled), 2 GPT
  const LayerMeasurement& first = h100.calibration.layers[0];
  EXPECT_FALSE(first.gpt);
  EXPECT_EQ(first.kernels, "eager");
  EXPECT_EQ(first.recompute, "none");
  EXPECT_EQ(first.tp, 1);
  EXPECT_EQ(first.dim, 4096);
  EXPECT_EQ(first.kv_heads, 8);
  EXPECT_DOUBLE_EQ(first.seconds, 25.48e-3);  // ms in the file
  const LayerMeasurement& gpt = h100.calibration.layers.back();
  EXPECT_TRUE(gpt.gpt);
  EXPECT_EQ(gpt.recompute, "full");
  EXPECT_EQ(gpt.kv_heads, gpt.heads);  // a GPT layer has no grouped keys
  // A100 has no FlashAttention-3 table and no fp8.
  auto a100 = *LoadHardwareProfile("a100-80g", HardwareDirs());
  EXPECT_EQ(a100.attention.count("flash3"), 0u);
  EXPECT_DOUBLE_EQ(a100.sustained_clock, 0.926);
}

TEST(Hardware, InheritanceOverridesOnlyWhatItNames) {
  auto h100 = *LoadHardwareProfile("h100-sxm", HardwareDirs());
  auto h200 = *LoadHardwareProfile("h200", HardwareDirs());
  EXPECT_DOUBLE_EQ(h200.hbm_bytes, 140 * kGiB);
  EXPECT_DOUBLE_EQ(h200.hbm_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(h200.peak_bf16, h100.peak_bf16);
  EXPECT_DOUBLE_EQ(h200.eff.matmul, h100.eff.matmul);  // one [efficiency] table, merged by key
  EXPECT_NE(h200.source.find("h100-sxm.toml"), std::string::npos) << h200.source;
}

TEST(Hardware, UserFileByPathInheritingAShippedProfile) {
  TempDir dir;
  const std::string path = dir.Write("mine.toml",
                                     "inherits = \"h100-sxm\"\nname = \"mine\"\n"
                                     "[efficiency]\nmatmul = 0.5\n");
  auto p = LoadHardwareProfile(path, HardwareDirs());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->name, "mine");
  EXPECT_DOUBLE_EQ(p->eff.matmul, 0.5);
  EXPECT_DOUBLE_EQ(p->eff.attention, 1.0);  // inherited (a multiplier)
}

TEST(Hardware, MissingFieldIsNamed) {
  auto r =
      ParseHardwareProfile("name = \"x\"\ngpus_per_node = 8\n[compute]\npeak_bf16_tflops = 1\n",
                           "x.toml", HardwareDirs());
  const std::string m = Message(r);
  EXPECT_NE(m.find("x.toml: [compute] peak_fp8_tflops is missing"), std::string::npos) << m;
  EXPECT_NE(m.find("[memory] hbm_gib is missing"), std::string::npos) << m;
  EXPECT_NE(m.find("[efficiency] matmul is missing"), std::string::npos) << m;
}

TEST(Hardware, BadValuesAndUnknownKeysAreNamed) {
  TempDir dir;
  auto r = ParseHardwareProfile(
      "inherits = \"h100-sxm\"\ngpus_per_node = \"eight\"\n[memory]\nhbm_gb = 80\n"
      "[efficiency]\nmatmul = 1.5\n[cooling]\nwater = true\n",
      dir.Join("bad.toml"), HardwareDirs());
  const std::string m = Message(r);
  EXPECT_NE(m.find("gpus_per_node must be a number"), std::string::npos) << m;
  EXPECT_NE(m.find("[efficiency] matmul must be a number in [0, 1]"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key memory.hbm_gb"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown section [cooling]"), std::string::npos) << m;
}

TEST(Hardware, CalibrationRowsAndAttentionTablesAreChecked) {
  auto r = ParseHardwareProfile(
      "inherits = \"h100-sxm\"\n[attention.flash2]\nseq_len = [1024, 512]\ntflops = [1, 2]\n"
      "[calibration]\ngemm_bf16 = [[1, 2, 3]]\n",
      "t.toml", HardwareDirs());
  const std::string m = Message(r);
  EXPECT_NE(m.find("[attention.flash2] seq_len must be an array of at least two positive, "
                   "increasing numbers"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("[calibration] gemm_bf16 must be an array of [5 positive numbers] rows"),
            std::string::npos)
      << m;
  auto unknown = ParseHardwareProfile("inherits = \"h100-sxm\"\n[attention.flash2]\nspeed = 1\n",
                                      "u.toml", HardwareDirs());
  EXPECT_NE(Message(unknown).find("unknown key attention.flash2.speed"), std::string::npos);
}

TEST(Hardware, LayerRowsAreChecked) {
  auto r = ParseHardwareProfile(
      "inherits = \"h100-sxm\"\n[calibration]\nlayers = [\n"
      "  { arch = \"llama\", kernels = \"eager\", recompute = \"none\", dim = 4096, heads = 30, "
      "kv_heads = 8, ffn = 14336, seq_len = 8192, batch = 1, ms = 25 },\n"
      "  { arch = \"mamba\", kernels = \"eager\", recompute = \"some\", dim = 4096, heads = 32, "
      "ffn = 1.5, seq_len = 8192, batch = 1, ms = -1, colour = 1 },\n"
      "  { arch = \"llama\", kernels = \"eager\", recompute = \"none\", dim = 4096, heads = 32, "
      "ffn = 14336, seq_len = 8192, batch = 1, ms = 25 },\n  7,\n"
      "  { arch = \"gpt\", kernels = \"fused\", recompute = \"selective\", tp = 3, dim = 4096, "
      "heads = 32, ffn = 16384, seq_len = 2048, batch = 4, ms = 5 },\n"
      "  { arch = \"gpt\", kernels = \"fused\", recompute = \"selective\", tp = 16, dim = 4096, "
      "heads = 32, ffn = 16384, seq_len = 2048, batch = 4, ms = 5 } ]\n",
      "l.toml", HardwareDirs());
  const std::string m = Message(r);
  for (const char* want :
       {"l.toml: [calibration] layers row 1: heads must divide dim and kv_heads divide heads "
        "(dim 4096, heads 30, kv_heads 8)",
        "row 2: unknown key colour", "row 2: arch must be \"llama\" or \"gpt\"",
        "row 2: recompute must be one of none, full, selective",
        "row 2: ffn must be a positive whole number", "row 2: ms must be a positive number",
        "row 3: kv_heads is missing", "row 4 must be a table",
        "row 5: tp (3) must divide heads (32) and ffn (16384)",
        "[calibration] layers: tp 16 does not fit in a node of 8 GPUs (gpus_per_node)"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
}

TEST(Hardware, ZeroSpeedIsRejected) {
  auto r = ParseHardwareProfile("inherits = \"h100-sxm\"\n[efficiency]\nmatmul = 0\n", "z.toml",
                                HardwareDirs());
  EXPECT_NE(Message(r).find("matmul must be > 0"), std::string::npos);
}

TEST(Hardware, UnknownNameListsKnownProfiles) {
  const std::string m = Message(LoadHardwareProfile("tpu-v9", HardwareDirs()));
  EXPECT_NE(m.find("'tpu-v9' not found"), std::string::npos) << m;
  EXPECT_NE(m.find("h100-sxm"), std::string::npos) << m;
}

TEST(Hardware, InheritanceCycleStops) {
  TempDir dir;
  dir.Write("a.toml", "inherits = \"b\"\n");
  dir.Write("b.toml", "inherits = \"a\"\n");
  const std::string m = Message(LoadHardwareProfile(dir.Join("a.toml"), {dir.path()}));
  EXPECT_NE(m.find("nests more than"), std::string::npos) << m;
}

TEST(Hardware, TomlSyntaxErrorHasALine) {
  const std::string m = Message(ParseHardwareProfile("name = \n", "s.toml", {}));
  EXPECT_NE(m.find("s.toml:1:"), std::string::npos) << m;
}

}  // namespace
}  // namespace tenax::plan
