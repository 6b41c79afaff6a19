// GPU tests (ctest label `gpu`; scripts/gpu-check runs them on a lent GPU machine). On a machine
// without a CUDA device every test skips with one line saying why, and ctest counts it as
// skipped, never as passed. What they assert, each against an independent answer:
//  - one bf16 training step on the GPU (loss and every gradient) against the same model in fp64
//    on the CPU, within twice the error that bf16 itself makes on the CPU (and an absolute cap);
//    and the GPU's AdamW update against the CPU's on the same gradients;
//  - every Communicator collective on CUDA tensors in a one-rank NCCL group (the multi-rank
//    logic is shared with Gloo and tested on CPU ranks: one GPU cannot hold two NCCL ranks), with
//    CPU tensors staged through the device, and completion learned from the work, not at enqueue;
//  - FSDP over a one-rank NCCL group (flat units, gathers into the unit buffer, fp32
//    reduce-scatter) against the same model without FSDP: within a few ulps in fp32 parameters
//    (atomics in CUDA's backward), within bf16's rounding with bf16 parameters;
//  - ring attention's blocks (context parallelism) on CUDA tensors, two processes on the GPU in a
//    Gloo ring, against the plain attention over the whole sequence in fp64;
//  - a checkpoint written on the GPU by `tenax train` resumes on the GPU with the state it saved
//    bit for bit, and loads on the CPU and back unchanged;
//  - the float8 layer (training.mixed_precision = "fp8") through cuBLASLt's float8 GEMMs against
//    the same layer on the CPU (oneDNN's, checked there against fp64 GEMMs of the dequantized
//    operands in model/fp8_test.cc): the scaling and layouts are the same code, so only the
//    GEMMs' accumulation (fast accumulation in forward) separates them;
//  - the silent-data-corruption check's statistics on the GPU: the same bf16 step computed twice
//    (what a replay does) differs by the kernels' noise, which must stay far below the
//    tolerance's scale, and a corruption of a tenth of the gradients' norm is far above it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#if defined(TENAX_WITH_CUDA)
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tenax/core/net.h"
#include "tenax/core/temp_dir.h"
#include "tenax/model/attention.h"
#include "tenax/model/fp8.h"
#include "tenax/model/fused_cross_entropy.h"
#include "tenax/model/llama.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/context_parallel.h"
#include "tenax/parallel/fsdp.h"
#include "tenax/parallel/sharded_llama.h"
#include "tenax/parallel/testing.h"
#include "tenax/protocol/flight_recorder.h"
#include "tenax/train/adamw.h"
#include "tenax/train/sdc_check.h"
#include "test_util.h"

