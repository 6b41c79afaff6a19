// Component costs on a hardware profile: one GEMM, one fused attention kernel, one memory-bound
// pass, one NCCL collective, one pipeline send. The layer and step models (cost_model.h) are sums
// of these; the calibration rows of `tenax plan --validate` check each against the measurements
// recorded in the profile.
// Non-goals: kernel-level simulation (occupancy, L2, clocks under power limits), NCCL algorithm
// selection beyond ring vs NVLink SHARP, network congestion between jobs.
#pragma once

#include <cstdint>

#include "tenax/plan/hardware.h"
#include "tenax/plan/workload.h"

namespace tenax::plan {

enum class Precision { kBf16, kFp8 };

// Fraction of the GPU's tile slots a GEMM's output keeps busy: the output is cut into tiles
// (cuBLAS's typical 256x128 ... 64x64, NVIDIA's "Matrix Multiplication Background" guide, tile
// and wave quantization), tiles run in waves of `sm_count`, and the last wave and partial tiles
// are partly idle. The best tile shape is taken. `batch` independent GEMMs share the waves.
double TileEfficiency(double m, double n, double batch, int sm_count);

// Seconds for `batch` GEMMs C[m,n] = A[m,k] B[k,n]: the larger of the compute time at the
// profile's GEMM ceiling times TileEfficiency, and the time to stream A, B and C (roofline), plus
// the profile's fixed cost per GEMM. `sustained`: at the clock held under sustained load
// (training); false: at the burst clock of kernel benchmarks (the calibration rows).
double GemmTime(const HardwareProfile& hw, double m, double n, double k, Precision p,
                double batch = 1, bool sustained = true);

// One linear layer's three GEMMs for `m` tokens and a weight `k` (in) x `n` (out): forward
// Y[m,n] = X[m,k] W[k,n], input gradient dX[m,k] = dY W^T, weight gradient dW[k,n] = X^T dY.
struct LinearGemms {
  double fwd = 0, dgrad = 0, wgrad = 0;
};
LinearGemms LinearGemmTimes(const HardwareProfile& hw, double m, double k, double n, Precision p,
                            bool sustained = true);

// Seconds for a memory-bound pass moving `bytes` through HBM.
double StreamTime(const HardwareProfile& hw, double bytes);

// HBM bytes around one fp8 linear layer's three GEMMs (forward X[m,k] W[k,n], input and weight
// gradients), as torchao's Float8Linear runs them with dynamic tensorwise scaling
// (torchao/float8/float8_linear.py and float8_ops.py at eab345c, torchtitan's Dec 2024 runs): X,
// W and the output gradient dY are each cast once (read bf16 for the amax, 2 B; read it again
// and write fp8, 3 B), and backward reuses the fp8 X and W; torch._scaled_mm takes its first
// operand row-major and its second column-major, so backward copies each of the three fp8
// tensors once into the other layout (W for the input gradient, dY and X for the weight
// gradient: 1 B read, 1 B written).
constexpr double kFp8CastBytesPerElement = 5.0, kFp8TransposeBytesPerElement = 2.0;
double Fp8LinearCastBytes(double m, double k, double n);
// An elementwise op's backward reads its saved inputs and the incoming gradient and writes the
// outgoing one: about twice its forward traffic.
constexpr double kBackwardElementwiseFactor = 2.0;

// Seconds for a fused attention kernel doing `fa_flops` (forward + backward, counted as the
// FlashAttention papers do) at sequence length `seq`: the profile's measured throughput for that
// kernel, interpolated in log(sequence length) (extrapolated below the first point, held above
// the last), derated to the sustained clock. The profile must have the kernel's table (CHECKed;
// callers validate first).
double FlashAttentionTime(const HardwareProfile& hw, AttentionKind kind, double seq,
                          double fa_flops);
// The measured throughput itself (FLOP/s), for reports and calibration rows.
double FlashAttentionFlops(const HardwareProfile& hw, AttentionKind kind, double seq);

enum class Collective { kAllGather, kReduceScatter, kAllReduce };

// Where a group of `ranks` GPUs, `stride` apart in the global rank order, runs: inside one node
// when the group spans at most a node (and tiles it), else across nodes with `per_node` of its
// ranks in each node (NCCL then drives that many NICs in parallel, one ring per rail).
struct GroupPlacement {
  bool in_node = true;
  int64_t per_node = 1;
};
GroupPlacement PlaceGroup(const HardwareProfile& hw, int64_t stride, int64_t ranks);

// NCCL bus bandwidth (bytes/s) of a collective over that placement: NVLink's measured fraction of
// its line rate inside a node (all-reduce with its own, NVLink SHARP, figure); across nodes the
// measured per-NIC figure times the NICs in use, never above NVLink's.
double BusBandwidth(const HardwareProfile& hw, Collective c, const GroupPlacement& g);

// Seconds for a collective over `ranks` GPUs (`stride` apart) on a tensor of `bytes` (the whole,
// gathered tensor; nccl-tests' S): steps x latency + bus factor x bytes / bus bandwidth, with
// (k-1) steps and factor (k-1)/k for all-gather and reduce-scatter, twice that for all-reduce.
double CollectiveTime(const HardwareProfile& hw, Collective c, int64_t stride, int64_t ranks,
                      double bytes);

// Seconds for an all-to-all over `ranks` GPUs (`stride` apart) in which each GPU sends `bytes` in
// all, an equal share to every rank of the group (its own share stays local). NCCL runs it as
// ranks - 1 simultaneous point-to-point sends: the shares for GPUs of the same node move over
// NVLink while the others leave through this GPU's NIC, so the time is one latency plus the
// longer of the two, each at its measured collective efficiency.
double AllToAllTime(const HardwareProfile& hw, int64_t stride, int64_t ranks, double bytes);

// Seconds for one point-to-point send of `bytes` inside a node or across nodes.
double SendTime(const HardwareProfile& hw, bool in_node, double bytes);

}  // namespace tenax::plan
