// The chunked output projection + cross-entropy against the plain libtorch path
// (cross_entropy_loss(to_fp32(x W^T))): loss, d/dx and d/dW on random inputs, for fp64, fp32 and
// bf16 compute, one chunk and many (including a last chunk shorter than the rest), and through
// the whole model (Llama::Loss against cross-entropy of Llama::Logits). Tolerances:
//   fp64: 1e-12 relative (only the summation order differs);
//   fp32: 1e-5 relative on the loss, 1e-4 of the gradient's largest element;
//   bf16: the matmul inputs round the same way in both paths, so what differs is fp32 summation
//         order and, for dW, bf16 partial sums per chunk: 1e-4 on the loss, 2e-2 of the largest
//         gradient element (bf16 keeps 8 bits: ~4e-3 per rounding).
#include "tenax/model/fused_cross_entropy.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "tenax/model/llama.h"

namespace tenax::model {
namespace {

struct Case {
  at::Tensor loss, dx, dw;
};

// The plain path: full logits, then libtorch's cross-entropy.
Case Plain(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& targets,
           at::ScalarType dtype) {
  at::Tensor x = x0.to(dtype).detach().requires_grad_(true);
  at::Tensor w = w0.detach().clone().requires_grad_(true);
  at::Tensor logits = at::matmul(x, w.to(dtype).t());
  if (logits.scalar_type() != at::kDouble) logits = logits.to(at::kFloat);
  at::Tensor loss = at::cross_entropy_loss(logits, targets);
  auto g = torch::autograd::grad({loss}, {x, w});
  return {loss.detach(), g[0], g[1]};
}

Case Chunked(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& targets,
             at::ScalarType dtype, int64_t rows) {
  at::Tensor x = x0.to(dtype).detach().requires_grad_(true);
  at::Tensor w = w0.detach().clone().requires_grad_(true);
  at::Tensor loss = LinearCrossEntropy(x, w, targets, rows);
  auto g = torch::autograd::grad({loss}, {x, w});
  return {loss.detach(), g[0], g[1]};
}

double MaxRelErr(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
}

void Compare(at::ScalarType dtype, at::ScalarType master, int64_t n, int64_t v, int64_t c,
             int64_t rows, double loss_tol, double grad_tol) {
  at::Generator g = at::detail::createCPUGenerator(11);
  const auto opt = at::TensorOptions().dtype(master);
  at::Tensor x = at::normal(0.0, 1.0, {n, c}, g, opt);
  at::Tensor w = at::normal(0.0, 0.5, {v, c}, g, opt);
  at::Tensor targets = at::randint(0, v, {n}, g, at::TensorOptions().dtype(at::kLong));
  const Case want = Plain(x, w, targets, dtype);
  const Case got = Chunked(x, w, targets, dtype, rows);
  SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " rows " << rows);
  EXPECT_EQ(got.loss.scalar_type(), want.loss.scalar_type());
  EXPECT_EQ(got.dx.scalar_type(), want.dx.scalar_type());
  EXPECT_EQ(got.dw.scalar_type(), want.dw.scalar_type());
  EXPECT_LE(MaxRelErr(got.loss, want.loss), loss_tol);
  EXPECT_LE(MaxRelErr(got.dx, want.dx), grad_tol);
  EXPECT_LE(MaxRelErr(got.dw, want.dw), grad_tol);
}

TEST(LinearCrossEntropy, MatchesPlainPathFp64) {
  for (int64_t rows : {0, 1, 7, 50})
    Compare(at::kDouble, at::kDouble, 50, 37, 16, rows, 1e-12, 1e-12);
}

TEST(LinearCrossEntropy, MatchesPlainPathFp32) {
  for (int64_t rows : {0, 13, 64, 300})
    Compare(at::kFloat, at::kFloat, 300, 1000, 32, rows, 1e-5, 1e-4);
}

TEST(LinearCrossEntropy, MatchesPlainPathBf16) {
  for (int64_t rows : {0, 13, 64})
    Compare(at::kBFloat16, at::kFloat, 300, 1000, 32, rows, 1e-4, 2e-2);
}

// A wrong gradient is caught: the comparison is not vacuous (targets shifted by one give a
// different loss and gradient).
TEST(LinearCrossEntropy, DetectsWrongTargets) {
  at::Generator g = at::detail::createCPUGenerator(3);
  at::Tensor x = at::normal(0.0, 1.0, {40, 8}, g, at::TensorOptions().dtype(at::kDouble));
  at::Tensor w = at::normal(0.0, 1.0, {20, 8}, g, at::TensorOptions().dtype(at::kDouble));
  at::Tensor t = at::randint(0, 20, {40}, g, at::TensorOptions().dtype(at::kLong));
  const Case want = Plain(x, w, t, at::kDouble);
  const Case got = Chunked(x, w, (t + 1).remainder(20), at::kDouble, 7);
  EXPECT_GT(MaxRelErr(got.loss, want.loss), 1e-3);
  EXPECT_GT(MaxRelErr(got.dw, want.dw), 1e-2);
}

// bf16 on the CPU takes cpu_kernels.h's loop, which indexes the logits by target: a target
// outside the vocabulary is refused as the composition's gather refuses it, naming the target.
TEST(LinearCrossEntropy, Bf16CpuRefusesATargetOutsideTheVocabulary) {
  const at::Tensor x = at::ones({4, 8}, at::kBFloat16), w = at::ones({20, 8}, at::kFloat);
  for (const int64_t bad : {int64_t{20}, int64_t{-1}}) {
    const at::Tensor t = at::tensor(std::vector<int64_t>{3, bad, 0, 1}, at::kLong);
    try {
      LinearCrossEntropy(x, w, t);
      ADD_FAILURE() << "target " << bad << " was accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("target " + std::to_string(bad) + " lies outside"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(
      LinearCrossEntropy(x, w, at::tensor(std::vector<int64_t>{3, 19, 0, 1}, at::kLong)));
}

// Without gradients (evaluation) the loss is the same and nothing is kept for backward.
TEST(LinearCrossEntropy, NoGradLossMatches) {
  at::Generator g = at::detail::createCPUGenerator(4);
  at::Tensor x = at::normal(0.0, 1.0, {30, 8}, g, at::TensorOptions().dtype(at::kFloat));
  at::Tensor w = at::normal(0.0, 1.0, {50, 8}, g, at::TensorOptions().dtype(at::kFloat));
  at::Tensor t = at::randint(0, 50, {30}, g, at::TensorOptions().dtype(at::kLong));
  const Case want = Plain(x, w, t, at::kFloat);
  at::NoGradGuard no_grad;
  at::Tensor loss = LinearCrossEntropy(x, w.requires_grad_(true), t, 7);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_LE(MaxRelErr(loss, want.loss), 1e-5);
}

TEST(CrossEntropyChunkRows, BoundsTheChunk) {
  EXPECT_EQ(CrossEntropyChunkRows(128256), 261);  // 261 x 128256 x 4 B <= 128 MiB
  EXPECT_GE(CrossEntropyChunkRows(4000), 8192);
  EXPECT_EQ(CrossEntropyChunkRows(int64_t{1} << 40), 1);
}

// Through the model, tied and untied: Llama::Loss (chunked) against cross-entropy of
// Llama::Logits (plain), loss and every parameter's gradient, fp32 and bf16 compute.
TEST(LinearCrossEntropy, LlamaLossMatchesLogitsPath) {
  for (bool tied : {false, true}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      ModelOptions o;
      o.preset = "debug-tiny";
      ModelSpec spec = *ResolveModelSpec(o, 257);
      spec.tie_embeddings = tied;
      Llama a(spec, 5, at::kCPU), b(spec, 5, at::kCPU);
      at::Generator g = at::detail::createCPUGenerator(9);
      at::Tensor tok = at::randint(0, 257, {2, 17}, g, at::TensorOptions().dtype(at::kLong));
      at::Tensor x = tok.narrow(1, 0, 16), y = tok.narrow(1, 1, 16);
      at::Tensor la = a.Loss(x, y, dtype);
      la.backward();
      at::Tensor logits = b.Logits(x, dtype);
      at::Tensor lb =
          at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
      lb.backward();
      const double tol = dtype == at::kFloat ? 1e-4 : 2e-2;
      SCOPED_TRACE(::testing::Message() << "tied " << tied << " dtype " << dtype);
      EXPECT_NEAR(la.item<double>(), lb.item<double>(), 1e-5 * lb.item<double>());
      for (size_t i = 0; i < a.params().size(); ++i) {
        EXPECT_LE(MaxRelErr(a.params()[i].tensor.grad(), b.params()[i].tensor.grad()), tol)
            << a.params()[i].name;
      }
    }
  }
}

}  // namespace
}  // namespace tenax::model
