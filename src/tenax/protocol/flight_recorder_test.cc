// Flight recorder: sequence numbers and states, ring eviction, atomic JSON dumps, dumps on
// SIGUSR1 and on a collective timeout, and the analysis that names the rank others wait for
// (synthetic records: no processes need to hang).
#include "tenax/protocol/flight_recorder.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include "tenax/core/temp_dir.h"
#include "tenax/protocol/flight_analysis.h"

namespace tenax::protocol {
namespace {

using std::chrono::milliseconds;

TEST(FlightRecorderTest, NumbersEachGroupSeparatelyAndTracksState) {
  FlightRecorder rec(/*rank=*/3);
  rec.SetPhase(5, "backward");
  const uint64_t a = rec.Begin("all_reduce", "world", 400, "[100] f32");
  const uint64_t b = rec.Begin("all_gather", "dp_shard", 64);
  rec.End(a);
  const uint64_t c = rec.Enqueue("all_reduce", "world", 8);
  std::vector<CollectiveRecord> r = rec.Records();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].seq, 1);
  EXPECT_EQ(r[1].seq, 1);  // another group counts from 1
  EXPECT_EQ(r[2].seq, 2);
  EXPECT_EQ(r[0].state, CollectiveState::kCompleted);
  EXPECT_EQ(r[1].state, CollectiveState::kStarted);
  EXPECT_EQ(r[2].state, CollectiveState::kEnqueued);
  EXPECT_EQ(r[0].phase, "backward");
  EXPECT_EQ(r[0].step, 5);
  EXPECT_GT(r[0].completed_unix, 0);
  // The oldest collective not completed is b (a completed; c came later).
  ASSERT_TRUE(rec.OldestPending().has_value());
  EXPECT_EQ(rec.OldestPending()->id, b);
  rec.End(b);
  rec.Start(c);
  EXPECT_EQ(rec.OldestPending()->id, c);
  EXPECT_EQ(rec.OldestPending()->state, CollectiveState::kStarted);
  rec.End(c);
  EXPECT_FALSE(rec.OldestPending().has_value());
  nlohmann::json j = rec.ToJson("test");
  EXPECT_EQ(j["groups"]["world"]["last_started_seq"], 2);
  EXPECT_EQ(j["groups"]["world"]["last_completed_seq"], 2);
  EXPECT_EQ(j["groups"]["dp_shard"]["last_completed_seq"], 1);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["collectives"][0]["shape"], "[100] f32");
}

TEST(FlightRecorderTest, RingKeepsTheLastNAndIgnoresEvictedIds) {
  FlightRecorder rec(0, /*capacity=*/4);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(rec.Begin("broadcast", "world", i));
  std::vector<CollectiveRecord> r = rec.Records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r.front().seq, 7);
  EXPECT_EQ(r.back().seq, 10);
  rec.End(ids[0]);  // evicted: ignored, no crash
  rec.End(ids[9]);
  EXPECT_EQ(rec.Records().back().state, CollectiveState::kCompleted);
  // Counters survive eviction: the group still knows seq 10 started.
  EXPECT_EQ(rec.ToJson("x")["groups"]["world"]["last_started_seq"], 10);
}

TEST(FlightRecorderTest, ConcurrentBeginEndFromManyThreadsKeepsSequencesDense) {
  FlightRecorder rec(0, 100000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&rec] {
      for (int i = 0; i < 1000; ++i) rec.End(rec.Begin("all_reduce", "world", 4));
    });
  }
  for (auto& t : threads) t.join();
  std::vector<CollectiveRecord> r = rec.Records();
  ASSERT_EQ(r.size(), 4000u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].seq, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(r[i].state, CollectiveState::kCompleted);
  }
}

