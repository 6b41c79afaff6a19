// The silent-data-corruption check's pieces (sdc_check.h): the verdict over random faulty ranks
// and ring sizes, the undecided case, the monitor's digests and injected corruption on real
// tensors, and the record file. The whole check, run by tenax launch on 4 ranks with each kind of
// injected corruption, is tests/sdc_e2e_test.cc.
#include "tenax/train/sdc_check.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tenax/core/fs.h"
#include "tenax/core/run_paths.h"
#include "tenax/core/temp_dir.h"

namespace tenax::train {
namespace {

using testing::TempDir;

ComputeDigest D(uint32_t grads, double loss = 2.5) { return {loss, grads, 3}; }

// Rank 0's fault injector for `spec` (null when it has none), recording into `dir`.
std::unique_ptr<protocol::FaultInjector> Injector(const TempDir& dir, const std::string& spec) {
  protocol::RankContext ctx;
  ctx.supervised = true;
  ctx.heartbeat_dir = dir.path();
  ctx.inject = spec;
  auto f = protocol::FaultInjector::Create(ctx, 0, nullptr);
  return f.ok() ? std::move(*f) : nullptr;
}

// Digests of one check where rank `faulty` (or none, -1) computes wrong results, as a defective
// device does: its own step and every replay it runs differ from the truth, each differently.
struct Check {
  std::vector<ComputeDigest> own, replay1, replay2;
};
Check Simulate(int n, int faulty, bool own_wrong = true, bool replays_wrong = true) {
  Check c;
  auto truth = [](int slot) { return D(1000 + static_cast<uint32_t>(slot)); };
  auto wrong = [](int slot, int round) {
    return D(5000 + 10 * static_cast<uint32_t>(slot) + round);
  };
  for (int r = 0; r < n; ++r) {
    const int s1 = (r - 1 + n) % n, s2 = (r - 2 + n) % n;
    c.own.push_back(r == faulty && own_wrong ? wrong(r, 0) : truth(r));
    c.replay1.push_back(r == faulty && replays_wrong ? wrong(s1, 1) : truth(s1));
    c.replay2.push_back(r == faulty && replays_wrong ? wrong(s2, 2) : truth(s2));
  }
  return c;
}

TEST(SdcJudge, NamesTheFaultyRankInEveryRandomTrial) {
  std::mt19937 rng(20261129);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = std::uniform_int_distribution<int>(3, 16)(rng);
    const int faulty = std::uniform_int_distribution<int>(0, n - 1)(rng);
    const int mode = trial % 3;  // wrong everywhere, only in its own step, only in its replays
    const Check c = Simulate(n, faulty, mode != 2, mode != 1);
    const std::vector<int> ring = Rings(n, 1)[0];
    EXPECT_FALSE(Mismatched(ring, c.own, c.replay1).empty()) << "trial " << trial;
    const SdcVerdict v = Judge(ring, c.own, c.replay1, c.replay2);
    EXPECT_EQ(v.faulty, std::vector<int>{faulty})
        << "trial " << trial << ": n " << n << ", mode " << mode << ": " << v.reasoning;
  }
}

TEST(SdcJudge, AgreeingRanksPassAndThreeWayDisagreementNamesNobody) {
  const Check clean = Simulate(4, -1);
  EXPECT_TRUE(Mismatched(Rings(4, 1)[0], clean.own, clean.replay1).empty());
  Check c = Simulate(3, -1);
  c.own[0] = D(1);
  c.replay1[1] = D(2);
  c.replay2[2] = D(3);
  const std::vector<int> ring = Rings(3, 1)[0];
  EXPECT_EQ(Mismatched(ring, c.own, c.replay1), std::vector<int>{0});
  const SdcVerdict v = Judge(ring, c.own, c.replay1, c.replay2);
  EXPECT_TRUE(v.faulty.empty());
  EXPECT_NE(v.reasoning.find("all differ"), std::string::npos) << v.reasoning;
}

// Under TP or PP each position of the TP/PP group has its own ring over the data-parallel index
// (rank = dp_index x copies + c): a faulty rank is named within its ring, by rank.
TEST(SdcJudge, EachTensorParallelPositionHasItsOwnRing) {
  const std::vector<std::vector<int>> rings = Rings(3, 2);
  ASSERT_EQ(rings.size(), 2u);
  EXPECT_EQ(rings[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(rings[1], (std::vector<int>{1, 3, 5}));
  // Rank 3 (dp index 1, TP rank 1) is faulty; ring 1 replays 1 -> 3 -> 5 -> 1.
  std::vector<ComputeDigest> own, replay1, replay2;
  for (int r = 0; r < 6; ++r) {
    own.push_back(D(100 + r));
    replay1.push_back(D(100 + (r + 4) % 6));  // the rank two before: the one before in the ring
    replay2.push_back(D(100 + (r + 2) % 6));
  }
  own[3] = D(1);
  replay1[3] = D(2);
  replay2[3] = D(3);
  EXPECT_TRUE(Mismatched(rings[0], own, replay1).empty());
  EXPECT_EQ(Mismatched(rings[1], own, replay1), (std::vector<int>{1, 3}));
  const SdcVerdict v = Judge(rings[1], own, replay1, replay2);
  EXPECT_EQ(v.faulty, std::vector<int>{3}) << v.reasoning;
  EXPECT_NE(v.reasoning.find("rank 5"), std::string::npos) << v.reasoning;
}

// Who replays whom: the ring holding a rank, and the ranks after and before it, wrapping around
// (a live epoch's ring is its members, not 0..n-1).
TEST(SdcJudge, RingsAreWalkedBothWays) {
  const std::vector<std::vector<int>> rings = Rings(3, 2);  // {0, 2, 4} and {1, 3, 5}
  EXPECT_EQ(RingOf(rings, 3), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(RingAfter(RingOf(rings, 4), 4, 1), 0);
  EXPECT_EQ(RingAfter(RingOf(rings, 4), 4, 2), 2);
  EXPECT_EQ(RingAfter(RingOf(rings, 1), 1, -1), 5);
  EXPECT_EQ(RingAfter(RingOf(rings, 1), 1, -2), 3);
  const std::vector<int> members = {0, 2, 3};  // rank 1 lost
  EXPECT_EQ(RingAfter(members, 0, -1), 3);
  EXPECT_EQ(RingAfter(members, 3, 1), 0);
}

TEST(SdcDigest, ComparesBitPatterns) {
  EXPECT_EQ(D(7, std::nan("")), D(7, std::nan("")));
  EXPECT_NE(D(7, 0.0), D(7, -0.0));
  EXPECT_NE(D(7), D(8));
  EXPECT_NE(D(7, 2.5), D(7, 2.5000000000000004));
}

// With a tolerance: the loss, the norm and the projection within it of the norm; a NaN loss
// agrees only with a NaN, and the bucket count must match.
TEST(SdcDigest, AToleranceComparesTheStatistics) {
  ComputeDigest a = D(7);
  a.sq = 100;  // norm 10
  a.proj = 3;
  ComputeDigest b = a;
  b.grads = 8;  // other bits: the tolerance looks at the statistics only
  EXPECT_NE(a, b);
  EXPECT_TRUE(Agree(a, b, 1e-6));
  EXPECT_EQ(Disagreement(a, b), 0);
  b.proj = 3 + 5e-6;  // 5e-7 of the norm
  EXPECT_TRUE(Agree(a, b, 1e-6));
  EXPECT_FALSE(Agree(a, b, 1e-7));
  EXPECT_NEAR(Disagreement(a, b), 5e-7, 1e-12);
  b = a;
  b.sq = 100 * (1 + 4e-6);  // the norm 2e-6 apart
  EXPECT_FALSE(Agree(a, b, 1e-6));
  EXPECT_TRUE(Agree(a, b, 1e-5));
  b = a;
  b.loss = 2.5 * (1 + 2e-6);
  EXPECT_FALSE(Agree(a, b, 1e-6));
  b = a;
  b.buckets = 4;
  EXPECT_FALSE(Agree(a, b, 0.1));
  b = a;
  b.loss = std::nan("");
  EXPECT_FALSE(Agree(a, b, 0.1));
  a.loss = std::nan("");
  EXPECT_TRUE(Agree(a, b, 0.1));
  ComputeDigest zero = D(7), also_zero = D(9);  // no gradient at all
  EXPECT_TRUE(Agree(zero, also_zero, 1e-6));
  EXPECT_FALSE(Agree(zero, also_zero, 0));
}

// The statistics on real buckets: noise of 1e-7 in every element (what a kernel that sums in
// another order does) stays far inside 1e-5 while the bits differ; the injected fault (the top
// mantissa bit of an element of 8 among a thousand of spread 1) moves the projection by a tenth
// of the norm; a bucket's elements in another order change the projection.
TEST(SdcMonitor, StatisticsSeeNoiseBelowTheToleranceAndAFlippedBitAboveIt) {
  at::Generator gen = at::detail::createCPUGenerator(7);
  at::Tensor g = at::normal(0.0, 1.0, {1000}, gen, at::TensorOptions().dtype(at::kFloat));
  g[0] = 8.0f;
  const at::Tensor noisy = g * (1 + 1e-7 * at::normal(0.0, 1.0, {1000}, gen, g.options()));
  ASSERT_FALSE(noisy.equal(g));
  auto digest = [](SdcMonitor& m, int64_t step, const std::vector<at::Tensor>& buckets) {
    m.BeginPass(step);
    m.Arm();
    for (const at::Tensor& b : buckets) m.OnLocalGradients("unit", b.clone());
    return m.Disarm(1.25);
  };
  SdcMonitor m(nullptr, /*statistics=*/true);
  const at::Tensor tail = at::ones({3000000}, at::kFloat).div_(3000);  // longer than the signs
  const ComputeDigest clean = digest(m, 1, {g, tail});
  const double norm = std::sqrt(g.to(at::kDouble).pow(2).sum().item<double>() +
                                tail.to(at::kDouble).pow(2).sum().item<double>());
  EXPECT_NEAR(std::sqrt(clean.sq), norm, 1e-9);
  EXPECT_EQ(digest(m, 1, {g, tail}), clean);
  EXPECT_EQ(digest(m, 1, {g, tail}).proj, clean.proj);
  const ComputeDigest noise = digest(m, 1, {noisy, tail});
  EXPECT_NE(noise, clean);
  EXPECT_LT(Disagreement(noise, clean), 1e-6);
  EXPECT_TRUE(Agree(noise, clean, 1e-5));
  EXPECT_NE(digest(m, 1, {g.flip(0), tail}).proj, clean.proj);

  TempDir dir;
  const auto faults = Injector(dir, "sdc:rank=0:step=3");
  ASSERT_NE(faults, nullptr);
  SdcMonitor bad(faults.get(), /*statistics=*/true);
  EXPECT_EQ(digest(bad, 2, {g, tail}), clean);
  const ComputeDigest flipped = digest(bad, 3, {g, tail});  // 8 becomes 12
  EXPECT_GT(Disagreement(flipped, clean), 0.05);
  EXPECT_FALSE(Agree(flipped, clean, 1e-3));
  // Without statistics the digest has none (and compares its bits).
  SdcMonitor plain(nullptr);
  const ComputeDigest bits = digest(plain, 1, {g});
  EXPECT_EQ(bits.sq, 0);
  EXPECT_EQ(bits.proj, 0);
  EXPECT_EQ(bits.ToString().find("norm"), std::string::npos);
  EXPECT_NE(clean.ToString().find(" norm "), std::string::npos);
}

// Noisy replays on every rank and one defective rank: with a tolerance the judge names it, and
// no rank when only noise differs.
TEST(SdcJudge, NamesTheFaultyRankAmongNoisyReplays) {
  std::mt19937 rng(20261202);
  std::normal_distribution<double> noise(0.0, 1e-8);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = std::uniform_int_distribution<int>(3, 12)(rng);
    const int faulty = trial % 4 == 3 ? -1 : std::uniform_int_distribution<int>(0, n - 1)(rng);
    auto value = [&](int slot, bool wrong) {
      ComputeDigest d = D(static_cast<uint32_t>(rng()));  // every computation's bits differ
      d.loss = 2.0 + 0.01 * slot + noise(rng);
      d.sq = 400 * (1 + slot) * (1 + noise(rng));
      d.proj = 5.0 * slot + noise(rng) + (wrong ? 0.5 : 0.0);
      return d;
    };
    std::vector<ComputeDigest> own, replay1, replay2;
    for (int r = 0; r < n; ++r) {
      own.push_back(value(r, r == faulty));
      replay1.push_back(value((r - 1 + n) % n, r == faulty));
      replay2.push_back(value((r - 2 + n) % n, r == faulty));
    }
    const std::vector<int> ring = Rings(n, 1)[0];
    if (faulty < 0) {
      EXPECT_TRUE(Mismatched(ring, own, replay1, 1e-6).empty()) << "trial " << trial;
      EXPECT_FALSE(Mismatched(ring, own, replay1, 0).empty()) << "bitwise, noise is a mismatch";
      continue;
    }
    const SdcVerdict v = Judge(ring, own, replay1, replay2, 1e-6);
    EXPECT_EQ(v.faulty, std::vector<int>{faulty}) << "trial " << trial << ": " << v.reasoning;
  }
}

// The same gradients give the same digest; an armed monitor covers every bucket in order; an
// injected grad fault flips exactly one bit of the pass's first bucket.
TEST(SdcMonitor, DigestsBucketsAndPlaysAGradFault) {
  const at::Tensor a = at::arange(12, at::kFloat).div_(7), b = at::ones({5}, at::kFloat);
  SdcMonitor m(nullptr);
  m.BeginPass(1);
  m.Arm();
  m.OnLocalGradients("layers.1", a.clone());
  m.OnLocalGradients("root", b.clone());
  const ComputeDigest d1 = m.Disarm(1.5);
  m.BeginPass(1);
  m.Arm();
  m.OnLocalGradients("layers.1", a.clone());
  m.OnLocalGradients("root", b.clone());
  EXPECT_EQ(m.Disarm(1.5), d1);
  EXPECT_EQ(d1.buckets, 2);
  m.Arm();
  m.OnLocalGradients("root", b.clone());
  m.OnLocalGradients("layers.1", a.clone());
  EXPECT_NE(m.Disarm(1.5), d1);  // order matters: the reduction order is part of the digest

  TempDir dir;
  const auto faults = Injector(dir, "sdc:rank=0:step=3");
  ASSERT_NE(faults, nullptr);
  SdcMonitor bad(faults.get());
  bad.BeginPass(2);  // before the fault's step: computes correctly
  bad.Arm();
  bad.OnLocalGradients("layers.1", a.clone());
  bad.OnLocalGradients("root", b.clone());
  EXPECT_EQ(bad.Disarm(1.5), d1);
  bad.BeginPass(3);
  bad.Arm();
  at::Tensor g = a.clone(), h = b.clone();
  bad.OnLocalGradients("layers.1", g);
  bad.OnLocalGradients("root", h);
  EXPECT_NE(bad.Disarm(1.5), d1);
  const at::Tensor diff = g.view(at::kInt).bitwise_xor(a.view(at::kInt));
  EXPECT_EQ(diff.ne(0).sum().item<int64_t>(), 1);  // one element ...
  EXPECT_EQ(diff[0].item<int32_t>(), 1 << 22);     // ... one bit (the mantissa's top)
  EXPECT_TRUE(h.equal(b));                         // the first bucket only
}

// A weight fault: the rank's own parameters (DDP) flip once and stay flipped (corrupted memory,
// updated like any other value); a freshly gathered copy (FSDP) flips on every gather.
TEST(SdcMonitor, AWeightFaultCorruptsMemoryOnceAndEveryGather) {
  TempDir dir;
  const auto faults = Injector(dir, "sdc:rank=0:step=2:where=weight");
  ASSERT_NE(faults, nullptr);
  SdcMonitor own(faults.get());
  at::Tensor w = at::full({4}, 1.0f);
  own.BeginPass(1);  // before the fault's step
  own.OnBlockWeights(0, {w}, /*gathered=*/false);
  EXPECT_FLOAT_EQ(w[0].item<float>(), 1.0f);
  own.BeginPass(2);
  own.OnBlockWeights(1, {w}, false);  // another block: untouched
  EXPECT_FLOAT_EQ(w[0].item<float>(), 1.0f);
  own.OnBlockWeights(0, {w}, false);
  EXPECT_FLOAT_EQ(w[0].item<float>(), 1.5f);  // 1.0 with the mantissa's top bit flipped
  EXPECT_FLOAT_EQ(w[1].item<float>(), 1.0f);  // one element
  own.BeginPass(3);
  own.OnBlockWeights(0, {w}, false);
  EXPECT_FLOAT_EQ(w[0].item<float>(), 1.5f);  // not flipped back

  SdcMonitor gathering(faults.get());
  gathering.BeginPass(3);
  for (int gather = 0; gather < 3; ++gather) {
    at::Tensor copy = at::full({4}, 0.75f);  // the clean shards, gathered again
    gathering.OnBlockWeights(0, {copy}, /*gathered=*/true);
    EXPECT_FLOAT_EQ(copy[0].item<float>(), 0.5f) << "gather " << gather;  // 0.75 flipped
  }
}

TEST(SdcRecord, AppendsAndReadsBackAndRefusesAForeignFile) {
  TempDir dir;
  EXPECT_TRUE(ReadSdcRecords(dir.path())->empty());
  SdcRecord r;
  r.step = 8;
  r.rank = 2;
  r.host = "node-7";
  r.mismatched = {1, 2};
  r.own = D(5).ToString();
  r.replayed_by = 3;
  ASSERT_TRUE(AppendSdcRecord(dir.path(), r).ok());
  r.step = 12;
  ASSERT_TRUE(AppendSdcRecord(dir.path(), r).ok());
  Result<std::vector<SdcRecord>> back = ReadSdcRecords(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].step, 8);
  EXPECT_EQ((*back)[1].step, 12);
  EXPECT_EQ((*back)[0].host, "node-7");
  EXPECT_EQ((*back)[0].mismatched, (std::vector<int>{1, 2}));
  EXPECT_EQ((*back)[0].own, "loss 2.5 grads 00000005/3");
  ASSERT_TRUE(LocalFs().WriteFileAtomic(RunPaths(dir.path()).sdc(), "[1, 2]").ok());
  EXPECT_EQ(ReadSdcRecords(dir.path()).status().code(), StatusCode::kDataError);
  EXPECT_EQ(AppendSdcRecord(dir.path(), r).code(), StatusCode::kDataError);  // never overwritten
}

}  // namespace
}  // namespace tenax::train
