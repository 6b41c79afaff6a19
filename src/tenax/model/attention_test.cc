// The grouped and blockwise attention paths against the plain libtorch path (ReferenceAttention:
// K and V expanded to H heads, materialised scores, masked_fill, softmax): the output and the
// gradients in q, k and v for one random upstream gradient, on random inputs. Cases: fp64, fp32
// and bf16; T a multiple of the block and not; T = 1; H = K (no grouping), G = 2 and 4; B > 1.
// Tolerances, as the largest absolute error over the largest element of the reference:
//   fp64: 1e-10 (only the summation order differs);
//   fp32: 1e-5;
//   bf16: both paths round matmul inputs and outputs to bf16 but at different places (the
//         reference rounds the scores and the probabilities, the blockwise path keeps its
//         statistics in fp32 but takes the softmax backward's row term from dO.O, as
//         FlashAttention-2 does, so the bf16 rounding of dP = dO V^T no longer cancels in
//         dP - rowterm), so each is compared with the fp64 result of the same bf16-rounded
//         inputs: within 3e-2 (bf16 keeps 8 bits: ~4e-3 per rounding, a few roundings deep) and
//         within twice the reference's own error plus 4e-3 (one rounding of dP). Observed:
//         reference 1.1e-3..7.6e-3, grouped the same or better, blockwise 1.2e-3..1.1e-2.
// Blockwise results are bit-identical run to run and at 1 or 2 threads. A negative test shows the
// comparison catches a wrong head mapping (kv head h % K).
#include "tenax/model/attention.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <functional>
#include <string>
#include <vector>

namespace tenax::model {
namespace {

using AttentionFn =
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

struct Result {
  at::Tensor out, dq, dk, dv;
};

struct Inputs {
  at::Tensor q, k, v, dout;  // fp64 masters
};

Inputs MakeInputs(int64_t b, int64_t t, int64_t h, int64_t n_kv, int64_t d, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  // Scores of spread ~2 so the softmax is neither uniform nor one-hot.
  return {at::normal(0.0, 1.5, {b, t, h, d}, gen, opt),
          at::normal(0.0, 1.5, {b, t, n_kv, d}, gen, opt),
          at::normal(0.0, 1.0, {b, t, n_kv, d}, gen, opt),
          at::normal(0.0, 1.0, {b, t, h, d}, gen, opt)};
}

Result RunPath(const AttentionFn& fn, const Inputs& in, at::ScalarType dtype) {
  at::Tensor q = in.q.to(dtype).requires_grad_(true);
  at::Tensor k = in.k.to(dtype).requires_grad_(true);
  at::Tensor v = in.v.to(dtype).requires_grad_(true);
  at::Tensor out = fn(q, k, v);
  auto g = torch::autograd::grad({out}, {q, k, v}, {in.dout.to(dtype)});
  return {out.detach(), g[0], g[1], g[2]};
}

double MaxAbs(const at::Tensor& x) { return x.abs().max().item<double>(); }

double AbsErr(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
}

// Largest error of the four results: the output's relative to its largest element, each
// gradient's relative to the largest gradient element (dk is exactly 0 at T = 1, where softmax
// over one key has no gradient, so its own scale would be 0).
double WorstErr(const Result& got, const Result& want) {
  const double grad_scale = std::max({MaxAbs(want.dq), MaxAbs(want.dk), MaxAbs(want.dv), 1e-30});
  return std::max({AbsErr(got.out, want.out) / std::max(MaxAbs(want.out), 1e-30),
                   AbsErr(got.dq, want.dq) / grad_scale, AbsErr(got.dk, want.dk) / grad_scale,
                   AbsErr(got.dv, want.dv) / grad_scale});
}

// Each result's error, for a failure's message: which one is off, and by how much.
std::string Errors(const Result& got, const Result& want) {
  return "abs errors: out " + std::to_string(AbsErr(got.out, want.out)) + " (max " +
         std::to_string(MaxAbs(want.out)) + "), dq " + std::to_string(AbsErr(got.dq, want.dq)) +
         ", dk " + std::to_string(AbsErr(got.dk, want.dk)) + ", dv " +
         std::to_string(AbsErr(got.dv, want.dv)) + " (max grad " +
         std::to_string(std::max({MaxAbs(want.dq), MaxAbs(want.dk), MaxAbs(want.dv)})) + ")";
}

at::Tensor Blockwise16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return BlockwiseAttention(q, k, v, 16);
}
// The production query block (one block for the shapes below) and blocks of 16 query positions.
at::Tensor Grouped(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return GroupedAttention(q, k, v);
}
at::Tensor Grouped16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return GroupedAttention(q, k, v, 16);
}

struct Shape {
  int64_t b, t, h, n_kv, d;
};

// T = 40 with blocks of 16: two full blocks and a short one; T = 1; T = 16 (one full block).
const std::vector<Shape> kShapes = {
    {2, 40, 4, 2, 8}, {1, 1, 4, 1, 8}, {3, 16, 4, 4, 8}, {2, 40, 8, 2, 16}, {1, 33, 2, 2, 4}};

void ExpectMatches(const AttentionFn& fn, at::ScalarType dtype, double tol) {
  uint64_t seed = 5;
  for (const Shape& s : kShapes) {
    const Inputs in = MakeInputs(s.b, s.t, s.h, s.n_kv, s.d, seed++);
    const Result want = RunPath(ReferenceAttention, in, dtype);
    const Result got = RunPath(fn, in, dtype);
    ASSERT_EQ(got.out.sizes(), want.out.sizes());
    ASSERT_EQ(got.dk.sizes(), want.dk.sizes());
    EXPECT_EQ(got.out.scalar_type(), dtype);
    EXPECT_EQ(got.dq.scalar_type(), dtype);
    const double err = WorstErr(got, want);
    EXPECT_LT(err, tol) << "B=" << s.b << " T=" << s.t << " H=" << s.h << " K=" << s.n_kv
                        << " D=" << s.d;
  }
}

