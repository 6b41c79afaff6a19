// The slot table with a fake spawner and a fake clock: ranks move to ready spares, the failed
// slot becomes a spare, failures decay so a slot heals, a quarantined slot gets no standby, and
// with no healthy slot left a rank runs in place instead of ending the job.
#include "tenax/launch/spares.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

namespace tenax::launch {
namespace {

// Pids above the kernel's limit (PID_MAX_LIMIT is 2^22): kill() and waitpid() on them are
// harmless no-ops, so no real process is needed.
constexpr pid_t kFakePid = 5000000;

class SlotTableTest : public ::testing::Test {
 protected:
  ~SlotTableTest() override {
    for (int fd : read_ends_) ::close(fd);
  }
  std::unique_ptr<SlotTable> Make(int ranks, int spares, int after, double window_s) {
    ranks_ = ranks;
    return std::make_unique<SlotTable>(
        ranks, spares, QuarantinePolicy{after, window_s},
        [this](int slot, int fd) -> Result<pid_t> {
          spawned_.push_back(slot);
          read_ends_.push_back(::dup(fd));  // the "child" keeps the pipe open: Assign can write
          return kFakePid + static_cast<pid_t>(spawned_.size());
        },
        [this] { return now_; });
  }
  // A generation as the supervisor runs it: every rank assigned, then the spare pool refilled.
  void Generation(SlotTable& t) {
    for (int local = 0; local < ranks_; ++local) ASSERT_TRUE(t.Assign(local, "RANK").ok());
    ASSERT_TRUE(t.FillStandbys().ok());
  }
  // The generation ends with `local`'s failure: every rank process is reaped, then its slot is
  // excluded. Returns the slot the rank moves to.
  int Fail(SlotTable& t, int local) {
    const int slot = t.SlotOf(local);
    for (int l = 0; l < ranks_; ++l) t.Reaped(t.process(t.SlotOf(l)).pid);
    return t.Exclude(slot);
  }
  std::vector<int> spawned_;  // slots, in spawn order
  std::vector<int> read_ends_;
  double now_ = 0;
  int ranks_ = 0;
};

TEST_F(SlotTableTest, RanksStartInTheirSlotsAndSparesWait) {
  auto t = Make(2, 1, 2, 3600);
  ASSERT_TRUE(t->Assign(0, "RANK=0").ok());
  ASSERT_TRUE(t->Assign(1, "RANK=1").ok());
  ASSERT_TRUE(t->FillStandbys().ok());
  EXPECT_EQ(spawned_, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t->SlotOf(0), 0);
  EXPECT_EQ(t->SlotOf(1), 1);
  EXPECT_EQ(t->ReadySpares(), 1);
  EXPECT_EQ(t->RanksAlive(), 2);
  // The spare ending before it is needed is a standby (local -1), not a rank.
  ASSERT_GT(t->process(2).pid, 0);
  SlotTable::ReapedProcess r = t->Reaped(t->process(2).pid);
  EXPECT_EQ(r.slot, 2);
  EXPECT_EQ(r.local, -1);
  EXPECT_EQ(t->ReadySpares(), 0);
  EXPECT_EQ(t->Reaped(12345).slot, -1);  // not ours
}

TEST_F(SlotTableTest, AFailedSlotIsExcludedAndBecomesASpare) {
  auto t = Make(2, 1, 2, 3600);
  Generation(*t);
  EXPECT_EQ(Fail(*t, 1), 2);  // the spare in slot 2 takes rank 1
  EXPECT_EQ(t->SlotOf(1), 2);
  EXPECT_FALSE(t->quarantined(1));
  Generation(*t);  // rank 0 in slot 0 (a fresh process), rank 1 in slot 2; slot 1 a spare
  EXPECT_EQ(t->process(2).local, 1);
  EXPECT_EQ(t->ReadySpares(), 1);
  EXPECT_EQ(t->process(1).local, -1);
}

// Live recovery, HSDP: rank 0 killed with its replica partner (no fault of its slot). Its slot's
// process is gone, so a ready spare takes the rank without a failure counted against the slot;
// with no spare ready, or with a standby still in the slot, the rank stays.
TEST_F(SlotTableTest, ARankKilledThroughNoFaultOfItsSlotTakesAReadySpare) {
  auto t = Make(2, 2, 1, 3600);
  Generation(*t);
  EXPECT_EQ(t->ReadySpares(), 2);
  t->Reaped(t->process(0).pid);
  EXPECT_EQ(t->TakeReadySpare(0), 2);
  EXPECT_EQ(t->SlotOf(0), 2);
  EXPECT_EQ(t->recent_failures(0), 0);  // not blamed: with --quarantine-after 1 still healthy
  EXPECT_FALSE(t->quarantined(0));
  ASSERT_TRUE(t->Assign(0, "RANK=0").ok());
  EXPECT_EQ(t->process(2).local, 0);
  ASSERT_TRUE(t->FillStandbys().ok());  // the freed slot 0 gets a standby: a spare again
  EXPECT_EQ(t->process(0).local, -1);
  EXPECT_GT(t->process(0).pid, 0);
  EXPECT_EQ(t->TakeReadySpare(0), 0);  // no rank in slot 0 now: nothing moves
  t->Reaped(t->process(1).pid);
  t->Reaped(t->process(3).pid);
  t->Reaped(t->process(0).pid);
  EXPECT_EQ(t->TakeReadySpare(1), 1);  // no spare ready: the rank runs again in place
}

// Silent data corruption proven by replay: one failure quarantines (no standby in the slot).
TEST_F(SlotTableTest, AProvenFaultQuarantinesAtOnce) {
  auto t = Make(2, 1, 3, 3600);
  Generation(*t);
  const int slot = t->SlotOf(1);
  for (int l = 0; l < 2; ++l) t->Reaped(t->process(t->SlotOf(l)).pid);
  EXPECT_EQ(t->Exclude(slot, /*at_once=*/true), 2);
  EXPECT_TRUE(t->quarantined(slot));
  const size_t before = spawned_.size();
  Generation(*t);
  EXPECT_EQ(spawned_.size(), before + 1);  // rank 0's fresh process; none in the quarantined slot
  EXPECT_EQ(t->process(slot).pid, -1);
}

TEST_F(SlotTableTest, OnlyRecentFailuresQuarantineAndASlotHeals) {
  auto t = Make(1, 1, 2, 100);  // 2 failures within 100 s quarantine a slot
  Generation(*t);
  EXPECT_EQ(Fail(*t, 0), 1);  // slot 0: 1 recent failure
  now_ = 10;
  Generation(*t);
  EXPECT_EQ(Fail(*t, 0), 0);  // slot 1 fails; slot 0 (1 failure) is still healthy
  EXPECT_EQ(t->recent_failures(0), 1);
  now_ = 20;
  Generation(*t);
  EXPECT_EQ(Fail(*t, 0), 1);  // slot 0's 2nd failure within the window: quarantined
  EXPECT_TRUE(t->quarantined(0));
  EXPECT_EQ(t->QuarantinedSlots(), std::vector<int>{0});
  const size_t before = spawned_.size();
  Generation(*t);
  EXPECT_EQ(spawned_.size(), before);  // a quarantined slot gets no standby
  now_ = 101;                          // its first failure has aged out: healed
  EXPECT_EQ(t->recent_failures(0), 1);
  EXPECT_FALSE(t->quarantined(0));
  ASSERT_TRUE(t->FillStandbys().ok());
  EXPECT_EQ(spawned_.back(), 0);
}

TEST_F(SlotTableTest, FailuresFarApartNeverQuarantine) {
  auto t = Make(1, 0, 2, 100);
  for (int i = 0; i < 5; ++i) {
    now_ = 150.0 * i;
    Generation(*t);
    EXPECT_EQ(Fail(*t, 0), 0);
    EXPECT_FALSE(t->quarantined(0)) << i;
  }
}

TEST_F(SlotTableTest, WithNoHealthySlotLeftTheRankRunsInPlace) {
  auto t = Make(2, 0, 1, 3600);  // no spares; one failure quarantines
  Generation(*t);
  EXPECT_EQ(Fail(*t, 1), 1);  // nowhere else: in place, the job goes on
  EXPECT_TRUE(t->quarantined(1));
  Generation(*t);  // fresh processes, rank 1 in its quarantined slot
  EXPECT_EQ(t->process(1).local, 1);
  EXPECT_EQ(t->RanksAlive(), 2);
}

TEST_F(SlotTableTest, ExcludingASlotWithoutARankChangesNothing) {
  auto t = Make(1, 1, 2, 3600);
  ASSERT_TRUE(t->Assign(0, "RANK=0").ok());
  EXPECT_EQ(t->Exclude(1), 1);
  EXPECT_EQ(t->recent_failures(1), 0);
  EXPECT_EQ(t->SlotOf(0), 0);
}

}  // namespace
}  // namespace tenax::launch
