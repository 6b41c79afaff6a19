#include "tenax/protocol/live_membership.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tenax/core/temp_dir.h"

namespace tenax::protocol {
namespace {

TEST(LiveMembership, EveryMissingSlotIsRunByExactlyOneMember) {
  const LiveMembership m{3, 0, 8, {0, 2, 5}, {}};
  EXPECT_EQ(m.Missing(), (std::vector<int>{1, 3, 4, 6, 7}));
  // Missing slots dealt round-robin in group order: 1 -> 0, 3 -> 2, 4 -> 5, 6 -> 0, 7 -> 2.
  EXPECT_EQ(SlotsRunBy(m, 0), (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(SlotsRunBy(m, 2), (std::vector<int>{2, 3, 7}));
  EXPECT_EQ(SlotsRunBy(m, 5), (std::vector<int>{4, 5}));
  EXPECT_TRUE(SlotsRunBy(m, 1).empty());  // not a member
  std::vector<int> count(8, 0);
  for (int s : m.members) {
    for (int run : SlotsRunBy(m, s)) ++count[static_cast<size_t>(run)];
  }
  EXPECT_EQ(count, std::vector<int>(8, 1));
  const LiveMembership full{0, 0, 4, {0, 1, 2, 3}, {}};
  EXPECT_EQ(SlotsRunBy(full, 3), (std::vector<int>{3}));
}

// Split: a lost slot's samples spread over every member in contiguous runs; each sample of
// every slot run exactly once. 3 members, slots of 2 samples, slot 1 missing: one sample each
// to the second and third members. 8 slots of 4, five missing (20 samples over 3 members).
TEST(LiveMembership, SplitDealsTheMissingSlotsSamplesOverEveryMember) {
  const LiveMembership one{1, 0, 4, {0, 2, 3}, {}};
  EXPECT_EQ(PartsRunBy(one, 0, 2, true), (std::vector<SlotPart>{{0, 0, 2}}));
  EXPECT_EQ(PartsRunBy(one, 2, 2, true), (std::vector<SlotPart>{{1, 0, 1}, {2, 0, 2}}));
  EXPECT_EQ(PartsRunBy(one, 3, 2, true), (std::vector<SlotPart>{{1, 1, 2}, {3, 0, 2}}));
  // Unsplit: the slot whole, as SlotsRunBy.
  EXPECT_EQ(PartsRunBy(one, 0, 2, false), (std::vector<SlotPart>{{0, 0, 2}, {1, 0, 2}}));
  EXPECT_TRUE(PartsRunBy(one, 1, 2, true).empty());  // not a member
  const LiveMembership m{3, 0, 8, {0, 2, 5}, {}};
  std::vector<std::vector<int>> count(8, std::vector<int>(4, 0));
  int64_t most = 0, least = 1 << 20;
  for (int s : m.members) {
    int64_t extra = 0;
    for (const SlotPart& p : PartsRunBy(m, s, 4, true)) {
      for (int64_t r = p.begin; r < p.end; ++r) ++count[static_cast<size_t>(p.slot)][r];
      if (p.slot != s) extra += p.size();
    }
    most = std::max(most, extra);
    least = std::min(least, extra);
  }
  EXPECT_EQ(count, std::vector<std::vector<int>>(8, std::vector<int>(4, 1)));
  EXPECT_LE(most - least, 1) << "20 missing samples over 3 members: 6 or 7 each";
  EXPECT_EQ(PartsRunBy(LiveMembership{0, 0, 4, {0, 1, 2, 3}, {}}, 3, 4, true),
            (std::vector<SlotPart>{{3, 0, 4}}));
}

TEST(LiveMembership, PartsAsSetsOfSamples) {
  const std::vector<SlotPart> a = {{0, 0, 4}, {2, 1, 3}};
  EXPECT_EQ(PartsMinus(a, {{0, 0, 4}}), (std::vector<SlotPart>{{2, 1, 3}}));
  EXPECT_EQ(PartsMinus(a, {{0, 1, 2}, {2, 1, 2}}),
            (std::vector<SlotPart>{{0, 0, 1}, {0, 2, 4}, {2, 2, 3}}));
  EXPECT_TRUE(PartsMinus(a, a).empty());
  EXPECT_TRUE(PartsInclude(a, {{0, 0, 4}}));
  EXPECT_TRUE(PartsInclude(a, {{0, 1, 3}, {2, 2, 3}}));
  EXPECT_FALSE(PartsInclude(a, {{2, 0, 2}}));
  EXPECT_TRUE(PartsInclude(a, {}));
}

// HSDP 3 replicas x 2 shards (ranks 2q, 2q + 1): replica 1 lost, replica 2 rejoining.
TEST(LiveMembership, TheReplicaViewListsWholeReplicas) {
  const LiveMembership m{7, 1, 6, {0, 1, 4, 5}, {4, 5}};
  for (int position : {0, 1}) {
    const LiveMembership v = ReplicaView(m, 2, position);
    EXPECT_EQ(v.epoch, 7);
    EXPECT_EQ(v.generation, 1);
    EXPECT_EQ(v.world, 3);
    EXPECT_EQ(v.members, (std::vector<int>{0, 2})) << position;
    EXPECT_EQ(v.joining, (std::vector<int>{2})) << position;
    EXPECT_EQ(v.Missing(), (std::vector<int>{1}));
  }
  // One rank per replica (DDP): the record itself.
  EXPECT_EQ(ReplicaView(m, 1, 0), m);
}

TEST(LiveMembership, RoundTripsThroughTheFileAndRejectsBadRecords) {
  testing::TempDir dir;
  Result<std::optional<LiveMembership>> none = ReadLiveMembership(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  const LiveMembership m{2, 0, 4, {0, 1, 2, 3}, {2}};
  ASSERT_TRUE(WriteLiveMembership(dir.path(), m).ok());
  Result<std::optional<LiveMembership>> back = ReadLiveMembership(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(**back, m);
  for (const char* bad :
       {R"({"epoch":1,"world":4,"members":[0,0]})", R"({"epoch":1,"world":4,"members":[0,4]})",
        R"({"epoch":1,"world":2,"members":[]})",
        R"({"epoch":1,"world":2,"members":[0,1],"joining":[0,1]})",
        R"({"epoch":1,"world":2,"members":[0],"joining":[1]})", R"({"epoch":1})"}) {
    Result<LiveMembership> r = ParseLiveMembership(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("live membership record"), std::string::npos);
  }
}

}  // namespace
}  // namespace tenax::protocol
