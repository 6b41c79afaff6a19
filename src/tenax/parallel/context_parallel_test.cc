// Context parallelism against one rank: the sequence layout's arithmetic, ring attention's output
// and its gradients against the plain attention over the whole sequence (fp64, so that only a
// real error shows, and fp32 with its rounding), and the whole model's loss and gradients under
// CP against model::Llama (RoPE positions, the loss's mean), on 2 and 4 Gloo ranks.
#include "tenax/parallel/context_parallel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "tenax/model/attention.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/sharded_llama.h"
#include "tenax/parallel/testing.h"

namespace tenax::parallel {
namespace {

double MaxAbs(const at::Tensor& t) { return t.abs().max().item<double>(); }

TEST(ContextLayout, ChunksArePlacedHeadThenTailAndRoundTrip) {
  // T = 16 over 4 ranks: chunks of 2; rank 1 holds chunks 1 and 6.
  const at::Tensor pos = ContextPositions(16, 1, 4, at::kCPU);
  EXPECT_TRUE(at::equal(pos, at::tensor({2, 3, 12, 13}, at::kLong))) << pos;
  const at::Tensor x = at::arange(3 * 16, at::kLong).view({3, 16});
  std::vector<at::Tensor> shards;
  for (int r = 0; r < 4; ++r) {
    shards.push_back(ContextShard(x, r, 4));
    // The shard holds exactly the tokens at its positions.
    EXPECT_TRUE(at::equal(shards.back(), x.index_select(1, ContextPositions(16, r, 4, at::kCPU))));
  }
  EXPECT_TRUE(at::equal(ContextUnshard(shards), x));
  // Every position once over the ranks.
  std::vector<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    const at::Tensor p = ContextPositions(16, r, 4, at::kCPU);
    for (int64_t i = 0; i < p.numel(); ++i) seen.push_back(p[i].item<int64_t>());
  }
  std::sort(seen.begin(), seen.end());
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i);
}

TEST(ContextLayout, ProblemsNameTheFactors) {
  ModelSpec spec = testing::SmallLlamaSpec(2, false);
  EXPECT_TRUE(ContextParallelProblems(spec, 2, 1, 32).empty());
  auto odd = ContextParallelProblems(spec, 4, 1, 36);
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_NE(odd[0].find("training.seq_len (36) is not divisible by 2 * context_parallel (4) = 8"),
            std::string::npos)
      << odd[0];
  auto tp = ContextParallelProblems(spec, 2, 4, 36);  // 36 / 2 = 18, not a multiple of 4
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_NE(tp[0].find("is not divisible by tensor_parallel (4)"), std::string::npos) << tp[0];
  EXPECT_NE(tp[0].find("multiple of 16"), std::string::npos) << tp[0];
  spec.moe.n_experts = 4;
  spec.moe.top_k = 2;
  EXPECT_EQ(ContextParallelProblems(spec, 2, 1, 32).size(), 1u);
}

// Ring attention on one rank of the world (= the CP group) against the reference attention over
// the full sequence, forward and backward. Shapes from the environment: CP_T (sequence), CP_DTYPE.
void CheckRingAttention(Communicator& cp, int64_t t, at::ScalarType dtype, double tol) {
  const int r = cp.rank(), n = cp.size();
  constexpr int64_t kB = 2, kH = 4, kK = 2, kD = 8;
  at::Generator gen = at::detail::createCPUGenerator(11);  // the same tensors on every rank
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({kB, t, kH, kD}, gen, opt).to(dtype);
  const at::Tensor k = at::randn({kB, t, kK, kD}, gen, opt).to(dtype);
  const at::Tensor v = at::randn({kB, t, kK, kD}, gen, opt).to(dtype);
  const at::Tensor w = at::randn({kB, t, kH, kD}, gen, opt).to(dtype);  // d loss / d out

  at::Tensor qf = q.clone().set_requires_grad(true), kf = k.clone().set_requires_grad(true);
  at::Tensor vf = v.clone().set_requires_grad(true);
  const at::Tensor ref = model::ReferenceAttention(qf, kf, vf);
  (ref * w).sum().backward();

  at::Tensor ql = ContextShard(q, r, n).set_requires_grad(true);
  at::Tensor kl = ContextShard(k, r, n).set_requires_grad(true);
  at::Tensor vl = ContextShard(v, r, n).set_requires_grad(true);
  const at::Tensor out = RingAttention(ql, kl, vl, cp);
  ASSERT_EQ(out.sizes(), ql.sizes());
  EXPECT_EQ(out.scalar_type(), dtype);
  (out * ContextShard(w, r, n)).sum().backward();

  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> checks[] = {
      {"output", {out, ContextShard(ref, r, n)}},
      {"dq", {ql.grad(), ContextShard(qf.grad(), r, n)}},
      {"dk", {kl.grad(), ContextShard(kf.grad(), r, n)}},
      {"dv", {vl.grad(), ContextShard(vf.grad(), r, n)}}};
  for (const auto& [what, pair] : checks) {
    const double err =
        MaxAbs((pair.first - pair.second).to(at::kDouble)) / MaxAbs(pair.second.to(at::kDouble));
    EXPECT_LE(err, tol) << what << " on rank " << r << " of " << n << ", T " << t;
    if (r == 0) std::cout << "cp " << n << " T " << t << " " << what << ": " << err << "\n";
  }
}

