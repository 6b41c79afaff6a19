// The optimizer step alone (gradient clipping at 1.0, then AdamW with weight decay 0.1) on a
// Llama shape's parameter list, the per-parameter loop from before issue 17
// (src/tenax/train/testing_loop_adamw.h) against train::AdamW (flat state) updating in one pass
// per tensor (its CPU fp32 default), with ATen ops per tensor, and over the flat buffers (its
// accelerator default), interleaved in one process (loop, one pass, ATen, flat, loop, ...) so that
// drift in the machine's speed hits both alike. Fresh random gradients are written into .grad
// before every timed step, as backward would leave them; only the clipping and the update are
// timed. Prints each one's median and min ms per step, the ratio of medians, and the peak RSS of
// the whole process. Threads as `tenax train` picks them for the precision (fp32: 1).
//   build/bench/bench_optimizer_step [DIM=512 LAYERS=8 HEADS=8 KV_HEADS=4 FFN=1536 VOCAB=4000]
//       [rounds=20] [threads=0: tenax's choice]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/model/llama.h"
#include "tenax/train/adamw.h"
#include "tenax/train/device.h"
#include "tenax/train/testing_loop_adamw.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tenax;
  auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  ModelSpec spec;
  spec.name = "bench";
  spec.dim = arg(1, 512);
  spec.n_layers = arg(2, 8);
  spec.n_heads = arg(3, 8);
  spec.n_kv_heads = arg(4, 4);
  spec.ffn_hidden_dim = arg(5, 1536);
  spec.vocab_size = arg(6, 4000);
  const int rounds = static_cast<int>(arg(7, 20));
  train::DeviceInfo device;  // fp32
  const train::ThreadChoice threads =
      train::ChooseThreads(device, arg(8, 0), train::ReadCpuFacts(), 1);
  train::ApplyThreads(threads);

  at::manual_seed(0);
  // One copy of the model (same initial weights) per optimizer.
  OptimizerOptions o;
  o.weight_decay = 0.1;
  model::Llama loop_model(spec, 0, at::kCPU);
  testing::LoopAdamW loop_opt(o, loop_model.params());
  struct Variant {
    const char* name;
    train::AdamW::UpdateMode mode;
    std::unique_ptr<model::Llama> model;
    std::unique_ptr<train::AdamW> opt;
    std::vector<double> ms;
  };
  std::vector<Variant> variants;
  for (auto [name, mode] : {std::pair{"flat state, one pass per tensor (CPU fp32 default)",
                                      train::AdamW::UpdateMode::kLoop},
                            std::pair{"flat state, ATen ops per tensor (other CPU dtypes)",
                                      train::AdamW::UpdateMode::kPerTensor},
                            std::pair{"flat state, flat update (accelerator default)",
                                      train::AdamW::UpdateMode::kFlat}}) {
    Variant v{name, mode, std::make_unique<model::Llama>(spec, 0, at::kCPU), nullptr, {}};
    v.opt = std::make_unique<train::AdamW>(o, v.model->params());
    v.opt->set_update_mode(mode);
    variants.push_back(std::move(v));
  }
  int64_t numel = 0;
  std::vector<at::Tensor> grads;  // one gradient per parameter, rescaled each round
  for (const auto& p : loop_model.params()) {
    numel += p.tensor.numel();
    grads.push_back(at::randn_like(p.tensor));
  }
  auto set_grads = [&](model::Llama& m, double scale) {
    for (size_t i = 0; i < grads.size(); ++i) {
      m.params()[i].tensor.mutable_grad() = grads[i] * scale;
    }
  };
  auto ms_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> loop_ms;
  for (int r = -2; r < rounds; ++r) {                // two warm-up rounds
    const double scale = (r % 2 == 0) ? 1e-4 : 1.0;  // below and above the clipping norm
    set_grads(loop_model, scale);
    auto t0 = std::chrono::steady_clock::now();
    testing::LoopClipGradNorm(loop_model.params(), 1.0);
    loop_opt.Step(1e-4);
    if (r >= 0) loop_ms.push_back(ms_since(t0));
    for (Variant& v : variants) {
      set_grads(*v.model, scale);
      t0 = std::chrono::steady_clock::now();
      train::ClipGradNorm(v.model->params(), 1.0);
      v.opt->Step(1e-4);
      if (r >= 0) v.ms.push_back(ms_since(t0));
    }
  }
  // All saw the same gradients: the same weights, up to the one-pass loop's exact square root
  // (adamw_kernel.h: ATen's vectorized sqrt is not correctly rounded), one ulp per step at most.
  double max_diff = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& w = loop_model.params()[i].tensor;
    for (const Variant& v : variants) {
      max_diff = std::max(max_diff, (w - v.model->params()[i].tensor).abs().max().item<double>());
    }
  }
  fmt::print(
      "optimizer step (clip at 1.0 + AdamW), {:.2f}M parameters in {} tensors, {} thread(s), "
      "{} rounds interleaved\n",
      static_cast<double>(numel) / 1e6, grads.size(), threads.intra_op_threads, rounds);
  fmt::print(
      "| implementation | median ms | min ms | loop / this (medians) |\n|---|---|---|---|\n");
  fmt::print("| per-parameter loop (before) | {:.2f} | {:.2f} | 1.00 |\n", Median(loop_ms),
             *std::min_element(loop_ms.begin(), loop_ms.end()));
  for (const Variant& v : variants) {
    fmt::print("| {} | {:.2f} | {:.2f} | {:.2f} |\n", v.name, Median(v.ms),
               *std::min_element(v.ms.begin(), v.ms.end()), Median(loop_ms) / Median(v.ms));
  }
  fmt::print("max |weight difference| from the loop: {:g}\n", max_diff);
  const double bound = static_cast<double>(rounds + 2) * std::ldexp(1.0, -21);  // |w| < 8
  return max_diff <= bound ? 0 : 1;
}
