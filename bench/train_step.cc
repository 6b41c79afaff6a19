// One tenax training step on an explicit Llama shape, as bench/side_by_side.sh runs it against
// the PyTorch-eager script bench/llama_eager.py: forward, backward, gradient clipping at 1.0 and
// AdamW, on random tokens, after two warm-up steps. Threads as `tenax train` picks them
// (train/device.h: ChooseThreads) unless given. Prints one line of key=value pairs; with
// `profile`, also libtorch's profiler breakdown of one step (self time per operation).
//   build/bench/bench_train_step DIM LAYERS HEADS KV_HEADS FFN VOCAB fp32|bf16
//       [seq=256] [batch=8] [steps=4] [threads=0: tenax's choice] [flags]
// flags, comma-separated: `profile`; `plain-head` (the output head as before issue 17: full
// logits, then cross-entropy) for before/after comparisons; `loop-adamw` (clipping and AdamW as
// before issue 17: one loop over the parameters, src/tenax/train/testing_loop_adamw.h);
// `glibc-malloc` (glibc's default thresholds, as before tenax kept freed memory: device.h);
// `blas-matmul` (fp32 products in ATen, as before they went to oneDNN's sgemm: model/cpu_gemm.h);
// `aten-bf16-wgrad` (bf16 weight gradients from at::mm, rounded to bf16 and widened, as before
// they came from oneDNN's bf16 gemm in fp32: model/cpu_gemm.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "peak_rss.h"
#include "tenax/config/model_spec.h"
#include "tenax/model/cpu_gemm.h"
#include "tenax/model/llama.h"
#include "tenax/train/adamw.h"
#include "tenax/train/device.h"
#include "tenax/train/testing_loop_adamw.h"

