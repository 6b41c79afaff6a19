// The node agent's view without an etcd: watch events as the watcher delivers them (the
// generation moving on, the job's stop, an active node's agent vanishing, new commits), the
// lease lost and granted, and what the agent's threads read from it.
#include "tenax/launch/agent_view.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tenax/protocol/protocol.h"

namespace tenax::launch {
namespace {

const rdzv::Keys kKeys("job");

etcd::WatchEvent Put(const std::string& key, const std::string& value) {
  etcd::WatchEvent e;
  e.type = etcd::WatchEvent::Type::kPut;
  e.kv.key = key;
  e.kv.value = value;
  return e;
}

etcd::WatchEvent Delete(const std::string& key) {
  etcd::WatchEvent e;
  e.type = etcd::WatchEvent::Type::kDelete;
  e.kv.key = key;
  return e;
}

rdzv::Plan PlanOf(int64_t g) {
  rdzv::Plan plan;
  plan.generation = g;
  plan.nodes = {"a", "b"};
  plan.spares = {"c"};
  return plan;
}

TEST(AgentView, TheGenerationMovingOnEndsTheRunningOne) {
  AgentView view(kKeys);
  // Nothing runs here yet: a new generation is no news.
  view.OnEvents({Put(kKeys.generation(), "1")});
  view.Begin(2, PlanOf(2), 0);
  EXPECT_TRUE(view.StillCurrent());
  view.OnEvents({Put(kKeys.generation(), "2")});  // the same generation, written again
  EXPECT_TRUE(view.StillCurrent());
  EXPECT_EQ(view.StopReason({}), std::nullopt);
  view.OnEvents({Put(kKeys.generation(), "3")});
  EXPECT_FALSE(view.StillCurrent());
  EXPECT_EQ(view.StopReason({}), "the generation moved on (another node failed)");
  // The next generation starts afresh.
  view.Begin(3, PlanOf(3), 1);
  EXPECT_TRUE(view.StillCurrent());
  EXPECT_EQ(view.running().generation, 3);
  EXPECT_EQ(view.running().node_rank, 1);
}

TEST(AgentView, TheJobsStopEndsIt) {
  AgentView view(kKeys);
  view.Begin(0, PlanOf(0), 0);
  EXPECT_FALSE(view.stopped());
  view.OnEvents({Put(kKeys.stop(), R"({"code":0,"reason":"finished"})")});
  EXPECT_TRUE(view.stopped());
  EXPECT_FALSE(view.StillCurrent());
  EXPECT_EQ(view.StopReason({}), "the job stopped");
}

TEST(AgentView, AnActiveNodesAgentVanishingIsALoss) {
  AgentView view(kKeys);
  view.Begin(0, PlanOf(0), 0);
  view.OnEvents({Delete(kKeys.agent("c"))});  // a spare: not a loss
  EXPECT_TRUE(view.StillCurrent());
  view.OnEvents({Put(kKeys.agent("b"), "{}")});  // a put: not a loss either
  EXPECT_TRUE(view.StillCurrent());
  view.OnEvents({Delete(kKeys.agent("b"))});
  EXPECT_FALSE(view.StillCurrent());
  EXPECT_EQ(view.StopReason({}), "node(s) lost: b");
  // A spare's end leaves them for the next rendezvous; the rendezvous takes them.
  AgentView::Ended ended = view.End(/*forget_lost=*/false);
  EXPECT_EQ(ended.lost, std::set<std::string>{"b"});
  EXPECT_FALSE(ended.lease_lost);
  EXPECT_EQ(view.running().generation, -1);
  std::set<std::string> lost;
  ASSERT_TRUE(view.TakeLost(&lost));
  EXPECT_EQ(lost, std::set<std::string>{"b"});
  ASSERT_TRUE(view.TakeLost(&lost));
  EXPECT_TRUE(lost.empty());
  // An active node's end hands them over.
  view.Begin(1, PlanOf(1), 0);
  view.OnEvents({Delete(kKeys.agent("a"))});
  EXPECT_EQ(view.End(/*forget_lost=*/true).lost, std::set<std::string>{"a"});
  ASSERT_TRUE(view.TakeLost(&lost));
  EXPECT_TRUE(lost.empty());
}

// Live recovery across nodes: a lost agent the job survives is forgiven (the generation goes
// on, its agent no longer watched), and the spare that took its node rank is watched in its
// place (its loss then is one, and the plan for replica pushes names it).
TEST(AgentView, ALostNodeForgivenAndTheSpareInItsPlaceIsWatched) {
  AgentView view(kKeys);
  view.Begin(0, PlanOf(0), 0);
  view.OnEvents({Delete(kKeys.agent("b"))});
  EXPECT_EQ(view.Lost(), std::set<std::string>{"b"});
  EXPECT_FALSE(view.StillCurrent());
  view.Forgive("b");
  EXPECT_TRUE(view.Lost().empty());
  EXPECT_TRUE(view.StillCurrent());
  EXPECT_EQ(view.StopReason({}), std::nullopt);
  view.OnEvents({Delete(kKeys.agent("b"))});  // a repeat of the event: no loss any more
  EXPECT_TRUE(view.StillCurrent());
  view.OnEvents({Delete(kKeys.agent("c"))});  // the spare, not active yet: not a loss
  EXPECT_TRUE(view.StillCurrent());
  view.Activate(1, "c");
  EXPECT_EQ(view.Place().plan_nodes, (std::vector<std::string>{"a", "c"}));
  view.OnEvents({Delete(kKeys.agent("c"))});
  EXPECT_EQ(view.StopReason({}), "node(s) lost: c");
}

TEST(AgentView, NewCommitsAreHandedBackInOrder) {
  AgentView view(kKeys);
  view.Begin(0, PlanOf(0), 0);
  const std::vector<std::string> commits =
      view.OnEvents({Put(kKeys.commit(4), "four"), Delete(kKeys.commit(0)),
                     Put(kKeys.master(0), "10.0.0.1:29500"), Put(kKeys.commit(8), "eight")});
  EXPECT_EQ(commits, (std::vector<std::string>{"four", "eight"}));
  EXPECT_TRUE(view.StillCurrent());
}

TEST(AgentView, ALostLeaseFencesUntilANewOne) {
  AgentView view(kKeys);
  view.LeaseGranted(41);
  view.Begin(0, PlanOf(0), 0);
  int woken = 0;
  // The first to tell of the loss (the keeper's thread, or the agent by the lease's deadline)
  // is the one that says it; the other learns it was told already.
  EXPECT_TRUE(view.LeaseLost([&] { ++woken; }));
  EXPECT_FALSE(view.LeaseLost([&] { ++woken; }));
  EXPECT_EQ(woken, 2);
  EXPECT_TRUE(view.lease_lost());
  EXPECT_FALSE(view.StillCurrent());
  EXPECT_EQ(view.StopReason({}), "this node lost its etcd lease (fenced)");
  EXPECT_FALSE(view.Progress());
  std::set<std::string> lost = {"stale"};
  EXPECT_FALSE(view.TakeLost(&lost)) << "fenced: the rendezvous gives up";
  EXPECT_TRUE(view.End(/*forget_lost=*/true).lease_lost);
  view.LeaseGranted(42);
  EXPECT_FALSE(view.lease_lost());
  view.Begin(1, PlanOf(1), 0);
  ASSERT_TRUE(view.Progress());
  EXPECT_EQ(view.Progress()->lease, 42);
  // Once the agent quits, nothing is woken (the supervisor may be gone). A loss of the new
  // lease is told afresh.
  view.Quit();
  EXPECT_TRUE(view.LeaseLost([&] { ++woken; }));
  EXPECT_EQ(woken, 2);
  EXPECT_TRUE(view.lease_lost());
}

TEST(AgentView, AStragglerStopComesFirstAndPausesProgress) {
  AgentView view(kKeys);
  view.LeaseGranted(7);
  EXPECT_FALSE(view.Progress()) << "nothing runs here";
  view.Begin(5, PlanOf(5), 1);
  protocol::Beat beat;
  beat.generation = 5;
  beat.recent = {{10, 0.25}};
  EXPECT_EQ(view.StopReason({beat, beat}), std::nullopt);
  std::optional<AgentView::ProgressTurn> turn = view.Progress();
  ASSERT_TRUE(turn);
  EXPECT_EQ(turn->generation, 5);
  EXPECT_EQ(turn->node_rank, 1);
  EXPECT_EQ(turn->lease, 7);
  EXPECT_EQ(turn->plan.nodes, PlanOf(5).nodes);
  ASSERT_EQ(turn->beats.size(), 2u) << "the beats the StopFn kept";
  EXPECT_EQ(turn->beats[0].recent, beat.recent);
  view.OnEvents({Put(kKeys.stop(), "{}")});
  view.SetStragglerStop("node 1 straggles and is replaced (--replace-stragglers)");
  EXPECT_EQ(view.StopReason({}), "node 1 straggles and is replaced (--replace-stragglers)");
  EXPECT_FALSE(view.Progress());
  // A new generation forgets it, and the beats.
  view.Begin(6, PlanOf(6), 0);
  EXPECT_EQ(view.StopReason({}), "the job stopped")
      << "the stop is the job's, not the generation's";
  turn = view.Progress();
  ASSERT_TRUE(turn);
  EXPECT_TRUE(turn->beats.empty());
}

TEST(AgentView, APlaceForReplicasIsTheRunningPlanAndTheLiveAgents) {
  AgentView view(kKeys);
  EXPECT_EQ(view.Place().generation, -1);
  rdzv::AgentInfo b;
  b.id = "b";
  b.file_port = 7001;
  view.SetAgents({{"b", b}});
  view.Begin(2, PlanOf(2), 0);
  const MirrorPlace p = view.Place();
  EXPECT_EQ(p.generation, 2);
  EXPECT_EQ(p.node_rank, 0);
  EXPECT_EQ(p.plan_nodes, PlanOf(2).nodes);
  ASSERT_EQ(p.agents.count("b"), 1u);
  EXPECT_EQ(p.agents.at("b").file_port, 7001);
}

TEST(AgentView, WaitUntilWakesOnAnEventAndTimesOut) {
  // A poll far beyond the test's patience: only the event can end the wait in time.
  AgentView view(kKeys, /*poll_s=*/600);
  view.Begin(0, PlanOf(0), 0);
  std::atomic<int> checks{0};
  std::thread watcher([&] {
    // Wait for the waiter's first check, then deliver the event it waits for.
    while (checks.load() == 0) std::this_thread::yield();
    view.OnEvents({Put(kKeys.stop(), "{}")});
  });
  const double start = protocol::MonotonicNow();
  const bool done = view.WaitUntil(
      [&] {
        ++checks;
        return view.stopped();
      },
      300);
  watcher.join();
  EXPECT_TRUE(done);
  EXPECT_LT(protocol::MonotonicNow() - start, 60) << "woken by the event, not the timeout";

  AgentView idle(kKeys, /*poll_s=*/0.01);
  EXPECT_FALSE(idle.WaitUntil([] { return false; }, 0.05));
  EXPECT_TRUE(idle.WaitUntil([] { return true; }, 0));
}

TEST(AgentView, QuitEndsTheProgressThreadsWait) {
  AgentView view(kKeys);
  EXPECT_FALSE(view.WaitForQuit(0.01));
  std::thread quitter([&] { view.Quit(); });
  EXPECT_TRUE(view.WaitForQuit(600));
  quitter.join();
}

}  // namespace
}  // namespace tenax::launch
