// Causal grouped-query attention alone, forward + backward, by path (model/attention.h):
// reference (K/V expanded, (B, H, T, T) scores: tenax before issue 17), grouped (no repeated K/V,
// scores materialised), blockwise (FlashAttention-2 on blocks), auto (what the layers call).
// Prints the median time of `iters` forward+backward passes after one warm-up, and the process's
// peak RSS over a baseline taken after the inputs exist (run one path per process for memory).
//   build/bench/bench_attention PATH [B=8] [H=8] [K=4] [T=256] [D=64] [fp32|bf16] [iters=10]
//       [block=128] [threads=1]
#include "tenax/model/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "peak_rss.h"

int main(int argc, char** argv) {
  namespace m = tenax::model;
  const std::string path = argc > 1 ? argv[1] : "auto";
  const auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  const int64_t b = arg(2, 8), h = arg(3, 8), kv = arg(4, 4), t = arg(5, 256), d = arg(6, 64);
  const auto dtype = argc > 7 && std::string(argv[7]) == "bf16" ? at::kBFloat16 : at::kFloat;
  const int64_t iters = arg(8, 10), block = arg(9, m::kAttentionBlock), threads = arg(10, 1);
  at::set_num_threads(static_cast<int>(threads));
  if (path != "reference" && path != "grouped" && path != "blockwise" && path != "auto") {
    fmt::print(stderr, "path must be reference, grouped, blockwise or auto, not '{}'\n", path);
    return 2;
  }
  at::manual_seed(0);
  at::Tensor q = at::randn({b, t, h, d}).to(dtype).requires_grad_(true);
  at::Tensor k = at::randn({b, t, kv, d}).to(dtype).requires_grad_(true);
  at::Tensor v = at::randn({b, t, kv, d}).to(dtype).requires_grad_(true);
  at::Tensor dout = at::randn({b, t, h, d}).to(dtype);
  const double base = tenax::bench::MaxRssMiB();
  std::vector<double> ms;
  for (int64_t i = 0; i <= iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor out;
    if (path == "reference") {
      out = m::ReferenceAttention(q, k, v);
    } else if (path == "grouped") {
      out = m::GroupedAttention(q, k, v);
    } else if (path == "blockwise") {
      out = m::BlockwiseAttention(q, k, v, block);
    } else {
      out = m::CausalGqaAttention(q, k, v);
    }
    auto g = torch::autograd::grad({out}, {q, k, v}, {dout});
    const auto dt = std::chrono::steady_clock::now() - t0;
    if (i > 0) ms.push_back(std::chrono::duration<double, std::milli>(dt).count());
  }
  std::sort(ms.begin(), ms.end());
  fmt::print(
      "path={} B={} H={} K={} T={} D={} dtype={} block={} threads={} fwd_bwd_ms_median={:.2f} "
      "min={:.2f} peak_rss_over_inputs_mib={:.0f}\n",
      path, b, h, kv, t, d, dtype == at::kFloat ? "fp32" : "bf16", block, threads,
      ms.empty() ? 0.0 : ms[ms.size() / 2], ms.empty() ? 0.0 : ms.front(),
      tenax::bench::MaxRssMiB() - base);
  return 0;
}