namespace tenax {
namespace {

using testing::CommandResult;
using testing::RunCommand;
using testing::TempDir;
using testing::TenaxBinary;

// Empty when a GPU test can run here, else why not (one line).
std::string NoGpuReason() {
#if !defined(TENAX_WITH_CUDA)
  return "this tenax was built against a libtorch without CUDA";
#else
  if (!at::hasCUDA() || c10::cuda::device_count() == 0) {
    return "no CUDA device on this machine (the GPU tests run on a lent GPU machine: "
           "scripts/gpu-check)";
  }
  return "";
#endif
}

#define TENAX_REQUIRE_GPU()                               \
  do {                                                    \
    const std::string why = NoGpuReason();                \
    if (!why.empty()) GTEST_SKIP() << "skipped: " << why; \
  } while (0)

const at::Device kGpu(at::kCUDA, 0);

// A model big enough for bf16 rounding to show, small enough for fp64 on the CPU: GQA (8 query,
// 4 kv heads), two layers, untied embeddings.
ModelSpec StepSpec() {
  ModelSpec s;
  s.name = "gpu-test";
  s.dim = 128;
  s.n_layers = 2;
  s.n_heads = 8;
  s.n_kv_heads = 4;
  s.ffn_hidden_dim = 256;
  s.vocab_size = 256;
  s.max_seq_len = 64;
  s.init_std = 0.05;
  return s;
}

std::pair<at::Tensor, at::Tensor> Batch(int64_t rows, int64_t seq, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor s = at::randint(vocab, {rows, seq + 1}, gen, at::kLong);
  return {s.narrow(1, 0, seq).contiguous(), s.narrow(1, 1, seq).contiguous()};
}

// Loss and gradients (fp64 on the CPU) of one forward and backward of `m` in `dtype`.
struct StepResult {
  double loss = 0;
  std::vector<at::Tensor> grads;
};
StepResult RunStep(model::Llama& m, const at::Tensor& x, const at::Tensor& y,
                   at::ScalarType dtype) {
  at::Tensor loss = m.Loss(x.to(m.device()), y.to(m.device()), dtype);
  loss.backward();
  StepResult r;
  r.loss = loss.item<double>();
  for (auto& p : m.params()) r.grads.push_back(p.tensor.grad().to(at::kCPU, at::kDouble));
  return r;
}

double RelativeError(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-30);
}

// bf16 on the GPU against fp64 on the CPU, calibrated by bf16 on the CPU: the GPU's kernels
// (cuBLAS, SDPA's flash/efficient attention, tenax's fused ops) may round differently from the
// CPU's, but not worse than twice bf16's own error on the CPU, plus a floor of 1e-2 relative
// (bf16 keeps 8 bits: ~4e-3 per rounding, a few roundings deep) and never beyond 5e-2.
TEST(Gpu, Bf16StepMatchesTheFp64CpuReference) {
  TENAX_REQUIRE_GPU();
  const ModelSpec spec = StepSpec();
  auto [x, y] = Batch(4, 64, spec.vocab_size, 3);
  model::Llama ref(spec, 11, at::Device(at::kCPU));
  ref.CastParams(at::kDouble);
  const StepResult want = RunStep(ref, x, y, at::kDouble);
  model::Llama cpu(spec, 11, at::Device(at::kCPU));
  const StepResult cpu16 = RunStep(cpu, x, y, at::kBFloat16);
  model::Llama gpu(spec, 11, kGpu);
  const StepResult got = RunStep(gpu, x, y, at::kBFloat16);

  const double cpu_loss_err = std::abs(cpu16.loss - want.loss);
  EXPECT_LT(std::abs(got.loss - want.loss), std::max(2 * cpu_loss_err, 2e-3))
      << "gpu " << got.loss << ", fp64 " << want.loss << ", cpu bf16 " << cpu16.loss;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    const double cpu_err = RelativeError(cpu16.grads[i], want.grads[i]);
    const double gpu_err = RelativeError(got.grads[i], want.grads[i]);
    EXPECT_LT(gpu_err, std::min(std::max(2 * cpu_err, 1e-2), 5e-2))
        << ref.params()[i].name << ": cpu bf16 error " << cpu_err;
  }

  // The optimizer step on the GPU (AdamW's flat update) against the CPU's (its one-pass loop)
  // on the same fp32 gradients: fp32 both, so equal to a few ulps.
  OptimizerOptions oo;
  oo.lr = 1e-3;
  model::Llama cpu32(spec, 11, at::Device(at::kCPU));
  for (size_t i = 0; i < gpu.params().size(); ++i) {
    cpu32.params()[i].tensor.mutable_grad() = gpu.params()[i].tensor.grad().to(at::kCPU);
  }
  train::AdamW on_gpu(oo, gpu.params()), on_cpu(oo, cpu32.params());
  for (int k = 0; k < 2; ++k) {
    on_gpu.Step(oo.lr);
    on_cpu.Step(oo.lr);
  }
  for (size_t i = 0; i < gpu.params().size(); ++i) {
    const at::Tensor a = gpu.params()[i].tensor.detach().to(at::kCPU);
    const at::Tensor b = cpu32.params()[i].tensor.detach();
    EXPECT_LT((a - b).abs().max().item<double>(),
              1e-6 * std::max(1.0, b.abs().max().item<double>()))
        << gpu.params()[i].name;
  }
}

