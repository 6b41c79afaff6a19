// The thread and precision choice from the machine (device.h): every branch of ChooseThreads and
// what DescribeCompute says at start.
#include "tenax/train/device.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

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

TEST(ChooseThreads, Fp32TakesEveryCoreAndOpenBlasKeepsOne) {
  ThreadChoice t = ChooseThreads(Cpu(at::kFloat), 0, Facts(16, true, 16), 1);
  EXPECT_EQ(t.intra_op_threads, 16);
  EXPECT_EQ(t.blas_threads, 1);
  EXPECT_NE(t.reason.find("fp32 matmuls run in oneDNN"), std::string::npos) << t.reason;
  // The user's OPENBLAS_NUM_THREADS is left alone; a BLAS that is not OpenBLAS too.
  CpuFacts env = Facts(16, true, 3);
  env.openblas_threads_from_env = true;
  EXPECT_EQ(ChooseThreads(Cpu(at::kFloat), 0, env, 1).blas_threads, 0);
  EXPECT_EQ(ChooseThreads(Cpu(at::kFloat), 0, Facts(16, true, 0), 1).blas_threads, 0);
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
  EXPECT_EQ(ChooseThreads(Cpu(at::kFloat), 2, Facts(16, false, 16), 1).blas_threads, 1);
}

TEST(DescribeCompute, SaysThreadsBlasAndTheBf16Hint) {
  const CpuFacts bf16_cpu = Facts(2, true, 2);
  const DeviceInfo fp32 = Cpu(at::kFloat);
  EXPECT_EQ(DescribeCompute(fp32, ChooseThreads(fp32, 0, bf16_cpu, 1), bf16_cpu),
            "compute: cpu, fp32, 2 intra-op thread(s) (fp32 matmuls run in oneDNN on these "
            "threads: every core), OpenBLAS 1 thread(s) (attention's batched products); this CPU "
            "has bf16 dot products (AVX512-BF16) (training.mixed_precision = \"bf16\" may be "
            "faster; measure with bench/side_by_side.py)");
  const DeviceInfo bf16 = Cpu(at::kBFloat16);
  EXPECT_EQ(DescribeCompute(bf16, ChooseThreads(bf16, 0, bf16_cpu, 1), bf16_cpu),
            "compute: cpu, bf16, 2 intra-op thread(s) (bf16 matmuls run in oneDNN on these "
            "threads: every core), OpenBLAS 1 thread(s) (attention's batched products)");
  CpuFacts env = bf16_cpu;
  env.openblas_threads_from_env = true;
  EXPECT_EQ(DescribeCompute(bf16, ChooseThreads(bf16, 0, env, 1), env),
            "compute: cpu, bf16, 2 intra-op thread(s) (bf16 matmuls run in oneDNN on these "
            "threads: every core), OpenBLAS 2 thread(s) (OPENBLAS_NUM_THREADS)");
  const CpuFacts plain = Facts(4, false, 0);
  EXPECT_EQ(DescribeCompute(fp32, ChooseThreads(fp32, 0, plain, 1), plain).find("bf16"),
            std::string::npos);
  // bf16 on a CPU without bf16 units: said at start, with the setting to change.
  EXPECT_NE(DescribeCompute(bf16, ChooseThreads(bf16, 0, plain, 1), plain)
                .find("no bf16 units (no AVX512-BF16 or AMX): bf16 products are emulated and far "
                      "slower than fp32 (set training.mixed_precision = \"fp32\")"),
            std::string::npos);
}

// The facts come from this machine: at least one core, and OpenBLAS's thread count when a
// libtorch built on it is loaded (PyTorch's wheel computes with MKL inside: 0 there).
TEST(ReadCpuFacts, ReadsThisMachine) {
  const CpuFacts f = ReadCpuFacts();
  EXPECT_GE(f.usable_cores, 1);
  at::mm(at::ones({4, 4}), at::ones({4, 4}));  // libblas is loaded with libtorch
  EXPECT_GE(ReadCpuFacts().openblas_threads, 0);
}

AllocatorChoice ChooseWith(const std::map<std::string, std::string>& env) {
  return ChooseCpuAllocator([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ChooseCpuAllocator, KeepsFreedMemoryUnlessTheUserChoseOtherwise) {
  AllocatorChoice plain =
      ChooseWith({{"LD_PRELOAD", "libfoo.so"}, {"GLIBC_TUNABLES", "glibc.rtld.x=1"}});
  EXPECT_TRUE(plain.keep);
  EXPECT_EQ(plain.reason, "malloc keeps freed blocks below 32 MiB for the next step (no trim)");
  for (const auto& [name, value] :
       std::map<std::string, std::string>{{"MALLOC_MMAP_THRESHOLD_", "131072"},
                                          {"MALLOC_TRIM_THRESHOLD_", "0"},
                                          {"MALLOC_TOP_PAD_", "0"},
                                          {"MALLOC_MMAP_MAX_", "0"},
                                          {"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1"},
                                          {"LD_PRELOAD", "/usr/lib/libjemalloc.so.2"}}) {
    const AllocatorChoice c = ChooseWith({{name, value}});
    EXPECT_FALSE(c.keep) << name;
    EXPECT_NE(c.reason.find(name == "LD_PRELOAD" ? "jemalloc" : name.substr(0, 7)),
              std::string::npos)
        << c.reason;
  }
}

// After KeepFreedCpuMemory a 16 MiB block (an activation of the bench shapes) comes from the heap,
// not from its own mapping, and stays in the heap once freed, so the next one reuses its pages.
TEST(KeepFreedCpuMemory, ABlockBelowTheThresholdIsServedAndKeptByTheHeap) {
  ASSERT_TRUE(KeepFreedCpuMemory());
  constexpr size_t kBytes = size_t{16} << 20;
  const struct mallinfo2 before = mallinfo2();
  auto* p = static_cast<volatile char*>(std::malloc(kBytes));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
  const struct mallinfo2 during = mallinfo2();
  EXPECT_EQ(during.hblkhd, before.hblkhd) << "the block was mmapped on its own";
  std::free(const_cast<char*>(p));
  EXPECT_GE(mallinfo2().fordblks, kBytes) << "the freed block left the heap";
}

}  // namespace
}  // namespace tenax::train

