#include "tenax/data/loader.h"

#include <gtest/gtest.h>

#include <set>

namespace tenax::data {
namespace {

// Token i of the stream is i % 1000, so a window's first input identifies it.
TokenStream Counting(int64_t n) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 1000);
  return TokenStream::FromVector(std::move(v), 1000, std::nullopt, "counting");
}

bool SameBatch(const Batch& a, const Batch& b) {
  return a.inputs == b.inputs && a.targets == b.targets && a.batch == b.batch &&
         a.seq_len == b.seq_len;
}

TEST(BatchLoader, WindowsShiftTargetsByOne) {
  Result<BatchLoader> l = BatchLoader::Create(Counting(101), 10, 3, 1);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->windows_per_epoch(), 10);  // (101 - 1) / 10
  Batch b = l->Next();
  ASSERT_EQ(b.batch, 3);
  ASSERT_EQ(b.seq_len, 10);
  ASSERT_EQ(b.inputs.size(), 30u);
  for (int r = 0; r < 3; ++r) {
    const int64_t start = b.inputs[r * 10];
    EXPECT_EQ(start % 10, 0);  // windows start at multiples of seq_len
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(b.inputs[r * 10 + t], start + t);
      EXPECT_EQ(b.targets[r * 10 + t], start + t + 1);
    }
  }
  EXPECT_EQ(l->position(), 3);
}

TEST(BatchLoader, DeterministicAndSeedDependent) {
  auto first_batches = [](uint64_t seed) {
    BatchLoader l = std::move(BatchLoader::Create(Counting(5001), 16, 4, seed)).value();
    std::vector<int64_t> starts;
    for (int i = 0; i < 5; ++i) {
      Batch b = l.Next();
      for (int r = 0; r < 4; ++r) starts.push_back(b.inputs[r * 16]);
    }
    return starts;
  };
  EXPECT_EQ(first_batches(3), first_batches(3));
  EXPECT_NE(first_batches(3), first_batches(4));
}

TEST(BatchLoader, SeekContinuesTheExactSequence) {
  TokenStream s = Counting(20001);
  BatchLoader a = std::move(BatchLoader::Create(s, 32, 8, 77)).value();
  std::vector<Batch> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(a.Next());

  BatchLoader b = std::move(BatchLoader::Create(s, 32, 8, 77)).value();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(SameBatch(b.Next(), ten[i]));
  const int64_t pos = b.position();
  EXPECT_EQ(pos, 40);
  BatchLoader c = std::move(BatchLoader::Create(s, 32, 8, 77)).value();
  c.Seek(pos);
  for (int i = 5; i < 10; ++i) EXPECT_TRUE(SameBatch(c.Next(), ten[i])) << i;
}

TEST(BatchLoader, EveryWindowOncePerEpochAndEpochsDiffer) {
  // 37 windows, batch 5: batches straddle epoch boundaries.
  Result<BatchLoader> l = BatchLoader::Create(Counting(37 * 8 + 1), 8, 5, 9);
  ASSERT_TRUE(l.ok());
  const int64_t w = l->windows_per_epoch();
  ASSERT_EQ(w, 37);
  std::vector<int64_t> order;
  while (static_cast<int64_t>(order.size()) < 3 * w) {
    Batch b = l->Next();
    for (int r = 0; r < 5; ++r) order.push_back(b.inputs[r * 8] / 8);
  }
  for (int e = 0; e < 3; ++e) {
    std::set<int64_t> seen(order.begin() + e * w, order.begin() + (e + 1) * w);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), w) << "epoch " << e;
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), w - 1);
  }
  EXPECT_FALSE(std::equal(order.begin(), order.begin() + w, order.begin() + w));
  EXPECT_EQ(l->epoch(), static_cast<int64_t>(order.size()) / w);
  // The permutation depends only on (seed, epoch).
  EXPECT_EQ(EpochPermutation(9, 1, 37),
            std::vector<int64_t>(order.begin() + w, order.begin() + 2 * w));
}

TEST(BatchLoader, RanksPartitionEachGlobalStep) {
  TokenStream s = Counting(64 * 4 + 1);  // 64 windows of 4
  const int world = 4, batch = 2;
  std::vector<BatchLoader> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::move(BatchLoader::Create(s, 4, batch, 5, r, world)).value());
  }
  BatchLoader single = std::move(BatchLoader::Create(s, 4, batch * world, 5)).value();
  std::set<int64_t> seen;
  for (int step = 0; step < 8; ++step) {  // 8 steps * 8 windows = one epoch
    Batch whole = single.Next();
    for (int r = 0; r < world; ++r) {
      Batch b = ranks[r].Next();
      // Rank r's rows are rows [r*B, (r+1)*B) of the equivalent single-rank batch.
      for (int i = 0; i < batch * 4; ++i) {
        EXPECT_EQ(b.inputs[i], whole.inputs[r * batch * 4 + i]);
      }
      for (int row = 0; row < batch; ++row) {
        EXPECT_TRUE(seen.insert(b.inputs[row * 4] / 4).second) << "window seen twice";
      }
      EXPECT_EQ(ranks[r].position(), (step + 1) * batch * world);
    }
  }
  EXPECT_EQ(seen.size(), 64u);
}

TEST(BatchLoader, TooShortStreamNamesSizes) {
  Result<BatchLoader> l = BatchLoader::Create(Counting(100), 128, 1, 0);
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("100 tokens"), std::string::npos) << l.status().message();
  EXPECT_NE(l.status().message().find("seq_len"), std::string::npos);
  EXPECT_NE(l.status().message().find("at most 99"), std::string::npos);
  EXPECT_FALSE(BatchLoader::Create(Counting(1000), 8, 1, 0, 2, 2).ok());  // rank >= world
}

TEST(EvalLoader, SequentialWindowsUpToBudget) {
  Result<EvalLoader> e = EvalLoader::Create(Counting(1001), 10, 4, 55);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->num_windows(), 5);  // 55 / 10
  std::vector<int64_t> starts, rows;
  while (std::optional<Batch> b = e->Next()) {
    rows.push_back(b->batch);
    for (int64_t r = 0; r < b->batch; ++r) {
      starts.push_back(b->inputs[r * 10]);
      EXPECT_EQ(b->targets[r * 10 + 9], b->inputs[r * 10] + 10);
    }
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 10, 20, 30, 40}));
  e->Reset();
  EXPECT_TRUE(e->Next().has_value());

  // The budget is capped by the stream: 100 windows available.
  EXPECT_EQ(EvalLoader::Create(Counting(1001), 10, 4, 1 << 20)->num_windows(), 100);
}

TEST(EvalLoader, RanksGetEqualDisjointShares) {
  std::set<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    EvalLoader e = std::move(EvalLoader::Create(Counting(1001), 10, 2, 100, r, 3)).value();
    EXPECT_EQ(e.num_windows(), 3);  // 10 windows rounded down to 9
    while (std::optional<Batch> b = e.Next()) {
      for (int64_t row = 0; row < b->batch; ++row) seen.insert(b->inputs[row * 10] / 10);
    }
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

}  // namespace
}  // namespace tenax::data
