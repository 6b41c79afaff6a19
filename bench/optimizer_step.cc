// The optimizer step alone (gradient clipping at 1.0, then AdamW with weight decay 0.1) on a
// Llama shape's parameter list, the per-parameter loop from before issue 17
// (src/tenax/train/testing_loop_adamw.h) against train::AdamW (flat state) updating per tensor (its
// CPU default) and over the flat buffers (its accelerator default), interleaved in one process
// (loop, per-tensor, flat, loop, ...) so that drift in the machine's speed hits both alike. Fresh
// random gradients are written into .grad before every timed step, as backward would leave them;
// only the clipping and the update are timed. Prints each one's median and min ms per step, the
// ratio of medians, and the peak RSS of the whole process. Threads as `tenax train` picks them for
// the precision (fp32: 1).
//   build/bench/bench_optimizer_step [DIM=512 LAYERS=8 HEADS=8 KV_HEADS=4 FFN=1536 VOCAB=4000]
//       [rounds=20] [threads=0: tenax's choice]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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
  at::set_num_threads(threads.intra_op_threads);

  at::manual_seed(0);
  // Three copies of the model (same initial weights), one per optimizer.
  model::Llama loop_model(spec, 0, at::kCPU), tensor_model(spec, 0, at::kCPU),
      flat_model(spec, 0, at::kCPU);
  OptimizerOptions o;
  o.weight_decay = 0.1;
  testing::LoopAdamW loop_opt(o, loop_model.params());
  train::AdamW tensor_opt(o, tensor_model.params()), flat_opt(o, flat_model.params());
  tensor_opt.set_update_mode(train::AdamW::UpdateMode::kPerTensor);
  flat_opt.set_update_mode(train::AdamW::UpdateMode::kFlat);
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
  std::vector<double> loop_ms, tensor_ms, flat_ms;
  for (int r = -2; r < rounds; ++r) {                // two warm-up rounds
    const double scale = (r % 2 == 0) ? 1e-4 : 1.0;  // below and above the clipping norm
    set_grads(loop_model, scale);
    auto t0 = std::chrono::steady_clock::now();
    testing::LoopClipGradNorm(loop_model.params(), 1.0);
    loop_opt.Step(1e-4);
    const double a = ms_since(t0);
    set_grads(tensor_model, scale);
    t0 = std::chrono::steady_clock::now();
    train::ClipGradNorm(tensor_model.params(), 1.0);
    tensor_opt.Step(1e-4);
    const double b = ms_since(t0);
    set_grads(flat_model, scale);
    t0 = std::chrono::steady_clock::now();
    train::ClipGradNorm(flat_model.params(), 1.0);
    flat_opt.Step(1e-4);
    const double c = ms_since(t0);
    if (r >= 0) {
      loop_ms.push_back(a);
      tensor_ms.push_back(b);
      flat_ms.push_back(c);
    }
  }
  // The three saw the same gradients: the same weights, bit for bit.
  double max_diff = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& w = loop_model.params()[i].tensor;
    for (model::Llama* m : {&tensor_model, &flat_model}) {
      max_diff = std::max(max_diff, (w - m->params()[i].tensor).abs().max().item<double>());
    }
  }
  fmt::print(
      "optimizer step (clip at 1.0 + AdamW), {:.2f}M parameters in {} tensors, {} thread(s), "
      "{} rounds interleaved\n",
      static_cast<double>(numel) / 1e6, grads.size(), threads.intra_op_threads, rounds);
  fmt::print(
      "| implementation | median ms | min ms | loop / this (medians) |\n|---|---|---|---|\n");
  for (auto [name, v] : {std::pair{"per-parameter loop (before)", &loop_ms},
                         std::pair{"flat state, per-tensor update (CPU default)", &tensor_ms},
                         std::pair{"flat state, flat update (accelerator default)", &flat_ms}}) {
    fmt::print("| {} | {:.2f} | {:.2f} | {:.2f} |\n", name, Median(*v),
               *std::min_element(v->begin(), v->end()), Median(loop_ms) / Median(*v));
  }
  fmt::print("max |weight difference| from the loop: {:g}\n", max_diff);
  return max_diff == 0 ? 0 : 1;
}
