// StepProfiler on a CPU rank: the operators run between Start and Stop are counted, the trace is
// written, and the kinds of GPU kernels are read from their names.
#include "tenax/train/profiler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tenax/core/fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::train {
namespace {

TEST(ProfilerTest, KernelKindsFromTheirNames) {
  EXPECT_EQ(KernelKind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"), "matmul");
  EXPECT_EQ(KernelKind("nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT"), "matmul");
  EXPECT_EQ(KernelKind("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>"),
            "matmul");
  EXPECT_EQ(KernelKind("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"),
            "attention");
  EXPECT_EQ(KernelKind("cudnn::fusion::compute_attn_fwd"), "attention");
  EXPECT_EQ(KernelKind("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "communication");
  EXPECT_EQ(KernelKind("Memcpy DtoH (Device -> Pinned)"), "memory");
  EXPECT_EQ(KernelKind("void at::native::vectorized_elementwise_kernel<4, ...>"), "other");
}

TEST(ProfilerTest, CountsTheOperatorsOfTheWindowAndWritesTheTrace) {
  testing::TempDir dir;
  const at::Tensor a = at::randn({64, 64}), b = at::randn({64, 64});
  (void)at::mm(a, b);  // outside the window
  StepProfiler p(/*cuda=*/false);
  ASSERT_TRUE(p.Start().ok());
  EXPECT_TRUE(p.running());
  for (int i = 0; i < 3; ++i) (void)at::mm(a, b);
  const std::string trace = dir.path() + "/trace.json";
  Result<ProfileSummary> s = p.Stop(trace, 3);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(p.running());
  EXPECT_TRUE(LocalFs().Exists(trace));
  EXPECT_FALSE(s->gpu);
  EXPECT_EQ(s->steps, 3);
  EXPECT_GT(s->wall_ms, 0);
  bool found = false;
  for (const ProfileRow& r : s->by_name) {
    if (r.name == "aten::mm") {
      found = true;
      EXPECT_EQ(r.calls, 3);
      EXPECT_EQ(r.kind, "cpu");
    }
  }
  EXPECT_TRUE(found);
  const std::string table = FormatProfile(*s);
  EXPECT_NE(table.find("3 step(s)"), std::string::npos) << table;
  EXPECT_NE(table.find("aten::mm"), std::string::npos) << table;
}

TEST(ProfilerTest, StopWithoutStartIsAnError) {
  StepProfiler p(false);
  EXPECT_FALSE(p.Stop("/nonexistent/trace.json", 1).ok());
}

}  // namespace
}  // namespace tenax::train