namespace tenax::train {
namespace {

// MFU's denominators: dense tensor-core peaks by the names CUDA reports, bf16 and fp8.
TEST(PeakFlops, KnowsTheGpusTenaxTrainsOn) {
  const auto bf16 = [](const char* n) { return PeakFlops(n, PeakPrecision::kBf16); };
  const auto fp8 = [](const char* n) { return PeakFlops(n, PeakPrecision::kFp8); };
  EXPECT_EQ(bf16("NVIDIA H100 80GB HBM3"), 989.4e12);  // SXM5
  EXPECT_EQ(fp8("NVIDIA H100 80GB HBM3"), 1978.9e12);
  EXPECT_EQ(bf16("NVIDIA H100 PCIe"), 756.0e12);
  EXPECT_EQ(fp8("NVIDIA H100 PCIe"), 1513.0e12);
  EXPECT_EQ(bf16("NVIDIA H100 NVL"), 835.0e12);
  EXPECT_EQ(bf16("NVIDIA H200"), 989.4e12);
  EXPECT_EQ(fp8("NVIDIA H200"), 1978.9e12);
  EXPECT_EQ(bf16("NVIDIA GH200 480GB"), 989.4e12);
  EXPECT_EQ(bf16("NVIDIA B200"), 2250e12);
  EXPECT_EQ(fp8("NVIDIA B200"), 4500e12);
  EXPECT_EQ(bf16("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_FALSE(fp8("NVIDIA A100-SXM4-80GB").has_value());  // Ampere has no fp8 tensor cores
  EXPECT_FALSE(bf16("cpu").has_value());
  EXPECT_FALSE(bf16("Some Future GPU").has_value());
  EXPECT_EQ(PeakBf16Flops("NVIDIA H100 80GB HBM3"), bf16("NVIDIA H100 80GB HBM3"));
}

TEST(ReadGpuMemory, NoneOnTheCpu) { EXPECT_FALSE(ReadGpuMemory(Cpu(at::kFloat)).has_value()); }

// One GPU per rank: cuda:LOCAL_RANK, and a clear error when the node has fewer GPUs than ranks
// (here: none).
TEST(ResolveDevice, CpuRanksAndTheGpuErrorNameTheFix) {
  TrainingOptions o;
  o.device = "cpu";
  auto cpu = ResolveDevice(o, 3);
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->device.is_cpu());
  if (!at::hasCUDA()) {
    o.device = "cuda";
    auto gpu = ResolveDevice(o, 0);
    ASSERT_FALSE(gpu.ok());
    EXPECT_NE(gpu.status().message().find("training.device = \"cuda\""), std::string::npos);
  }
}

// training.mixed_precision = "fp8": bf16 compute with float8 block matmuls; on GPUs a model or
// layout whose GEMM dimensions cuBLASLt cannot take is refused before training, naming it.
TEST(ResolveDevice, Fp8IsBf16WithFloat8MatmulsAndGpuShapesAreChecked) {
  TrainingOptions o;
  o.device = "cpu";
  o.mixed_precision = "fp8";
  auto cpu = ResolveDevice(o, 0);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->compute_dtype, at::kBFloat16);
  EXPECT_TRUE(cpu->fp8_matmuls);
  ModelSpec spec;
  spec.dim = 4096;
  spec.n_heads = 32;
  spec.n_kv_heads = 8;
  spec.ffn_hidden_dim = 14336;
  EXPECT_TRUE(CheckFp8Shapes(*cpu, spec, 8192, 1, 1).ok());
  DeviceInfo gpu = *cpu;
  gpu.device = at::Device(at::kCUDA, 0);
  EXPECT_TRUE(CheckFp8Shapes(gpu, spec, 8192, 8, 4).ok());
  const Status ffn = CheckFp8Shapes(gpu, spec, 8192, 64, 1);  // 14336 / 64 = 224, kv 1024 / 64
  EXPECT_TRUE(ffn.ok()) << ffn.message();
  const Status seq = CheckFp8Shapes(gpu, spec, 8200, 1, 1);
  ASSERT_FALSE(seq.ok());
  EXPECT_NE(seq.message().find("training.seq_len / context_parallel is 8200"), std::string::npos)
      << seq.message();
  spec.dim = 4104;  // head_dim 128.25 -> 128, still a multiple; the model dim is not
  const Status dim = CheckFp8Shapes(gpu, spec, 8192, 1, 1);
  ASSERT_FALSE(dim.ok());
  EXPECT_NE(dim.message().find("model.dim is 4104"), std::string::npos) << dim.message();
  EXPECT_NE(dim.message().find("train in \"bf16\""), std::string::npos) << dim.message();
  DeviceInfo bf16 = gpu;
  bf16.fp8_matmuls = false;
  EXPECT_TRUE(CheckFp8Shapes(bf16, spec, 8200, 1, 1).ok());
}

}  // namespace
}  // namespace tenax::train