// The loss head on the GPU in bf16, in chunks of an odd size (37 rows: the last one short), with
// cuBLAS's fp32-output GEMMs (the default) and with the plain composition, against fp64 on the
// CPU from the same bf16-rounded inputs. The fp32 logits leave the loss almost exact (fp32
// sums); the composition's bf16 logits round it (~4e-3 per logit). Gradients pass through a
// bf16 softmax gradient either way.
TEST(Gpu, ChunkedLossHeadMatchesTheFp64Composition) {
  TENAX_REQUIRE_GPU();
  const int64_t n = 301, c = 96, v = 1031;
  at::Generator gen = at::detail::createCPUGenerator(17);
  const at::Tensor x = at::randn({n, c}, gen, at::kDouble).to(at::kBFloat16).to(at::kDouble);
  const at::Tensor w =
      (at::randn({v, c}, gen, at::kDouble) * 0.2).to(at::kBFloat16).to(at::kDouble);
  const at::Tensor t = at::randint(v, {n}, gen, at::kLong);
  at::Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
  at::Tensor want = -at::log_softmax(at::mm(xr, wr.t()), 1).gather(1, t.unsqueeze(1)).mean();
  want.backward();
  for (const bool wide : {true, false}) {
    model::EnableGpuWideGemms(wide);
    at::Tensor xg = x.to(kGpu, at::kBFloat16).requires_grad_();
    at::Tensor wg = w.to(kGpu, at::kFloat).requires_grad_();
    at::Tensor loss = model::LinearCrossEntropy(xg, wg, t.to(kGpu), /*chunk_rows=*/37);
    loss.backward();
    const double loss_err =
        std::abs(loss.item<double>() - want.item<double>()) / std::abs(want.item<double>());
    EXPECT_LT(loss_err, wide ? 1e-5 : 2e-3) << (wide ? "fp32-output GEMMs" : "composition");
    EXPECT_LT(RelativeError(xg.grad().to(at::kCPU, at::kDouble), xr.grad()), 1e-2) << wide;
    EXPECT_LT(RelativeError(wg.grad().to(at::kCPU, at::kDouble), wr.grad()), 1e-2) << wide;
    EXPECT_EQ(wg.grad().scalar_type(), at::kFloat);
  }
  model::EnableGpuWideGemms(true);
}

TEST(Gpu, Fp8LinearMatchesTheCpuFloat8Layer) {
  TENAX_REQUIRE_GPU();
  at::Generator gen = at::detail::createCPUGenerator(23);
  const at::Tensor x = at::randn({4, 64, 256}, gen, at::kFloat).to(at::kBFloat16);  // (B, T, K)
  const at::Tensor w = at::randn({384, 256}, gen, at::kFloat) * 0.05;               // (N, K)
  const at::Tensor dy = at::randn({4, 64, 384}, gen, at::kFloat).to(at::kBFloat16);
  auto run = [&](const at::Device& d) {
    at::Tensor xd = x.to(d).requires_grad_(), wd = w.to(d).requires_grad_();
    at::Tensor y = model::Fp8Linear(xd, wd);
    y.backward(dy.to(d));
    return std::vector<at::Tensor>{y.to(at::kCPU, at::kDouble), xd.grad().to(at::kCPU, at::kDouble),
                                   wd.grad().to(at::kCPU, at::kDouble)};
  };
  const std::vector<at::Tensor> cpu = run(at::kCPU), gpu = run(kGpu);
  const char* names[] = {"output", "input gradient", "weight gradient"};
  for (size_t i = 0; i < 3; ++i) {
    const double err = RelativeError(gpu[i], cpu[i]);
    std::printf("float8 layer, GPU against CPU: %s %.3g\n", names[i], err);
    // bf16 outputs round at 2^-9; the float8 operands are identical on both sides.
    EXPECT_LT(err, 1e-2) << names[i];
  }
}