TEST(Attention, GroupedMatchesReferenceFp64) {
  ExpectMatches(Grouped, at::kDouble, 1e-10);
  ExpectMatches(Grouped16, at::kDouble, 1e-10);
}
TEST(Attention, BlockwiseMatchesReferenceFp64) { ExpectMatches(Blockwise16, at::kDouble, 1e-10); }
TEST(Attention, BlockwiseDefaultBlockMatchesReferenceFp64) {
  // T = 300 with the production block: a short last block of 300 - 2 * 128 rows.
  const Inputs in = MakeInputs(1, 300, 4, 2, 8, 99);
  const auto fn = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return BlockwiseAttention(q, k, v);
  };
  const Result got = RunPath(fn, in, at::kDouble);
  const Result want = RunPath(ReferenceAttention, in, at::kDouble);
  // Not reproduced in 300 runs beside a build (2026-12-02) after one failure in a loaded CI run
  // whose log was lost: the message says which result was off.
  EXPECT_LT(WorstErr(got, want), 1e-10)
      << Errors(got, want) << "; a rerun gives " << WorstErr(RunPath(fn, in, at::kDouble), want);
}
TEST(Attention, GroupedMatchesReferenceFp32) {
  ExpectMatches(Grouped, at::kFloat, 1e-5);
  ExpectMatches(Grouped16, at::kFloat, 1e-5);
}
TEST(Attention, BlockwiseMatchesReferenceFp32) { ExpectMatches(Blockwise16, at::kFloat, 1e-5); }
TEST(Attention, DispatchMatchesReferenceFp32) {
  // Both sides of kBlockwiseMinSeq through the function the layers call.
  for (int64_t t : {int64_t{7}, kBlockwiseMinSeq + 3}) {
    const Inputs in = MakeInputs(1, t, 4, 2, 8, 123);
    EXPECT_LT(WorstErr(RunPath(CausalGqaAttention, in, at::kFloat),
                       RunPath(ReferenceAttention, in, at::kFloat)),
              1e-5)
        << "T=" << t;
  }
}

TEST(Attention, Bf16NoWorseThanReference) {
  uint64_t seed = 21;
  for (const Shape& s : kShapes) {
    const Inputs in = MakeInputs(s.b, s.t, s.h, s.n_kv, s.d, seed++);
    // The exact answer for the bf16-rounded inputs.
    Inputs rounded = in;
    rounded.q = in.q.to(at::kBFloat16).to(at::kDouble);
    rounded.k = in.k.to(at::kBFloat16).to(at::kDouble);
    rounded.v = in.v.to(at::kBFloat16).to(at::kDouble);
    rounded.dout = in.dout.to(at::kBFloat16).to(at::kDouble);
    const Result exact = RunPath(ReferenceAttention, rounded, at::kDouble);
    const double ref_err = WorstErr(RunPath(ReferenceAttention, in, at::kBFloat16), exact);
    for (const AttentionFn& fn :
         {AttentionFn(Grouped), AttentionFn(Grouped16), AttentionFn(Blockwise16)}) {
      const double err = WorstErr(RunPath(fn, in, at::kBFloat16), exact);
      EXPECT_LT(err, 3e-2) << "T=" << s.t << " H=" << s.h << " K=" << s.n_kv;
      EXPECT_LT(err, 2 * ref_err + 4e-3)
          << "reference error " << ref_err << ", T=" << s.t << " H=" << s.h << " K=" << s.n_kv;
    }
  }
}

TEST(Attention, WrongHeadMappingIsCaught) {
  // Query head h on kv head h % K instead of h / G: the comparison must fail by far.
  const Inputs in = MakeInputs(2, 40, 4, 2, 8, 7);
  const auto wrong = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const at::Tensor perm = at::tensor({0, 2, 1, 3}, at::kLong);
    return GroupedAttention(q.index_select(2, perm), k, v, 16).index_select(2, perm);
  };
  EXPECT_GT(WorstErr(RunPath(wrong, in, at::kDouble), RunPath(ReferenceAttention, in, at::kDouble)),
            1e-2);
}

TEST(Attention, BlockwiseIsBitIdenticalRunToRun) {
  const Inputs in = MakeInputs(2, 40, 8, 2, 16, 3);
  const Result a = RunPath(Blockwise16, in, at::kFloat);
  const Result b = RunPath(Blockwise16, in, at::kFloat);
  EXPECT_TRUE(at::equal(a.out, b.out));
  EXPECT_TRUE(at::equal(a.dq, b.dq));
  EXPECT_TRUE(at::equal(a.dk, b.dk));
  EXPECT_TRUE(at::equal(a.dv, b.dv));
}

TEST(Attention, BlockwiseBitsDoNotDependOnThreadCount) {
  const Inputs in = MakeInputs(2, 40, 8, 2, 16, 4);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const Result one = RunPath(Blockwise16, in, at::kFloat);
  at::set_num_threads(2);
  const Result two = RunPath(Blockwise16, in, at::kFloat);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(one.out, two.out));
  EXPECT_TRUE(at::equal(one.dq, two.dq));
  EXPECT_TRUE(at::equal(one.dk, two.dk));
  EXPECT_TRUE(at::equal(one.dv, two.dv));
}

}  // namespace
}  // namespace tenax::model
