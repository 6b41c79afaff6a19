// The thread and precision choice from the machine (device.h): every branch of ChooseThreads and
// what DescribeCompute says at start.
#include "tenax/train/device.h"

#include <gtest/gtest.h>

namespace tenax::train {
namespace {

DeviceInfo Cpu(at::ScalarType dtype) {
  DeviceInfo d;
  d.device = at::kCPU;
  d.compute_dtype = dtype;
  d.name = "cpu";
  return d;
}

CpuFacts Facts(int cores, bool bf16, int openblas) {
  CpuFacts f;
  f.usable_cores = cores;
  f.avx512_bf16 = bf16;
  f.openblas_threads = openblas;
  return f;
}

TEST(ChooseThreads, Fp32KeepsOneLibtorchThreadForOpenBlas) {
  ThreadChoice t = ChooseThreads(Cpu(at::kFloat), 0, Facts(16, true, 16), 1);
  EXPECT_EQ(t.intra_op_threads, 1);
  EXPECT_NE(t.reason.find("OpenBLAS"), std::string::npos);
}

TEST(ChooseThreads, Bf16TakesEveryCoreOfThisRank) {
  EXPECT_EQ(ChooseThreads(Cpu(at::kBFloat16), 0, Facts(16, true, 16), 1).intra_op_threads, 16);
  ThreadChoice shared = ChooseThreads(Cpu(at::kBFloat16), 0, Facts(16, true, 16), 4);
  EXPECT_EQ(shared.intra_op_threads, 4);
  EXPECT_NE(shared.reason.find("16 cores / 4 ranks"), std::string::npos) << shared.reason;
  // More ranks than cores still leaves each one thread.
  EXPECT_EQ(ChooseThreads(Cpu(at::kBFloat16), 0, Facts(2, true, 2), 4).intra_op_threads, 1);
}

TEST(ChooseThreads, TrainingThreadsWins) {
  ThreadChoice t = ChooseThreads(Cpu(at::kBFloat16), 3, Facts(16, true, 16), 1);
  EXPECT_EQ(t.intra_op_threads, 3);
  EXPECT_EQ(t.reason, "training.threads");
  EXPECT_EQ(ChooseThreads(Cpu(at::kFloat), 2, Facts(16, false, 16), 1).intra_op_threads, 2);
}

TEST(DescribeCompute, SaysThreadsBlasAndTheBf16Hint) {
  const CpuFacts bf16_cpu = Facts(2, true, 2);
  const DeviceInfo fp32 = Cpu(at::kFloat);
  EXPECT_EQ(DescribeCompute(fp32, ChooseThreads(fp32, 0, bf16_cpu, 1), bf16_cpu),
            "compute: cpu, fp32, 1 intra-op thread(s) (fp32 matmuls run in OpenBLAS on its own "
            "threads; more here would oversubscribe), OpenBLAS 2 thread(s); this CPU has bf16 dot "
            "products (AVX512-BF16) (training.mixed_precision = \"bf16\" may be faster; "
            "measure with bench/side_by_side.py)");
  const DeviceInfo bf16 = Cpu(at::kBFloat16);
  EXPECT_EQ(DescribeCompute(bf16, ChooseThreads(bf16, 0, bf16_cpu, 1), bf16_cpu),
            "compute: cpu, bf16, 2 intra-op thread(s) (bf16 matmuls run in oneDNN on these "
            "threads: every core), OpenBLAS 2 thread(s)");
  const CpuFacts plain = Facts(4, false, 0);
  EXPECT_EQ(DescribeCompute(fp32, ChooseThreads(fp32, 0, plain, 1), plain).find("bf16"),
            std::string::npos);
}

// The facts come from this machine: at least one core, and (the project installs OpenBLAS as
// libblas.so.3, scripts/setup) OpenBLAS answering with its thread count.
TEST(ReadCpuFacts, ReadsThisMachine) {
  const CpuFacts f = ReadCpuFacts();
  EXPECT_GE(f.usable_cores, 1);
  at::mm(at::ones({4, 4}), at::ones({4, 4}));  // libblas is loaded with libtorch
  EXPECT_GE(ReadCpuFacts().openblas_threads, 0);
}

}  // namespace
}  // namespace tenax::train