// AdamW's fused kernel (the GPU's default, kFused) against its flat update (kFlat) on the same
// parameters and gradients over three steps: matrices decayed, norm gains not. The same formula;
// the fused kernel interpolates the first moment (lerp), so a few fp32 ulps apart at most.
TEST(Gpu, FusedAdamWMatchesTheFlatUpdate) {
  TENAX_REQUIRE_GPU();
  OptimizerOptions oo;
  oo.lr = 1e-3;
  oo.weight_decay = 0.1;
  model::Llama a(StepSpec(), 21, kGpu), b(StepSpec(), 21, kGpu);
  train::AdamW fused(oo, a.params()), flat(oo, b.params());
  fused.set_update_mode(train::AdamW::UpdateMode::kFused);
  flat.set_update_mode(train::AdamW::UpdateMode::kFlat);
  at::Generator gen = at::detail::createCPUGenerator(23);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.params().size(); ++i) {
      const at::Tensor& p = a.params()[i].tensor;
      const at::Tensor g = at::randn(p.sizes(), gen, at::kFloat).to(kGpu);
      a.params()[i].tensor.mutable_grad() = g.clone();
      b.params()[i].tensor.mutable_grad() = g.clone();
    }
    fused.Step(oo.lr);
    flat.Step(oo.lr);
  }
  for (size_t i = 0; i < a.params().size(); ++i) {
    const at::Tensor x = a.params()[i].tensor.detach().to(at::kCPU, at::kDouble);
    const at::Tensor y = b.params()[i].tensor.detach().to(at::kCPU, at::kDouble);
    EXPECT_LT((x - y).abs().max().item<double>(),
              1e-6 * std::max(1.0, y.abs().max().item<double>()))
        << a.params()[i].name;
  }
  const auto sa = fused.StateTensors(), sb = flat.StateTensors();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_LT(RelativeError(sa[i].tensor.to(at::kCPU, at::kDouble),
                            sb[i].tensor.to(at::kCPU, at::kDouble)),
              1e-6)
        << sa[i].name;
  }
}

// A one-rank NCCL world (and sub-group) on GPU 0.
std::unique_ptr<parallel::ProcessGroups> OneRankNccl() {
  parallel::DistEnv env;
  env.master_port = FreeTcpPort();
  parallel::GroupOptions go;
  go.backend = parallel::Backend::kNccl;
  go.device = kGpu;
  go.timeout = std::chrono::seconds(60);
  go.c10d_for_one_rank = true;
  auto groups = parallel::ProcessGroups::Connect(env, go);
  EXPECT_TRUE(groups.ok()) << groups.status().ToString();
  return groups.ok() ? std::move(*groups) : nullptr;
}