TEST(FlightRecorderTest, CollectiveScopeEndsUnlessAnExceptionEscapes) {
  FlightRecorder rec(0);
  { CollectiveScope ok(&rec, "all_reduce", "world", 16); }
  try {
    CollectiveScope failing(&rec, "all_gather", "world", 32);
    throw std::runtime_error("gloo timeout");
  } catch (const std::runtime_error&) {
  }
  { CollectiveScope nothing(nullptr, "barrier", "world", 0); }  // no recorder: no-op
  std::vector<CollectiveRecord> r = rec.Records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].state, CollectiveState::kCompleted);
  EXPECT_EQ(r[1].state, CollectiveState::kStarted);  // threw: still pending in the record
  EXPECT_EQ(r[1].bytes, 32);
}

TEST(FlightRecorderTest, DumpWritesParsableJson) {
  testing::TempDir tmp;
  FlightRecorder rec(1);
  rec.Begin("all_reduce", "world", 4);
  const std::string path = FlightRecordPath(tmp / "flight", 1);
  EXPECT_EQ(path, tmp / "flight/flight-rank00001.json");
  ASSERT_TRUE(rec.Dump(LocalFs(), path, "manual").ok());
  Result<std::vector<nlohmann::json>> read = ReadFlightRecords(LocalFs(), tmp / "flight", 2);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->at(0).is_null());  // rank 0 dumped nothing
  EXPECT_EQ(read->at(1)["reason"], "manual");
  EXPECT_EQ(read->at(1)["collectives"][0]["state"], "started");
}

