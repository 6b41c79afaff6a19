// Checksum throughput on one core, as a Markdown table: zlib's CRC-32 (checkpoints, shards), the
// CRC-32C of the live state transfer (SSE4.2, three lanes), its table-driven fallback, and a
// memcpy of the same bytes for scale. The buffer defaults to 351 MB, the 29M shape's live state
// (parameters and both Adam moments in fp32). Best of `reps` passes, after one to fault it in.
// Usage: build/bench/bench_checksums [MB=351] [reps=5]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "tenax/core/crc32.h"

namespace {

using Clock = std::chrono::steady_clock;

double Best(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 351;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t n = mb << 20;
  std::vector<uint8_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  volatile uint32_t sink = 0;
  struct Row {
    const char* name;
    std::function<void()> run;
  };
  const std::vector<Row> rows = {
      {"CRC-32 (zlib)", [&] { sink = tenax::Crc32(a.data(), n); }},
      {tenax::crc_internal::Crc32cInHardware() ? "CRC-32C (SSE4.2, 3 lanes)"
                                               : "CRC-32C (no SSE4.2: tables)",
       [&] { sink = tenax::Crc32c(a.data(), n); }},
      {"CRC-32C (tables, slicing by 8)",
       [&] { sink = tenax::crc_internal::Crc32cPortable(a.data(), n, 0); }},
      {"memcpy", [&] { std::memcpy(b.data(), a.data(), n); }},
  };
  fmt::print("{} MB, best of {}\n\n| what | s | GB/s |\n|---|---|---|\n", mb, reps);
  for (const Row& r : rows) {
    const double s = Best(reps, r.run);
    fmt::print("| {} | {:.4f} | {:.2f} |\n", r.name, s, static_cast<double>(n) / s / 1e9);
  }
  return sink == 0xFFFFFFFFu ? 1 : 0;  // keeps the checksums from being optimized out
}