TEST(Gpu, EveryCollectiveRunsOnOneRankOfNccl) {
  TENAX_REQUIRE_GPU();
  ASSERT_TRUE(parallel::NcclBuilt()) << "a CUDA build without NCCL";
  auto groups = OneRankNccl();
  ASSERT_NE(groups, nullptr);
  parallel::Communicator& world = groups->world();
  EXPECT_EQ(world.device(), kGpu);
  EXPECT_EQ(world.size(), 1);
  const auto f32 = at::TensorOptions().device(kGpu).dtype(at::kFloat);

  at::Tensor t = at::arange(6, f32);
  world.AllReduceSum(t);
  EXPECT_TRUE(at::equal(t.cpu(), at::arange(6, at::kFloat)));
  EXPECT_TRUE(t.is_cuda());
  at::Tensor g = world.AllGather(at::arange(4, f32).view({2, 2}));
  EXPECT_TRUE(g.is_cuda());
  EXPECT_TRUE(at::equal(g.cpu(), at::arange(4, at::kFloat)));
  EXPECT_TRUE(
      at::equal(world.ReduceScatterSum(at::arange(8, f32)).cpu(), at::arange(8, at::kFloat)));
  at::Tensor b = at::full({3}, 2.5, f32);
  world.Broadcast(b, 0);
  EXPECT_TRUE(at::equal(b.cpu(), at::full({3}, 2.5, at::kFloat)));
  world.Barrier();
  at::Tensor rows = at::arange(12, f32).view({4, 3});
  EXPECT_TRUE(at::equal(world.AllToAll(rows, {4}, {4}).cpu(), rows.cpu()));
  // bf16 gathers (FSDP's parameters) and fp32 reductions (its gradients).
  at::Tensor out = at::empty({4}, f32.dtype(at::kBFloat16));
  at::Tensor got = world.AllGatherAsync(at::arange(4, f32).to(at::kBFloat16), out).Wait();
  EXPECT_TRUE(got.is_same(out));
  EXPECT_TRUE(at::equal(out.cpu().to(at::kFloat), at::arange(4, at::kFloat)));
  EXPECT_TRUE(at::equal(world.ReduceScatterSumAsync(at::ones({4}, f32)).Wait().cpu(),
                        at::ones({4}, at::kFloat)));
  at::Tensor a = at::full({2}, 3.0, f32);
  EXPECT_TRUE(at::equal(world.AllReduceSumAsync(a).Wait().cpu(), at::full({2}, 3.0, at::kFloat)));

  // The control plane: CPU tensors given to an NCCL group are staged through the GPU and come
  // back on the CPU (the loss in fp64, a count in int64).
  at::Tensor loss = at::full({1}, 2.25, at::kDouble);
  world.AllReduceSum(loss);
  EXPECT_TRUE(loss.is_cpu());
  EXPECT_EQ(loss.item<double>(), 2.25);
  at::Tensor count = at::full({1}, int64_t{7}, at::kLong);
  EXPECT_EQ(world.AllGather(count).item<int64_t>(), 7);
  EXPECT_GT(world.stats().calls, 8);

  // A sub-group over the same single rank (c10d_for_one_rank) is a real NCCL group too.
  auto sub = groups->NewGroup("tp", {0});
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ((*sub)->device(), kGpu);
  at::Tensor s = at::ones({5}, f32);
  (*sub)->AllReduceSum(s);
  EXPECT_TRUE(at::equal(s.cpu(), at::ones({5}, at::kFloat)));
}

// NCCL's Wait returns once the streams are ordered, before the GPU has run the collective: the
// flight record must keep it pending until the work says it is done. The collective is queued
// behind a GPU sleep of ~0.5 s, so it cannot have finished when Wait returns.
TEST(Gpu, FlightRecorderSeesAnNcclCollectiveCompleteOnTheGpuNotAtEnqueue) {
  TENAX_REQUIRE_GPU();
#if defined(TENAX_WITH_CUDA)
  auto groups = OneRankNccl();
  ASSERT_NE(groups, nullptr);
  protocol::FlightRecorder recorder(0);
  groups->world().SetFlightRecorder(&recorder, "world");
  at::cuda::sleep(int64_t{1} << 30);  // ~0.5 s at 2 GHz, on the current stream
  at::Tensor t = at::ones({1 << 20}, at::TensorOptions().device(kGpu));
  groups->world().AllReduceSum(t);  // NCCL's stream waits for the sleep, then runs it
  ASSERT_TRUE(recorder.OldestPending().has_value()) << "recorded complete at enqueue";
  EXPECT_EQ(recorder.OldestPending()->op, "all_reduce");
  c10::cuda::device_synchronize();
  EXPECT_EQ(recorder.Poll(), 0u);
  EXPECT_FALSE(recorder.OldestPending().has_value());
#endif
}

