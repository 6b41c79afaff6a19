#include "tenax/plan/search.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "tenax/plan/testing.h"
#include "tenax/plan/units.h"

namespace tenax::plan {
namespace {

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }

Workload Load(const std::string& preset, int64_t seq, int64_t seqs) {
  int64_t ignored = 0;
  return *MakeWorkload(*LoadPlanModel(preset, &ignored), seq, seqs * seq);
}

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

// Independent enumeration of every layout by brute force (no caching, no early pruning), with
// the search's two documented restrictions: virtual stages keep the v = 1 layer balance, and
// context chunks hold >= 256 tokens.
Candidate BruteForceBest(const Workload& w, const HardwareProfile& hw, int64_t gpus) {
  Candidate best;
  best.time.step = 1e300;
  const int64_t L = w.model.n_layers;
  for (int64_t tp : Divisors(gpus))
    for (int64_t cp : Divisors(gpus / tp))
      for (int64_t pp : Divisors(gpus / tp / cp))
        for (int64_t ds : Divisors(gpus / tp / cp / pp))
          for (int64_t v = 1; v <= 16; ++v)
            for (int64_t mbs = 1; mbs <= w.sequences(); ++mbs)
              for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
                for (bool fp8 : {false, true})
                  for (bool reshard : {false, true}) {
                    Layout l;
                    l.tp = tp;
                    l.cp = cp;
                    l.pp = pp;
                    l.vpp = v;
                    l.dp_shard = ds;
                    l.dp_replicate = gpus / tp / cp / pp / ds;
                    l.micro_batch = mbs;
                    if (w.sequences() % (l.dp() * mbs) != 0) continue;
                    l.micro_batches = w.sequences() / (l.dp() * mbs);
                    l.recompute = r;
                    l.fp8 = fp8;
                    l.reshard = reshard;
                    if (ds == 1 && !reshard) continue;
                    if (v * ((L + pp * v - 1) / (pp * v)) != (L + pp - 1) / pp) continue;
                    auto c = EvaluateLayout(w, hw, l);
                    if (!c.ok() || c->memory.total() > hw.hbm_bytes) continue;
                    if (c->time.step < best.time.step) best = *c;
                  }
  return best;
}

TEST(Search, FindsTheBruteForceOptimum) {
  const HardwareProfile hw = H100();
  // Small enough to enumerate exhaustively; big enough that memory and parallelism both matter.
  const Workload w = Load("llama3.2-1b", 4096, 32);
  for (int64_t gpus : {1, 8, 16}) {
    SearchOptions o;
    o.gpus = gpus;
    o.top_k = 3;
    auto r = SearchLayouts(w, hw, o);
    ASSERT_TRUE(r.ok());
    ASSERT_FALSE(r->best.empty()) << gpus;
    const Candidate brute = BruteForceBest(w, hw, gpus);
    EXPECT_DOUBLE_EQ(r->best.front().time.step, brute.time.step)
        << gpus << ": search " << LayoutName(r->best.front().layout) << " vs brute force "
        << LayoutName(brute.layout);
  }
}

TEST(Search, ResultsFitObeyTheConstraintsAndAreSorted) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-70b", 8192, 256);
  SearchOptions o;
  o.gpus = 256;
  o.top_k = 10;
  o.fix = *ParseLayoutConstraints("tp=8,fp8=no");
  auto r = SearchLayouts(w, hw, o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->best.size(), 10u);
  for (size_t i = 0; i < r->best.size(); ++i) {
    const Candidate& c = r->best[i];
    EXPECT_EQ(c.layout.tp, 8);
    EXPECT_FALSE(c.layout.fp8);
    EXPECT_EQ(c.layout.gpus(), 256);
    EXPECT_LE(c.memory.total(), hw.hbm_bytes);
    EXPECT_EQ(LayoutProblem(w, hw, c.layout), "") << LayoutName(c.layout);
    if (i > 0) {
      EXPECT_LE(r->best[i - 1].time.step, c.time.step);
    }
  }
  EXPECT_EQ(r->evaluated, r->fitting + r->dropped["does not fit in GPU memory"]);
}

TEST(Search, NothingFitsIsAResultWithTheReason) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-405b", 8192, 16);
  SearchOptions o;
  o.gpus = 8;
  auto r = SearchLayouts(w, hw, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->best.empty());
  EXPECT_GT(r->dropped["does not fit in GPU memory"], 0);
  ASSERT_EQ(r->leanest_not_fitting.size(), 1u);
  EXPECT_GT(r->leanest_not_fitting.front().memory.total(), hw.hbm_bytes);
}

TEST(Search, InvalidLayoutsNameTheirFactors) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-405b", 8192, 2048);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.dp_shard = 64;
  l.micro_batch = 2;
  l.micro_batches = 32;
  auto c = EvaluateLayout(w, hw, l);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dp (64) x micro-batch (2) x micro-batches (32) = 4096 != "
                                      "sequences per step (2048"),
            std::string::npos)
      << c.status().message();
  l.micro_batch = 1;
  l.tp = 3;
  EXPECT_FALSE(EvaluateLayout(w, hw, l).ok());
  l.tp = 8;
  l.vpp = 16;  // 16 x 16 = 256 virtual stages > 126 layers
  EXPECT_NE(LayoutProblem(w, hw, l).find("a virtual stage would be empty"), std::string::npos);
}

// The speed target is "under a second" for this search; the time is printed (and shown by
// `tenax plan`), not asserted, because shared test machines vary.
TEST(Search, FullSearch405BOn16384Gpus) {
  const HardwareProfile hw = H100();
  const Workload w = Load("llama3-405b", 8192, 2048);
  SearchOptions o;
  o.gpus = 16384;
  auto r = SearchLayouts(w, hw, o);
  ASSERT_TRUE(r.ok());
  std::printf("llama3-405b on 16384 x h100-sxm: %lld layouts evaluated, %lld fit, %.3f s\n",
              static_cast<long long>(r->evaluated), static_cast<long long>(r->fitting), r->seconds);
  EXPECT_GT(r->evaluated, 100000);
  ASSERT_FALSE(r->best.empty());
  EXPECT_GT(r->best.front().time.mfu, 0.3);
  EXPECT_LT(r->best.front().time.mfu, 0.9);
}

}  // namespace
}  // namespace tenax::plan