// Waits (bounded, not timed) for `cond`.
template <typename F>
bool Eventually(F cond) {
  for (int i = 0; i < 6000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(FlightRecorderTest, Sigusr1DumpsFromTheWatchdogThread) {
  testing::TempDir tmp;
  FlightRecorder rec(0);
  rec.SetPhase(12, "optimizer");
  WatchdogOptions o;
  o.dump_path = tmp / "rank0.json";
  o.poll_interval = milliseconds(5);
  FlightRecorderWatchdog dog(rec, LocalFs(), o);
  ASSERT_EQ(::raise(SIGUSR1), 0);
  ASSERT_TRUE(Eventually([&] { return dog.dumps() == 1; }));
  Result<std::string> text = LocalFs().ReadFile(tmp / "rank0.json");
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["reason"], "SIGUSR1");
  EXPECT_EQ(j["step"], 12);
  EXPECT_EQ(j["phase"], "optimizer");
}

TEST(FlightRecorderTest, TimeoutDumpsAndReportsTheStuckCollectiveOnce) {
  testing::TempDir tmp;
  FlightRecorder rec(2);
  rec.End(rec.Begin("broadcast", "world", 4));  // completed: never a timeout
  rec.SetPhase(17, "backward");
  rec.Begin("all_reduce", "dp_replicate", 1024);  // never ends
  std::promise<CollectiveRecord> fired;
  int calls = 0;
  WatchdogOptions o;
  o.dump_path = tmp / "rank2.json";
  o.collective_timeout = milliseconds(1);
  o.poll_interval = milliseconds(2);
  o.handle_sigusr1 = false;
  o.on_timeout = [&](const CollectiveRecord& r) {
    if (calls++ == 0) fired.set_value(r);
  };
  {
    FlightRecorderWatchdog dog(rec, LocalFs(), o);
    std::future<CollectiveRecord> f = fired.get_future();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    CollectiveRecord r = f.get();
    EXPECT_EQ(r.op, "all_reduce");
    EXPECT_EQ(r.group, "dp_replicate");
    EXPECT_EQ(r.seq, 1);
    EXPECT_EQ(r.step, 17);
    EXPECT_EQ(r.phase, "backward");
    EXPECT_GE(dog.dumps(), 1);
  }
  EXPECT_EQ(calls, 1);  // the same stuck collective is reported once
  Result<std::string> text = LocalFs().ReadFile(tmp / "rank2.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::json::parse(*text)["reason"], "collective timeout");
}

// NCCL's waits return before the GPU has run the collective: such records end when their probe
// says done (EndWhen), asked by Poll in issue order, and a probe that is not done keeps its
// record pending, which is what the timeout check and the dumps see.
TEST(FlightRecorderTest, EndWhenEndsARecordOnlyOnceItsProbeSaysDone) {
  FlightRecorder rec(0);
  std::atomic<bool> first_done{false}, second_done{false};
  const uint64_t a = rec.Enqueue("all_gather", "dp_shard", 64);
  rec.Start(a);
  rec.EndWhen(a, [&] { return first_done.load(); });
  const uint64_t b = rec.Enqueue("reduce_scatter", "dp_shard", 64);
  rec.Start(b);
  rec.EndWhen(b, [&] { return second_done.load(); });
  EXPECT_EQ(rec.Poll(), 2u);
  ASSERT_TRUE(rec.OldestPending().has_value());
  EXPECT_EQ(rec.OldestPending()->id, a);
  second_done = true;  // the later one may finish first (another stream)
  EXPECT_EQ(rec.Poll(), 1u);
  EXPECT_EQ(rec.OldestPending()->id, a);
  EXPECT_EQ(rec.Records()[1].state, CollectiveState::kCompleted);
  first_done = true;
  EXPECT_EQ(rec.Poll(), 0u);
  EXPECT_FALSE(rec.OldestPending().has_value());
  rec.End(a);  // ending twice changes nothing
  EXPECT_EQ(rec.Records()[0].state, CollectiveState::kCompleted);
}

// Live recovery: the collectives a rank gave up with the groups it left (one that threw, one
// whose probe will never say done) are abandoned: not pending for the timeout check (which asks
// OldestPending) nor for a dump's analysis, and nothing ends them back; what it issues next is.
TEST(FlightRecorderTest, AbandonedCollectivesAreNoLongerPending) {
  FlightRecorder rec(0);
  rec.End(rec.Begin("broadcast", "world", 4));
  const uint64_t threw = rec.Begin("all_reduce", "world", 8);
  const uint64_t async = rec.Enqueue("all_reduce", "dp_replicate", 64);
  rec.Start(async);
  rec.EndWhen(async, [] { return false; });
  EXPECT_EQ(rec.AbandonPending(), 2u);
  EXPECT_FALSE(rec.OldestPending().has_value());
  EXPECT_EQ(rec.Poll(), 0u);  // its probe is dropped unasked
  rec.End(threw);
  const nlohmann::json dump = rec.ToJson("test");
  ASSERT_EQ(dump["collectives"].size(), 3u);
  EXPECT_EQ(dump["collectives"][0]["state"], "completed");
  EXPECT_EQ(dump["collectives"][1]["state"], "abandoned");
  EXPECT_EQ(dump["collectives"][2]["state"], "abandoned");
  const uint64_t next = rec.Begin("all_reduce", "world", 8);
  ASSERT_TRUE(rec.OldestPending().has_value());
  EXPECT_EQ(rec.OldestPending()->id, next);
  EXPECT_EQ(rec.AbandonPending(), 1u);
}

// The watchdog asks the probes by itself: a record whose collective finishes later is completed
// without anyone calling Poll, and one whose probe never says done times out.
TEST(FlightRecorderTest, WatchdogPollsProbesAndTimesOutAStuckOne) {
  testing::TempDir tmp;
  FlightRecorder rec(1);
  std::atomic<bool> done{false};
  const uint64_t a = rec.Enqueue("all_reduce", "world", 8);
  rec.Start(a);
  rec.EndWhen(a, [&] { return done.load(); });
  const uint64_t b = rec.Enqueue("all_gather", "world", 8);
  rec.Start(b);
  rec.EndWhen(b, [] { return false; });  // never finishes on the GPU
  std::promise<CollectiveRecord> fired;
  WatchdogOptions o;
  o.dump_path = tmp / "rank1.json";
  o.collective_timeout = std::chrono::seconds(1);
  o.poll_interval = milliseconds(2);
  o.handle_sigusr1 = false;
  int calls = 0;
  o.on_timeout = [&](const CollectiveRecord& r) {
    if (calls++ == 0) fired.set_value(r);
  };
  FlightRecorderWatchdog dog(rec, LocalFs(), o);
  done = true;
  std::future<CollectiveRecord> f = fired.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(f.get().op, "all_gather");  // the finished all_reduce was ended by the watchdog
  EXPECT_EQ(rec.Records()[0].state, CollectiveState::kCompleted);
}

TEST(FlightRecorderDeathTest, DefaultTimeoutActionExitsWithTheDocumentedCode) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  // The "threadsafe" style re-runs this test in a child process: a fixed path (not a fresh
  // TempDir) lets the parent see the child's dump.
  const std::string dump = ::testing::TempDir() + "tenax_flight_death_rank1.json";
  (void)LocalFs().RemoveAll(dump);
  auto stuck_rank = [&] {
    FlightRecorder rec(1);
    rec.Begin("all_gather", "tp", 64);  // never ends
    WatchdogOptions o;
    o.dump_path = dump;
    o.collective_timeout = milliseconds(1);
    o.poll_interval = milliseconds(2);
    o.handle_sigusr1 = false;
    FlightRecorderWatchdog dog(rec, LocalFs(), o);
    for (;;) std::this_thread::sleep_for(milliseconds(10));  // the "collective" never returns
  };
  EXPECT_EXIT(stuck_rank(), ::testing::ExitedWithCode(ToInt(ExitCode::kCollectiveTimeout)),
              "collective timeout: all_gather on group tp \\(seq 1");
  EXPECT_TRUE(LocalFs().Exists(dump));  // dumped before exiting
  (void)LocalFs().RemoveAll(dump);
}

// Synthetic dump of one rank: `done` completed world all-reduces, then optionally one pending.
nlohmann::json RankDump(int rank, int64_t done, bool pending, int64_t step,
                        const std::string& phase) {
  FlightRecorder rec(rank, 8);
  rec.RegisterGroup("world", {0, 1, 2, 3});
  rec.SetPhase(step, "forward");
  for (int64_t i = 0; i < done; ++i) rec.End(rec.Begin("all_reduce", "world", 4096));
  rec.SetPhase(step, phase);
  if (pending) rec.Begin("all_reduce", "world", 4096);
  return rec.ToJson("SIGUSR1");
}

TEST(FlightAnalysisTest, NamesTheRankStuckOutsideTheCollective) {
  // Ranks 0, 1, 3 wait in all-reduce seq 17; rank 2 finished seq 16 and is still in backward.
  std::vector<nlohmann::json> dumps = {
      RankDump(0, 16, true, 5, "backward"), RankDump(1, 16, true, 5, "backward"),
      RankDump(2, 16, false, 5, "backward"), RankDump(3, 16, true, 5, "backward")};
  FlightAnalysis a = AnalyzeFlightRecords(dumps);
  EXPECT_EQ(a.waited_on, std::vector<int>{2});
  EXPECT_TRUE(a.absent.empty());
  const std::string s = a.Summary();
  EXPECT_NE(s.find("rank(s) 0, 1, 3 wait in all_reduce seq 17"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 2 has not reached it (last started seq 16) and is in step 5, phase "
                   "backward, not in any collective"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("waiting for rank(s) 2"), std::string::npos) << s;
}

TEST(FlightAnalysisTest, AbsentRankIsNamed) {
  std::vector<nlohmann::json> dumps = {RankDump(0, 3, true, 1, "eval"), nullptr,
                                       RankDump(2, 3, true, 1, "eval"),
                                       RankDump(3, 3, true, 1, "eval")};
  FlightAnalysis a = AnalyzeFlightRecords(dumps);
  EXPECT_EQ(a.absent, std::vector<int>{1});
  EXPECT_EQ(a.waited_on, std::vector<int>{1});
}

TEST(FlightAnalysisTest, EveryoneInsideTheSameCollectiveNamesNobody) {
  std::vector<nlohmann::json> dumps;
  for (int r = 0; r < 4; ++r) dumps.push_back(RankDump(r, 9, true, 2, "backward"));
  FlightAnalysis a = AnalyzeFlightRecords(dumps);
  EXPECT_TRUE(a.waited_on.empty());
  EXPECT_NE(a.Summary().find("transport problem"), std::string::npos) << a.Summary();
}

TEST(FlightAnalysisTest, FollowsTheChainThroughAnotherGroup) {
  // Group "tp" = {0, 1}, world = {0, 1, 2, 3}. Rank 1 waits in tp seq 3, which rank 0 has not
  // reached; rank 0 waits in world seq 5, which ranks 1 and 3 have not reached; rank 3 is in the
  // optimizer outside any collective. Ranks 0 and 1 are blocked themselves, so the verdict is 3.
  auto dump = [](int rank, int64_t world_done, bool world_pending, int64_t tp_done, bool tp_pending,
                 const std::string& phase) {
    FlightRecorder rec(rank, 64);
    rec.RegisterGroup("world", {0, 1, 2, 3});
    if (rank < 2) rec.RegisterGroup("tp", {0, 1});
    for (int64_t i = 0; i < tp_done; ++i) rec.End(rec.Begin("all_gather", "tp", 8));
    for (int64_t i = 0; i < world_done; ++i) rec.End(rec.Begin("all_reduce", "world", 8));
    rec.SetPhase(4, phase);
    if (tp_pending) rec.Begin("all_gather", "tp", 8);
    if (world_pending) rec.Begin("all_reduce", "world", 8);
    return rec.ToJson("SIGUSR1");
  };
  std::vector<nlohmann::json> dumps = {
      dump(0, 4, true, 2, false, "backward"),   // in world seq 5
      dump(1, 4, false, 2, true, "backward"),   // in tp seq 3, never reached world seq 5
      dump(2, 4, true, 0, false, "backward"),   // in world seq 5
      dump(3, 4, false, 0, false, "optimizer")  // stuck outside any collective
  };
  FlightAnalysis a = AnalyzeFlightRecords(dumps);
  EXPECT_EQ(a.waited_on, std::vector<int>{3}) << a.Summary();
}

// A rank that abandoned a collective earlier (live recovery) and later hangs outside any: the
// abandoned record is not where it waits, so the analysis says it is in no collective.
TEST(FlightAnalysisTest, AnAbandonedCollectiveIsNotWhereARankWaits) {
  std::vector<nlohmann::json> dumps;
  for (int r = 0; r < 4; ++r) {
    FlightRecorder rec(r, 64);
    rec.RegisterGroup("world", {0, 1, 2, 3});
    for (int i = 0; i < 4; ++i) rec.End(rec.Begin("all_reduce", "world", 8));
    if (r == 2) {
      rec.Begin("all_reduce", "world", 8);  // seq 5 threw: a peer was lost
      rec.AbandonPending();
    } else {
      rec.End(rec.Begin("all_reduce", "world", 8));
    }
    for (int i = 0; i < 4; ++i) rec.End(rec.Begin("all_reduce", "world", 8));
    rec.SetPhase(7, r == 2 ? "optimizer" : "backward");
    if (r != 2) rec.Begin("all_reduce", "world", 8);  // seq 10: waiting for rank 2
    dumps.push_back(rec.ToJson("SIGUSR1"));
  }
  FlightAnalysis a = AnalyzeFlightRecords(dumps);
  EXPECT_EQ(a.waited_on, std::vector<int>{2}) << a.Summary();
  // Without it: "blocked in all_reduce seq 5 on group world", and a cycle that is not there.
  EXPECT_NE(a.Summary().find("phase optimizer, not in any collective"), std::string::npos)
      << a.Summary();
  EXPECT_EQ(a.Summary().find("cycle"), std::string::npos) << a.Summary();
}

TEST(FlightAnalysisTest, DifferentOpsAtTheSameSeqAreReported) {
  FlightRecorder r0(0), r1(1);
  r0.Begin("all_reduce", "world", 8);
  r1.Begin("broadcast", "world", 8);
  FlightAnalysis a = AnalyzeFlightRecords({r0.ToJson("x"), r1.ToJson("x")});
  EXPECT_NE(a.Summary().find("ranks disagree on the op"), std::string::npos) << a.Summary();
}

}  // namespace
}  // namespace tenax::protocol