// FSDP's device code on one NCCL rank against the same model without FSDP, over two steps of
// two accumulated micro-batches.
void ExpectFsdpMatches(at::ScalarType param_dtype, double tolerance) {
  auto groups = OneRankNccl();
  ASSERT_NE(groups, nullptr);
  const ModelSpec spec = parallel::testing::SmallLlamaSpec(3, /*tied=*/false);
  auto [x, y] = Batch(4, 8, spec.vocab_size, 11);
  x = x.to(kGpu);
  y = y.to(kGpu);
  model::Llama ref(spec, 7, kGpu);
  for (int micro = 0; micro < 2; ++micro) {
    (ref.Loss(x.narrow(0, 2 * micro, 2), y.narrow(0, 2 * micro, 2)) / 2.0).backward();
  }
  auto local = parallel::MakeLocalCommunicator();
  auto rep = groups->NewGroup("rep", {0});
  ASSERT_TRUE(rep.ok());
  parallel::ShardedLlama model(spec, ref.params(), *local, parallel::Ownership::All(spec), kGpu);
  parallel::FsdpOptions fo;
  fo.param_dtype = param_dtype;
  fo.shard_single_rank = true;
  parallel::Fsdp fsdp(model, groups->world(), **rep, fo);
  model.SetHooks(&fsdp);
  ASSERT_TRUE(fsdp.sharded());
  for (int step = 0; step < 2; ++step) {
    for (auto& o : fsdp.optimizer_params()) o.tensor.mutable_grad() = at::Tensor();
    fsdp.BeginStep();
    for (int micro = 0; micro < 2; ++micro) {
      at::Tensor loss =
          model.Loss(x.narrow(0, 2 * micro, 2), y.narrow(0, 2 * micro, 2), at::kFloat);
      (loss / 2.0).backward();
    }
    fsdp.FinishStep();
    for (const auto& pt : model.params()) {
      EXPECT_EQ(pt.tensor.storage().nbytes(), 0u) << pt.name << " keeps its gathered copy";
    }
  }
  std::vector<model::NamedTensor> ref_grads;
  for (const auto& pt : ref.params()) ref_grads.push_back({pt.name, pt.tensor.grad().cpu()});
  int k = 0;
  for (int u = 0; u < fsdp.num_units(); ++u) {
    if (fsdp.layout(u).total == 0) continue;
    const at::Tensor want = fsdp.ShardOf(u, ref_grads);
    const at::Tensor grad = fsdp.optimizer_params()[static_cast<size_t>(k++)].tensor.grad();
    ASSERT_TRUE(grad.defined());
    EXPECT_EQ(grad.scalar_type(), at::kFloat) << "gradients are reduced in fp32";
    EXPECT_TRUE(grad.is_cuda());
    EXPECT_LT(RelativeError(grad.cpu().to(at::kDouble), want.to(at::kDouble)), tolerance)
        << "unit " << fsdp.unit_name(u);
  }
}

// fp32: the same operations on the same values. Not bitwise on a GPU: the attention backward
// and the embedding gradient add with atomics in an order that varies between runs; 1e-5
// relative is a few ulps of the largest partial sums.
TEST(Gpu, FsdpOnOneNcclRankEqualsNoFsdpInFp32) {
  TENAX_REQUIRE_GPU();
  ExpectFsdpMatches(at::kFloat, 1e-5);
}

// bf16 parameters round every weight once (8 bits): the gradients move by bf16's rounding.
TEST(Gpu, FsdpOnOneNcclRankWithBf16ParametersStaysWithinBf16Rounding) {
  TENAX_REQUIRE_GPU();
  ExpectFsdpMatches(at::kBFloat16, 3e-2);
}

