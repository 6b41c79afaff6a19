// Peak memory of the output head (final projection + cross-entropy, forward and backward) on a
// large-vocabulary shape, plain path (full fp32 logits) against the chunked one
// (model/fused_cross_entropy.h). Run each mode in its own process: peak RSS is per process.
//   build/bench/bench_head_memory plain|chunked [tokens=2048] [dim=256] [vocab=128256] [bf16|fp32]
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "peak_rss.h"
#include "tenax/model/fused_cross_entropy.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "chunked";
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int64_t c = argc > 3 ? std::atoll(argv[3]) : 256;
  const int64_t v = argc > 4 ? std::atoll(argv[4]) : 128256;
  const auto dtype = argc > 5 && std::string(argv[5]) == "fp32" ? at::kFloat : at::kBFloat16;
  if (mode != "plain" && mode != "chunked") {
    fmt::print(stderr, "mode must be plain or chunked, not '{}'\n", mode);
    return 2;
  }
  at::manual_seed(0);                                                // same inputs in both modes
  at::Tensor w = at::randn({v, c}).mul_(0.02).requires_grad_(true);  // fp32 master (V, C)
  at::Tensor x = at::randn({n, c}).to(dtype).requires_grad_(true);   // (N, C)
  at::Tensor t = at::randint(0, v, {n}, at::kLong);
  const double before = tenax::bench::MaxRssMiB();
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor loss;
  if (mode == "plain") {
    at::Tensor logits = at::matmul(x, w.to(dtype).t()).to(at::kFloat);  // (N, V)
    loss = at::cross_entropy_loss(logits, t);
  } else {
    loss = tenax::model::LinearCrossEntropy(x, w, t);
  }
  loss.backward();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "mode {} tokens {} dim {} vocab {} {}: loss {:.4f}, {:.2f} s, peak RSS {:.0f} MiB "
      "({:.0f} MiB above the inputs; full fp32 logits would be {:.0f} MiB)\n",
      mode, n, c, v, dtype == at::kFloat ? "fp32" : "bf16", loss.item<double>(), dt,
      tenax::bench::MaxRssMiB(), tenax::bench::MaxRssMiB() - before,
      static_cast<double>(n * v * 4) / (1 << 20));
  return 0;
}
