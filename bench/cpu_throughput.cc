// Training throughput of the debug presets on this CPU: one full optimizer step (forward,
// backward, clipping, AdamW) on random tokens, after warm-up. Prints tokens/s and the achieved
// model GFLOP/s (FLOPs per token as in config/model_spec.h). Usage:
//   build/bench/bench_cpu_throughput [seq_len=256] [batch=8] [steps=5]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "tenax/config/model_spec.h"
#include "tenax/model/llama.h"
#include "tenax/train/adamw.h"

int main(int argc, char** argv) {
  using namespace tenax;
  const int64_t seq_len = argc > 1 ? std::atoll(argv[1]) : 256;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 8;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 5;
  fmt::print(
      "CPU training throughput, seq_len {}, batch {}, {} timed steps, {} intra-op thread(s)\n",
      seq_len, batch, steps, at::get_num_threads());
  fmt::print("| preset | params | GFLOP/token | s/step | tokens/s | achieved GFLOP/s |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  for (const char* preset : {"debug-tiny", "debug-small", "debug-medium"}) {
    ModelOptions o;
    o.preset = preset;
    ModelSpec spec = *ResolveModelSpec(o, 257);
    model::Llama m(spec, 0, at::kCPU);
    train::AdamW opt(OptimizerOptions{}, m.params());
    at::Tensor tokens = at::randint(0, spec.vocab_size, {batch, seq_len + 1}, at::kLong);
    at::Tensor in = tokens.narrow(1, 0, seq_len), tgt = tokens.narrow(1, 1, seq_len);
    auto step = [&] {
      m.Loss(in, tgt).backward();
      train::ClipGradNorm(m.params(), 1.0);
      opt.Step(1e-4);
      for (auto& p : m.params()) p.tensor.mutable_grad() = at::Tensor();
    };
    step();
    step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    const double tps = static_cast<double>(batch * seq_len) / dt;
    const double fpt = TrainingFlopsPerToken(spec, seq_len).total();
    fmt::print("| {} | {:.2f}M | {:.4f} | {:.3f} | {:.0f} | {:.1f} |\n", preset,
               CountParams(spec).total / 1e6, fpt / 1e9, dt, tps, tps * fpt / 1e9);
  }
  return 0;
}
