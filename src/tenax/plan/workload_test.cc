#include "tenax/plan/workload.h"

#include <gtest/gtest.h>

#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

ModelSpec Preset(const std::string& name) {
  int64_t seq = 0;
  auto s = LoadPlanModel(name, &seq);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

TEST(Workload, BatchMustBeWholeSequences) {
  auto w = MakeWorkload(Preset("llama3-8b"), 8192, 16000000);
  ASSERT_FALSE(w.ok());
  // 16,000,000 / 8192 = 1953.1: the message offers the neighbours.
  EXPECT_NE(w.status().message().find("15998976 (1953 sequences)"), std::string::npos)
      << w.status().message();
  EXPECT_NE(w.status().message().find("16007168 (1954 sequences)"), std::string::npos);
  auto ok = MakeWorkload(Preset("llama3-8b"), 8192, 16777216);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->sequences(), 2048);
  EXPECT_DOUBLE_EQ(ok->flops_per_token, TrainingFlopsPerToken(ok->model, 8192).total());
}

TEST(Workload, ModelFromAConfigFile) {
  testing::TempDir dir;
  const std::string path = dir.Write("c.toml",
                                     "[model]\npreset = \"llama3-8b\"\nn_layers = 8\n"
                                     "[training]\nseq_len = 4096\n");
  int64_t seq = 0;
  auto s = LoadPlanModel(path, &seq);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->n_layers, 8);
  EXPECT_EQ(seq, 4096);
  auto bad = LoadPlanModel("llama9-1t", &seq);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("llama9-1t"), std::string::npos);
}

TEST(Workload, TensorParallelWidths) {
  const ModelSpec m = Preset("llama3-405b");  // 128 heads, 8 kv heads, head dim 128
  LayerWidths w = WidthsFor(m, 8);
  EXPECT_EQ(w.q, 16384 / 8);
  EXPECT_EQ(w.kv, 128);  // one kv head per rank
  EXPECT_EQ(w.f, 53248 / 8);
  // tp = 16 > n_kv_heads: each rank still holds one (replicated) kv head.
  w = WidthsFor(m, 16);
  EXPECT_EQ(w.kv, 128);
  EXPECT_DOUBLE_EQ(w.params, 16384.0 * (2 * 1024 + 2 * 128 + 3 * 3328) + 2 * 16384.0);
  EXPECT_EQ(TensorParallelProblem(m, 8), "");
  EXPECT_EQ(TensorParallelProblem(m, 16), "");
  EXPECT_NE(TensorParallelProblem(m, 3), "");
  EXPECT_NE(TensorParallelProblem(Preset("llama3.2-3b"), 16), "");  // 24 heads
}

}  // namespace
}  // namespace tenax::plan
