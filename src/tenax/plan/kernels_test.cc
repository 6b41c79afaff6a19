#include "tenax/plan/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }

TEST(Kernels, TileEfficiencyByHand) {
  // 4096 x 4096 on 132 SMs: 128 x 128 tiles give 1024 tiles in 8 waves of 132 slots.
  EXPECT_DOUBLE_EQ(TileEfficiency(4096, 4096, 1, 132), 1024.0 / 1056);
  // One 64 x 64 tile keeps one SM of 132 busy.
  EXPECT_DOUBLE_EQ(TileEfficiency(64, 64, 1, 132), 1.0 / 132);
  // A partial tile wastes its empty part: 96 rows in a 128-row tile at best 96 / 128 ... or two
  // 64-row tiles, 96 / 128 as well; the batch fills the waves.
  EXPECT_DOUBLE_EQ(TileEfficiency(96, 8192, 132, 132), 0.75);
  EXPECT_DOUBLE_EQ(TileEfficiency(1024, 1024, 1, 64), 1.0);
}

TEST(Kernels, GemmIsComputeOrMemoryBoundPlusAFixedCost) {
  const HardwareProfile hw = H100();
  // Compute bound: 2 m n k at the ceiling times the sustained clock and the tile efficiency.
  const double flops = 2.0 * 4096 * 4096 * 4096;
  const double ceiling = hw.peak_bf16 * hw.eff.matmul;
  EXPECT_NEAR(GemmTime(hw, 4096, 4096, 4096, Precision::kBf16),
              flops / (ceiling * hw.sustained_clock * 1024.0 / 1056) + hw.gemm_overhead, 1e-15);
  EXPECT_NEAR(GemmTime(hw, 4096, 4096, 4096, Precision::kBf16, 1, /*sustained=*/false),
              flops / (ceiling * 1024.0 / 1056) + hw.gemm_overhead, 1e-15);
  // Memory bound: k = 16 streams A, B (bf16) and writes C.
  const double bytes = 2.0 * (8192 * 16 + 16 * 8192) + 2.0 * 8192 * 8192;
  EXPECT_NEAR(GemmTime(hw, 8192, 8192, 16, Precision::kBf16),
              StreamTime(hw, bytes) + hw.gemm_overhead, 1e-15);
  EXPECT_DOUBLE_EQ(StreamTime(hw, 1e9), 1e9 / (3.35e12 * 0.69));
  // fp8 uses its own ceiling and 1-byte inputs.
  EXPECT_LT(GemmTime(hw, 8192, 8192, 8192, Precision::kFp8),
            GemmTime(hw, 8192, 8192, 8192, Precision::kBf16));
}

TEST(Kernels, AttentionTablesInterpolateInLogLength) {
  const HardwareProfile hw = H100();
  const double derate = hw.eff.attention * hw.sustained_clock;
  EXPECT_NEAR(FlashAttentionFlops(hw, AttentionKind::kFlash2, 8192), 274.9e12 * derate, 1);
  // Halfway between 1K (148.2) and 2K (200.6) in log length: the geometric mean.
  EXPECT_NEAR(FlashAttentionFlops(hw, AttentionKind::kFlash2, std::sqrt(1024.0 * 2048)),
              std::sqrt(148.2e12 * 200.6e12) * derate, 1e3);
  // Held above the last point, extrapolated below the first.
  EXPECT_NEAR(FlashAttentionFlops(hw, AttentionKind::kFlash2, 131072), 308.4e12 * derate, 1);
  EXPECT_LT(FlashAttentionFlops(hw, AttentionKind::kFlash2, 256), 94.6e12 * derate);
  EXPECT_GT(FlashAttentionFlops(hw, AttentionKind::kFlash3, 8192),
            FlashAttentionFlops(hw, AttentionKind::kFlash2, 8192));
}

TEST(Kernels, CollectivesPickTheLinkAndTheNics) {
  const HardwareProfile hw = H100();
  const double s = 1e9;
  // 8 ranks inside a node: 7 steps of NVLink latency + 7/8 of the bytes at the ring bus bandwidth.
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllGather, 1, 8, s),
              7 * 3.1e-6 + 7.0 / 8 * s / (450e9 * 0.80), 1e-15);
  // All-reduce: twice the steps and bytes, at NVLink SHARP's bus bandwidth.
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1, 8, s),
              14 * 3.1e-6 + 2 * 7.0 / 8 * s / (450e9 * 1.067), 1e-15);
  // One rank per node (stride 8): one NIC each, 16 ranks.
  EXPECT_NEAR(CollectiveTime(hw, Collective::kReduceScatter, 8, 16, s),
              15 * 10e-6 + 15.0 / 16 * s / (50e9 * 0.85), 1e-15);
  // 32 consecutive ranks span 4 nodes with 8 ranks each: 8 NICs in parallel, capped by NVLink.
  const GroupPlacement g = PlaceGroup(hw, 1, 32);
  EXPECT_FALSE(g.in_node);
  EXPECT_EQ(g.per_node, 8);
  EXPECT_DOUBLE_EQ(BusBandwidth(hw, Collective::kAllGather, g), std::min(360e9, 8 * 42.5e9));
  EXPECT_EQ(CollectiveTime(hw, Collective::kAllGather, 1, 1, s), 0);
  // Stride 2 x 8 ranks spans 16 GPUs: two nodes, 4 ranks (NICs) in each.
  EXPECT_EQ(PlaceGroup(hw, 2, 8).per_node, 4);
}

}  // namespace
}  // namespace tenax::plan
