#include "tenax/config/batch.h"

#include <gtest/gtest.h>

#include "tenax/config/config.h"

namespace tenax {
namespace {

TrainingOptions Training(int64_t local, int64_t accum, int64_t global) {
  TrainingOptions t;
  t.local_batch_size = local;
  t.grad_accum_steps = accum;
  t.global_batch_size = global;
  return t;
}

TEST(Batch, WithoutGlobalBatchTheProductIsTheBatch) {
  Result<BatchShape> b = ResolveBatch(Training(2, 3, 0), 4);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->global, 24);
  EXPECT_EQ(b->accum, 3);
  EXPECT_EQ(DescribeBatch(*b),
            "24 sequences (local_batch_size 2 x grad_accum_steps 3 x 4 data-parallel ranks)");
}

TEST(Batch, GlobalBatchDerivesAccumulationOnAnyDivisor) {
  for (int64_t dp : {1, 2, 4}) {
    Result<BatchShape> b = ResolveBatch(Training(2, 1, 8), dp);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->global, 8);
    EXPECT_EQ(b->accum, 4 / dp) << "dp " << dp;
    EXPECT_EQ(b->local * b->accum * b->data_parallel, 8);
  }
}

TEST(Batch, IndivisibleGlobalBatchNamesEveryFactor) {
  Result<BatchShape> b = ResolveBatch(Training(2, 1, 12), 4);
  ASSERT_FALSE(b.ok());
  const std::string& m = b.status().message();
  EXPECT_NE(m.find("training.global_batch_size (12 sequences)"), std::string::npos) << m;
  EXPECT_NE(m.find("training.local_batch_size (2) x 4 data-parallel ranks = 8"), std::string::npos)
      << m;
  // Smaller than one micro-batch per rank: accumulation would be 0.
  b = ResolveBatch(Training(4, 1, 4), 2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("= 8"), std::string::npos) << b.status().message();
  // Both set: accumulation cannot be both given and derived.
  b = ResolveBatch(Training(2, 2, 8), 2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("remove grad_accum_steps"), std::string::npos);
}

TEST(Batch, ConfigRejectsGlobalBatchWithAccumulation) {
  auto c = ParseConfig("[training]\nglobal_batch_size = 8\ngrad_accum_steps = 2\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("training.grad_accum_steps = 2 is invalid"),
            std::string::npos)
      << c.status().message();
  c = ParseConfig("[training]\nglobal_batch_size = -1\n", {}, "t.toml");
  ASSERT_FALSE(c.ok());
  c = ParseConfig("[training]\nglobal_batch_size = 8\n", {}, "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->training.global_batch_size, 8);
  // The writer keeps it, so a checkpoint's config round-trips.
  auto again = ParseConfig(ConfigToToml(*c), {}, "again.toml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->training.global_batch_size, 8);
}

BatchShape Saved(int64_t local, int64_t accum, int64_t dp) {
  return BatchShape{local, accum, dp, local * accum * dp};
}

TEST(Batch, ResumeOnFewerRanksKeepsTheGlobalBatch) {
  // The case: a 2-rank run (global 4) resumed on 1 rank without global_batch_size.
  std::vector<std::string> notes;
  Result<BatchShape> b = ResolveResumedBatch(Training(2, 1, 0), 1, Saved(2, 1, 2), &notes);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->global, 4);
  EXPECT_EQ(b->accum, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("keeping the run's global batch of 4 sequences with grad_accum_steps 2"),
            std::string::npos)
      << notes[0];
  // And on more ranks than it fits: an error naming the factors, not a silent change.
  notes.clear();
  b = ResolveResumedBatch(Training(2, 1, 0), 4, Saved(2, 1, 2), &notes);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("the checkpoint's global batch, 4 sequences"),
            std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("x 4 data-parallel ranks = 8"), std::string::npos)
      << b.status().message();
}

TEST(Batch, ResumeWithGlobalBatchSizeSaysWhatChanged) {
  std::vector<std::string> notes;
  // Same global batch on other ranks: one informational line.
  Result<BatchShape> b = ResolveResumedBatch(Training(2, 1, 8), 2, Saved(2, 1, 4), &notes);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->accum, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("the global batch stays 8 sequences"), std::string::npos) << notes[0];
  // A different value: deliberate.
  notes.clear();
  b = ResolveResumedBatch(Training(2, 1, 16), 2, Saved(2, 1, 4), &notes);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->global, 16);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("deliberate"), std::string::npos) << notes[0];
}

TEST(Batch, ResumeWithEditedFactorsIsDeliberate) {
  std::vector<std::string> notes;
  Result<BatchShape> b = ResolveResumedBatch(Training(4, 1, 0), 2, Saved(2, 1, 2), &notes);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->global, 8);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("changes from the checkpoint's 4 sequences"), std::string::npos)
      << notes[0];
  // Nothing changed: nothing to say. Unknown saved batch (old checkpoint): fresh resolution.
  notes.clear();
  b = ResolveResumedBatch(Training(2, 1, 0), 2, Saved(2, 1, 2), &notes);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(notes.empty());
  b = ResolveResumedBatch(Training(2, 1, 0), 1, BatchShape{}, &notes);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->global, 2);
  EXPECT_TRUE(notes.empty());
}

}  // namespace
}  // namespace tenax