// Ring attention's blocks (at:: ops, context_parallel.h) on CUDA tensors: two processes on the
// one GPU form a Gloo ring (one GPU cannot hold two NCCL ranks; ExchangeAsync stages the keys
// through the host), and each rank's output and gradients are compared with the plain attention
// over the whole sequence in fp64 on the CPU. fp32: the blocks sum in another order (1e-5
// relative); bf16: within bf16's rounding of the inputs and the block products (3e-2).
void CheckRingOnGpu(parallel::Communicator& cp, at::ScalarType dtype, double tol) {
  const int r = cp.rank(), n = cp.size();
  constexpr int64_t kB = 2, kT = 1024, kH = 8, kK = 2, kD = 64;
  at::Generator gen = at::detail::createCPUGenerator(3);
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({kB, kT, kH, kD}, gen, opt),
                   k = at::randn({kB, kT, kK, kD}, gen, opt);
  const at::Tensor v = at::randn({kB, kT, kK, kD}, gen, opt),
                   w = at::randn({kB, kT, kH, kD}, gen, opt);
  at::Tensor qf = q.clone().set_requires_grad(true), kf = k.clone().set_requires_grad(true);
  at::Tensor vf = v.clone().set_requires_grad(true);
  const at::Tensor ref = model::ReferenceAttention(qf, kf, vf);
  (ref * w).sum().backward();
  auto local = [&](const at::Tensor& t) {
    return parallel::ContextShard(t, r, n).to(kGpu, dtype).set_requires_grad(true);
  };
  at::Tensor ql = local(q), kl = local(k), vl = local(v);
  const at::Tensor out = parallel::RingAttention(ql, kl, vl, cp);
  (out * parallel::ContextShard(w, r, n).to(kGpu, dtype)).sum().backward();
  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> checks[] = {
      {"output", {out, ref}},
      {"dq", {ql.grad(), qf.grad()}},
      {"dk", {kl.grad(), kf.grad()}},
      {"dv", {vl.grad(), vf.grad()}}};
  for (const auto& [what, pair] : checks) {
    const double err = RelativeError(pair.first.to(at::kCPU, at::kDouble),
                                     parallel::ContextShard(pair.second, r, n));
    EXPECT_LE(err, tol) << what << " (" << c10::toString(dtype) << ") on rank " << r;
  }
}

TEST(GpuWorker, DISABLED_RingAttention) {
  auto env = parallel::ReadDistEnv();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  auto groups = parallel::ProcessGroups::Connect(*env, std::chrono::seconds(60));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  CheckRingOnGpu((*groups)->world(), at::kFloat, 1e-5);
  CheckRingOnGpu((*groups)->world(), at::kBFloat16, 3e-2);
}

TEST(Gpu, RingAttentionOnTheGpuMatchesTheFullAttention) {
  TENAX_REQUIRE_GPU();
  auto codes = parallel::testing::RunRanks(2, "GpuWorker.DISABLED_RingAttention");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// `tenax train` on the GPU: 4 steps straight, and the same run stopped after its step-2
// checkpoint and resumed. What resuming loads is the saved state bit for bit: the step-2
// tensors go onto the GPU and come back unchanged, and onto the CPU and back. The resumed run
// then follows the straight one: its steps 3 and 4 match within 1e-4 relative (on one GPU the
// step is not bitwise repeatable: the attention backward and embedding gradient add with
// atomics, in an order that varies from run to run).
TEST(Gpu, CheckpointWrittenOnTheGpuResumesThereAndLoadsOnTheCpu) {
  TENAX_REQUIRE_GPU();
  TempDir dir;
  const std::string common =
      " train --defaults --set data.source=synthetic --set training.device=cuda"
      " --set training.steps=4 --set checkpoint.interval=2 --set checkpoint.async=false"
      " --set metrics.progress=never --set job.dump_folder=" +
      dir.path();
  CommandResult a = RunCommand(TenaxBinary() + common + " --set job.name=straight");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CommandResult b =
      RunCommand(TenaxBinary() + common + " --set job.name=resumed --set training.stop_at=2");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  CommandResult c = RunCommand(TenaxBinary() + common + " --set job.name=resumed");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("resuming from"), std::string::npos) << c.output;

  auto load = [](const std::string& step_dir) {
    auto ck = model::LoadModelCheckpoint(step_dir);
    EXPECT_TRUE(ck.ok()) << ck.status().ToString();
    return ck.ok() ? *ck : model::ModelCheckpoint{};
  };
  const model::ModelCheckpoint saved = load(dir.path() + "/resumed/checkpoints/step_00000002");
  ASSERT_FALSE(saved.params.empty());
  // GPU, then CPU, then GPU again: every tensor comes back with the bits it was saved with.
  model::Llama on_gpu(saved.spec, 1, kGpu);
  ASSERT_TRUE(on_gpu.LoadParams(saved.params).ok());
  model::Llama on_cpu(saved.spec, 2, at::Device(at::kCPU));
  ASSERT_TRUE(on_cpu.LoadParams(on_gpu.params()).ok());
  model::Llama back(saved.spec, 3, kGpu);
  ASSERT_TRUE(back.LoadParams(on_cpu.params()).ok());
  for (size_t i = 0; i < saved.params.size(); ++i) {
    const at::Tensor want = saved.params[i].tensor.to(at::kFloat);
    EXPECT_TRUE(at::equal(on_gpu.params()[i].tensor.cpu(), want)) << saved.params[i].name;
    EXPECT_TRUE(at::equal(on_cpu.params()[i].tensor, want)) << saved.params[i].name;
    EXPECT_TRUE(at::equal(back.params()[i].tensor.cpu(), want)) << saved.params[i].name;
  }
  const model::ModelCheckpoint straight = load(dir.path() + "/straight/checkpoints/step_00000004");
  const model::ModelCheckpoint resumed = load(dir.path() + "/resumed/checkpoints/step_00000004");
  ASSERT_EQ(straight.params.size(), resumed.params.size());
  for (size_t i = 0; i < straight.params.size(); ++i) {
    const at::Tensor s = straight.params[i].tensor.to(at::kDouble);
    EXPECT_LT(RelativeError(resumed.params[i].tensor.to(at::kDouble), s), 1e-4)
        << straight.params[i].name;
  }
}