TEST(ContextParallelWorker, DISABLED_RingAttention) {
  auto env = ReadDistEnv();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  auto groups = ProcessGroups::Connect(*env, std::chrono::seconds(30));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  Communicator& cp = (*groups)->world();
  // fp64: only a real error shows (observed ~1e-15). Chunks of 3 positions (odd, below one
  // sub-block), and of 300 (three sub-blocks of 128, the last short) at 2 ranks.
  CheckRingAttention(cp, 6 * cp.size(), at::kDouble, 1e-12);
  if (cp.size() == 2) CheckRingAttention(cp, 1200, at::kDouble, 1e-12);
  // fp32: the sums run in another order than the reference's softmax (observed ~1e-6).
  CheckRingAttention(cp, 8 * cp.size(), at::kFloat, 1e-5);
}

TEST(ContextParallel, RingAttentionMatchesFullAttentionOnTwoRanks) {
  auto codes = testing::RunRanks(2, "ContextParallelWorker.DISABLED_RingAttention");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(ContextParallel, RingAttentionMatchesFullAttentionOnFourRanks) {
  auto codes = testing::RunRanks(4, "ContextParallelWorker.DISABLED_RingAttention");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// The whole model: every rank runs its part of each sequence; the mean of the ranks' losses is
// the single model's loss, and the mean of their gradients its gradients (which needs RoPE at
// the tokens' global positions and the ring's keys of every rank).
TEST(ContextParallelWorker, DISABLED_ModelMatchesSingleRank) {
  auto env = ReadDistEnv();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  auto groups = ProcessGroups::Connect(*env, std::chrono::seconds(30));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  Communicator& cp = (*groups)->world();
  const int r = cp.rank(), n = cp.size();
  ModelSpec spec = testing::SmallLlamaSpec(2, /*tied=*/false);
  constexpr int64_t kSeq = 16;
  spec.max_seq_len = kSeq;
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor seq = at::randint(spec.vocab_size, {2, kSeq + 1}, gen, at::kLong);
  const at::Tensor tokens = seq.narrow(1, 0, kSeq).contiguous();
  const at::Tensor targets = seq.narrow(1, 1, kSeq).contiguous();

  model::Llama ref(spec, /*seed=*/1234, at::kCPU);
  const at::Tensor ref_loss = ref.Loss(tokens, targets);
  ref_loss.backward();

  std::unique_ptr<Communicator> tp = MakeLocalCommunicator();
  ShardedLlama local(spec, ref.params(), *tp, Ownership::All(spec), at::kCPU);
  local.SetContextParallel(&cp);
  const at::Tensor loss =
      local.Loss(ContextShard(tokens, r, n), ContextShard(targets, r, n), at::kFloat);
  loss.backward();
  at::Tensor mean = loss.detach().to(at::kDouble).reshape({1});
  cp.AllReduceSum(mean);
  EXPECT_NEAR(mean.item<double>() / n, ref_loss.item<double>(), 1e-5);

  std::map<std::string, at::Tensor> ref_grads;
  for (const auto& p : ref.params()) ref_grads[p.name] = p.tensor.grad();
  double worst = 0;
  for (const auto& p : local.params()) {
    at::Tensor g = p.tensor.grad().clone();
    cp.AllReduceSum(g);
    g.div_(n);
    const at::Tensor& want = ref_grads.at(p.name);
    const double err = MaxAbs(g - want) / MaxAbs(want);
    worst = std::max(worst, err);
    // fp32 on both sides, summed in other orders (ring blocks, per-rank means): observed 1e-6.
    EXPECT_LE(err, 1e-5) << p.name;
  }
  if (r == 0) std::cout << "cp " << n << ": worst gradient error / max|g| = " << worst << "\n";
}

TEST(ContextParallel, ModelMatchesSingleRankOnTwoRanks) {
  auto codes = testing::RunRanks(2, "ContextParallelWorker.DISABLED_ModelMatchesSingleRank");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(ContextParallel, ModelMatchesSingleRankOnFourRanks) {
  auto codes = testing::RunRanks(4, "ContextParallelWorker.DISABLED_ModelMatchesSingleRank");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
}  // namespace tenax::parallel
