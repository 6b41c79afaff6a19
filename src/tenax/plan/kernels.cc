#include "tenax/plan/kernels.h"

#include <algorithm>
#include <cmath>

#include "tenax/core/check.h"

namespace tenax::plan {
namespace {

// cuBLAS's output tile shapes, largest (most efficient per tile) first ("Matrix Multiplication
// Background User's Guide", section "Typical Tile Dimensions In cuBLAS And Performance").
constexpr double kTiles[][2] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};

const AttentionTable& Table(const HardwareProfile& hw, AttentionKind kind) {
  const char* name = kind == AttentionKind::kFlash3 ? "flash3" : "flash2";
  auto it = hw.attention.find(name);
  TENAX_CHECK_MSG(it != hw.attention.end(), "the profile lacks this attention kernel's table");
  return it->second;
}

}  // namespace

double TileEfficiency(double m, double n, double batch, int sm_count) {
  const double sms = static_cast<double>(std::max(1, sm_count));
  double best = 0;
  for (const auto& t : kTiles) {
    const double tiles = std::ceil(m / t[0]) * std::ceil(n / t[1]) * batch;
    const double waves = std::ceil(tiles / sms);
    best = std::max(best, m * n * batch / (waves * sms * t[0] * t[1]));
  }
  return best;
}

double GemmTime(const HardwareProfile& hw, double m, double n, double k, Precision p, double batch,
                bool sustained) {
  const bool fp8 = p == Precision::kFp8 && hw.peak_fp8 > 0;
  const double ceiling = (fp8 ? hw.peak_fp8 * hw.eff.fp8_matmul : hw.peak_bf16 * hw.eff.matmul) *
                         (sustained ? hw.sustained_clock : 1.0);
  const double flops = 2.0 * m * n * k * batch;
  const double compute = flops / (ceiling * TileEfficiency(m, n, batch, hw.sm_count));
  const double in_bytes = fp8 ? 1.0 : 2.0;
  const double bytes = batch * (in_bytes * (m * k + k * n) + 2.0 * m * n);
  return std::max(compute, StreamTime(hw, bytes)) + hw.gemm_overhead;  // one (batched) kernel
}

double StreamTime(const HardwareProfile& hw, double bytes) {
  return bytes / (hw.hbm_bandwidth * hw.eff.memory_bound);
}

LinearGemms LinearGemmTimes(const HardwareProfile& hw, double m, double k, double n, Precision p,
                            bool sustained) {
  return {GemmTime(hw, m, n, k, p, 1, sustained), GemmTime(hw, m, k, n, p, 1, sustained),
          GemmTime(hw, k, n, m, p, 1, sustained)};
}

double Fp8LinearCastBytes(double m, double k, double n) {
  return (kFp8CastBytesPerElement + kFp8TransposeBytesPerElement) * (m * k + k * n + m * n);
}

double FlashAttentionFlops(const HardwareProfile& hw, AttentionKind kind, double seq) {
  const AttentionTable& t = Table(hw, kind);
  const size_t n = t.seq_len.size();
  double rate;
  if (seq >= t.seq_len[n - 1]) {
    rate = t.flops[n - 1];
  } else {
    // Log-log interpolation between neighbours; below the first point the first segment's slope
    // continues (short sequences are launch- and occupancy-bound).
    size_t i = 1;
    while (i + 1 < n && seq > t.seq_len[i]) ++i;
    const double x0 = std::log(t.seq_len[i - 1]), x1 = std::log(t.seq_len[i]);
    const double y0 = std::log(t.flops[i - 1]), y1 = std::log(t.flops[i]);
    rate = std::exp(y0 + (y1 - y0) * (std::log(std::max(seq, 1.0)) - x0) / (x1 - x0));
  }
  return rate * hw.eff.attention * hw.sustained_clock;
}

double FlashAttentionTime(const HardwareProfile& hw, AttentionKind kind, double seq,
                          double fa_flops) {
  return fa_flops / FlashAttentionFlops(hw, kind, seq);
}

GroupPlacement PlaceGroup(const HardwareProfile& hw, int64_t stride, int64_t ranks) {
  GroupPlacement g;
  const int64_t span = stride * ranks;
  g.in_node = span <= hw.gpus_per_node && hw.gpus_per_node % span == 0;
  g.per_node = g.in_node ? ranks : std::max<int64_t>(1, std::min(ranks, hw.gpus_per_node / stride));
  return g;
}

double BusBandwidth(const HardwareProfile& hw, Collective c, const GroupPlacement& g) {
  const double nvlink =
      hw.nvlink.bandwidth *
      (c == Collective::kAllReduce ? hw.eff.allreduce_nvlink : hw.eff.collective_nvlink);
  if (g.in_node) return nvlink;
  const double nics =
      static_cast<double>(g.per_node) * hw.network.bandwidth * hw.eff.collective_network;
  return std::min(nvlink, nics);
}

double CollectiveTime(const HardwareProfile& hw, Collective c, int64_t stride, int64_t ranks,
                      double bytes) {
  if (ranks <= 1) return 0;
  const GroupPlacement g = PlaceGroup(hw, stride, ranks);
  const double k = static_cast<double>(ranks);
  const double passes = c == Collective::kAllReduce ? 2.0 : 1.0;
  const double latency = g.in_node ? hw.nvlink.latency : hw.network.latency;
  return passes * (k - 1.0) * latency + passes * (k - 1.0) / k * bytes / BusBandwidth(hw, c, g);
}

double AllToAllTime(const HardwareProfile& hw, int64_t stride, int64_t ranks, double bytes) {
  if (ranks <= 1) return 0;
  const GroupPlacement g = PlaceGroup(hw, stride, ranks);
  const double k = static_cast<double>(ranks);
  const double local = static_cast<double>(g.in_node ? ranks : g.per_node);  // incl. this GPU
  const double intra = (local - 1.0) / k * bytes, inter = (k - local) / k * bytes;
  const double t_intra = intra / (hw.nvlink.bandwidth * hw.eff.collective_nvlink);
  const double t_inter =
      inter > 0 ? inter / (hw.network.bandwidth * hw.eff.collective_network) : 0.0;
  return (inter > 0 ? hw.network.latency : hw.nvlink.latency) + std::max(t_intra, t_inter);
}

double SendTime(const HardwareProfile& hw, bool in_node, double bytes) {
  const Link& link = in_node ? hw.nvlink : hw.network;
  const double eff = in_node ? hw.eff.collective_nvlink : hw.eff.collective_network;
  return link.latency + bytes / (link.bandwidth * eff);
}

}  // namespace tenax::plan