// What a silent-data-corruption replay on a GPU sees: the same weights and batch, forward and
// backward in bf16 twice, each pass's gradients digested as the check digests its buckets. The
// difference is the kernels' own noise (printed: it is what resilience.sdc_tolerance must stay
// above); a gradient element moved by a tenth of the norm must stand far out of it.
TEST(Gpu, ReplayedStepsDifferByNoiseFarBelowACorruption) {
  TENAX_REQUIRE_GPU();
  const ModelSpec spec = StepSpec();
  auto [x, y] = Batch(4, 64, spec.vocab_size, 5);
  model::Llama m(spec, 13, kGpu);
  train::SdcMonitor monitor(nullptr, /*statistics=*/true);
  auto pass = [&](bool corrupt) {
    for (auto& p : m.params()) p.tensor.mutable_grad() = at::Tensor();
    at::Tensor loss = m.Loss(x.to(kGpu), y.to(kGpu), at::kBFloat16);
    loss.backward();
    monitor.BeginPass(1);
    monitor.Arm();
    double sq = 0;
    for (auto& p : m.params()) sq += p.tensor.grad().to(at::kDouble).pow(2).sum().item<double>();
    for (size_t i = 0; i < m.params().size(); ++i) {
      at::Tensor g = m.params()[i].tensor.grad().reshape({-1});
      if (corrupt && i == 0)
        g = g.clone().index_add_(0, at::zeros({1}, g.options().dtype(at::kLong)),
                                 at::full({1}, 0.1 * std::sqrt(sq), g.options()));
      monitor.OnLocalGradients(m.params()[i].name, g);
    }
    return monitor.Disarm(loss.item<double>());
  };
  const train::ComputeDigest first = pass(false);
  double noise = 0;
  for (int k = 0; k < 4; ++k) noise = std::max(noise, train::Disagreement(pass(false), first));
  const double corrupted = train::Disagreement(pass(true), first);
  std::printf(
      "sdc statistics on the GPU: replays differ by %.3g of the gradients' norm, a "
      "corruption of 0.1 of it by %.3g\n",
      noise, corrupted);
  EXPECT_LT(noise, 1e-4) << "the kernels' noise is too large for a useful tolerance";
  EXPECT_GT(corrupted, 0.05);
  EXPECT_FALSE(train::Agree(pass(true), first, 1e-3));
}

}  // namespace
}  // namespace tenax