namespace {

// Self time per operation name (inclusive time minus that of the operations it called), from the
// legacy profiler's push/pop event pairs, printed as a table of the largest.
void PrintBreakdown(const torch::autograd::profiler::thread_event_lists& lists, double step_s) {
  std::map<std::string, std::pair<double, int64_t>> self_us;  // name -> (us, calls)
  for (const auto& events : lists) {
    struct Open {
      const torch::autograd::profiler::LegacyEvent* push;
      double children_us;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kindStr() == "push") {
        stack.push_back({&e, 0.0});
      } else if (e.kindStr() == "pop" && !stack.empty()) {
        const Open top = stack.back();
        stack.pop_back();
        const double us = top.push->cpuElapsedUs(e);
        auto& slot = self_us[top.push->name()];
        slot.first += us - top.children_us;
        slot.second += 1;
        if (!stack.empty()) stack.back().children_us += us;
      }
    }
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(self_us.begin(),
                                                                       self_us.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  fmt::print("profile of one step: {:.3f} s wall, {:.3f} s in profiled operations\n", step_s,
             total / 1e6);
  fmt::print("| operation | calls | self ms | % |\n|---|---|---|---|\n");
  for (size_t i = 0; i < rows.size() && i < 20; ++i) {
    fmt::print("| {} | {} | {:.1f} | {:.1f} |\n", rows[i].first, rows[i].second.second,
               rows[i].second.first / 1e3, 100.0 * rows[i].second.first / total);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tenax;
  if (argc < 8) {
    fmt::print(stderr,
               "usage: {} DIM LAYERS HEADS KV_HEADS FFN VOCAB fp32|bf16 [seq=256] [batch=8] "
               "[steps=4] [threads=0] [flags]\n",
               argv[0]);
    return 2;
  }
  ModelSpec spec;
  spec.name = "bench";
  spec.dim = std::atoll(argv[1]);
  spec.n_layers = std::atoll(argv[2]);
  spec.n_heads = std::atoll(argv[3]);
  spec.n_kv_heads = std::atoll(argv[4]);
  spec.ffn_hidden_dim = std::atoll(argv[5]);
  spec.vocab_size = std::atoll(argv[6]);
  const std::string precision = argv[7];
  const int64_t seq = argc > 8 ? std::atoll(argv[8]) : 256;
  const int64_t batch = argc > 9 ? std::atoll(argv[9]) : 8;
  const int steps = argc > 10 ? std::atoi(argv[10]) : 4;
  const int64_t threads_arg = argc > 11 ? std::atoll(argv[11]) : 0;
  const std::string flags = argc > 12 ? argv[12] : "";
  const bool profile = flags.find("profile") != std::string::npos;
  const bool plain_head = flags.find("plain-head") != std::string::npos;
  const bool loop_adamw = flags.find("loop-adamw") != std::string::npos;
  // fp32 products in ATen (OpenBLAS here) instead of oneDNN's sgemm (model/cpu_gemm.h).
  if (flags.find("blas-matmul") != std::string::npos) model::EnableCpuSgemm(false);
  if (flags.find("aten-bf16-wgrad") != std::string::npos) model::EnableCpuBf16Gemm(false);

  train::DeviceInfo device;
  device.compute_dtype = precision == "bf16" ? at::kBFloat16 : at::kFloat;
  const train::CpuFacts cpu = train::ReadCpuFacts();
  const train::ThreadChoice threads = train::ChooseThreads(device, threads_arg, cpu, 1);
  train::ApplyThreads(threads);
  // As `tenax train` does on CPU (device.h), unless `glibc-malloc` asks for glibc's defaults.
  const bool glibc_malloc = flags.find("glibc-malloc") != std::string::npos;
  if (!glibc_malloc) train::SetUpCpuAllocator();

  at::manual_seed(0);
  model::Llama m(spec, 0, at::kCPU);
  // Only the optimizer in use holds state, so that peak_rss_mib compares like with like.
  std::optional<train::AdamW> opt;
  std::optional<testing::LoopAdamW> loop_opt;
  if (loop_adamw) {
    loop_opt.emplace(OptimizerOptions{}, m.params());
  } else {
    opt.emplace(OptimizerOptions{}, m.params());
  }
  at::Tensor tokens = at::randint(0, spec.vocab_size, {batch, seq + 1}, at::kLong);
  at::Tensor in = tokens.narrow(1, 0, seq), tgt = tokens.narrow(1, 1, seq);
  double loss = 0;
  auto step = [&] {
    at::Tensor l;
    if (plain_head) {
      at::Tensor logits = m.Logits(in, device.compute_dtype);  // (B, T, V) fp32
      l = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), tgt.reshape({-1}));
    } else {
      l = m.Loss(in, tgt, device.compute_dtype);
    }
    l.backward();
    if (loop_adamw) {
      testing::LoopClipGradNorm(m.params(), 1.0);
      loop_opt->Step(1e-4);
    } else {
      train::ClipGradNorm(m.params(), 1.0);
      opt->Step(1e-4);
    }
    for (auto& p : m.params()) p.tensor.mutable_grad() = at::Tensor();
    loss = l.item<double>();
  };
  step();
  step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double dt =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  const double tps = static_cast<double>(batch * seq) / dt;
  const double fpt = TrainingFlopsPerToken(spec, seq).total();
  fmt::print(
      "impl=tenax{}{}{} precision={} threads={} params={:.2f}M tokens_per_s={:.0f} "
      "model_gflops={:.1f} peak_rss_mib={:.0f} loss={:.4f}\n",
      plain_head ? "-plain-head" : "", loop_adamw ? "-loop-adamw" : "",
      glibc_malloc ? "-glibc-malloc" : "", precision, threads.intra_op_threads,
      CountParams(spec).total / 1e6, tps, tps * fpt / 1e9, bench::MaxRssMiB(), loss);
  if (profile) {
    using namespace torch::autograd::profiler;
    enableProfilerLegacy(
        torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
    const auto p0 = std::chrono::steady_clock::now();
    step();
    const double ps = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    PrintBreakdown(disableProfilerLegacy(), ps);
  }
  return 0;
}
