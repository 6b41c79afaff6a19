// Tests of the pipeline schedules and their simulator: exact bubble fractions against the closed
// forms, activation memory, deadlock freedom over a grid, and the errors for impossible layouts.
//
// Bubble fraction, as defined in pipeline_schedule.h: per rank, idle / busy, where busy is the sum
// of the rank's action costs and idle = makespan - busy. With the default per-action costs
// (forward 1, backward 2) every event time is an integer, so the closed forms hold exactly up to
// the final division: asserted within 1e-9.
#include "tenax/parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace tenax::parallel {
namespace {

std::string Join(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) s += (s.empty() ? "" : " ") + ToString(a);
  return s;
}

struct GridCase {
  ScheduleKind kind;
  int p, m, v;
};

// Every layout the schedules accept for p in {1,2,3,4,8}, m in {1..24 (selected)}, v in {1..4}
// (v = 2 for the V schedules).
std::vector<GridCase> ValidGrid() {
  std::vector<GridCase> out;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 6, 8, 12, 16, 24}) {
      out.push_back({ScheduleKind::kGPipe, p, m, 1});
      if (m >= p) out.push_back({ScheduleKind::k1F1B, p, m, 1});
      if (m % p == 0) {
        for (int v : {1, 2, 3, 4}) out.push_back({ScheduleKind::kInterleaved1F1B, p, m, v});
      }
      if (m >= 2 * p) {
        out.push_back({ScheduleKind::kZBV, p, m, 2});
        out.push_back({ScheduleKind::kDualPipeV, p, m, 2});
      }
    }
  }
  return out;
}

TEST(PipelineSchedule, BubbleFractionMatchesClosedForm) {
  int checked = 0;
  for (const GridCase& g : ValidGrid()) {
    auto plan = BuildSchedule(g.kind, g.p, g.m, g.v);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    auto sim = Simulate(*plan);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    // Default costs: F 1, B 2, I and W 1 each (the V schedules' formulas assume F = I = W).
    const double want = BubbleFraction(g.kind, g.p, g.m, g.v);
    for (int r = 0; r < g.p; ++r) {
      EXPECT_NEAR(sim->bubble_fraction(r), want, 1e-9)
          << ScheduleName(g.kind) << " p=" << g.p << " m=" << g.m << " v=" << g.v << " rank " << r;
      EXPECT_DOUBLE_EQ(sim->busy[r], 3.0 * g.m * g.v);
    }
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

TEST(PipelineSchedule, BubbleTableForTheReport) {
  // The table the issue asks for, printed so the test log doubles as documentation.
  std::printf("%-17s %2s %3s %2s  %-10s %-10s\n", "schedule", "p", "m", "v", "simulated",
              "formula");
  for (const GridCase& g : std::vector<GridCase>{{ScheduleKind::kGPipe, 4, 4, 1},
                                                 {ScheduleKind::kGPipe, 4, 8, 1},
                                                 {ScheduleKind::k1F1B, 4, 4, 1},
                                                 {ScheduleKind::k1F1B, 4, 8, 1},
                                                 {ScheduleKind::kInterleaved1F1B, 4, 4, 2},
                                                 {ScheduleKind::kInterleaved1F1B, 4, 8, 2},
                                                 {ScheduleKind::kInterleaved1F1B, 4, 8, 4},
                                                 {ScheduleKind::kZBV, 4, 8, 2},
                                                 {ScheduleKind::kZBV, 4, 16, 2},
                                                 {ScheduleKind::kDualPipeV, 4, 8, 2},
                                                 {ScheduleKind::kDualPipeV, 4, 16, 2}}) {
    auto plan = BuildSchedule(g.kind, g.p, g.m, g.v);
    ASSERT_TRUE(plan.ok());
    auto sim = Simulate(*plan);
    ASSERT_TRUE(sim.ok());
    std::printf("%-17s %2d %3d %2d  %-10.6f %-10.6f\n", ScheduleName(g.kind), g.p, g.m, g.v,
                sim->bubble_fraction(0), BubbleFraction(g.kind, g.p, g.m, g.v));
    EXPECT_NEAR(sim->bubble_fraction(0), BubbleFraction(g.kind, g.p, g.m, g.v), 1e-9);
  }
}

TEST(PipelineSchedule, ActivationsHeld) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 12, 16}) {
      auto gpipe = Simulate(*BuildSchedule(ScheduleKind::kGPipe, p, m));
      ASSERT_TRUE(gpipe.ok());
      for (int r = 0; r < p; ++r) EXPECT_EQ(gpipe->peak_in_flight[r], m) << "gpipe p=" << p;
      if (m < p) continue;
      auto ofob = Simulate(*BuildSchedule(ScheduleKind::k1F1B, p, m));
      ASSERT_TRUE(ofob.ok());
      EXPECT_EQ(ofob->peak_in_flight[0], p) << "1f1b rank 0, p=" << p << " m=" << m;
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(ofob->peak_in_flight[r], p);
        EXPECT_EQ(ofob->peak_in_flight[r], p - r);  // warm-up p - 1 - r, plus one
      }
    }
  }
  // Interleaved (counted in (micro-batch, chunk) pairs, each 1/v of a stage's activations):
  // Megatron's warm-up plus one, or everything when m == p.
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p, 3 * p}) {
      for (int v : {1, 2, 3}) {
        auto sim = Simulate(*BuildSchedule(ScheduleKind::kInterleaved1F1B, p, m, v));
        ASSERT_TRUE(sim.ok());
        for (int r = 0; r < p; ++r) {
          const int warmup = m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
          EXPECT_EQ(sim->peak_in_flight[r], std::min(warmup + 1, m * v))
              << "p=" << p << " m=" << m << " v=" << v << " rank " << r;
        }
      }
    }
  }
}

// The V schedules, in chunks (each half a stage of 1f1b on the same layers): zbv holds 2p on
// every rank (1f1b's p stages), dualpipev one chunk more.
TEST(PipelineSchedule, ActivationsHeldByTheVSchedules) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {2 * p, 2 * p + 1, 4 * p}) {
      auto zbv = Simulate(*BuildSchedule(ScheduleKind::kZBV, p, m, 2));
      auto dpv = Simulate(*BuildSchedule(ScheduleKind::kDualPipeV, p, m, 2));
      ASSERT_TRUE(zbv.ok() && dpv.ok());
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(zbv->peak_in_flight[r], 2 * p) << "zbv p=" << p << " m=" << m << " rank " << r;
        EXPECT_EQ(dpv->peak_in_flight[r], 2 * p + 1)
            << "dualpipev p=" << p << " m=" << m << " rank " << r;
      }
    }
  }
}

TEST(PipelineSchedule, KnownOrders) {
  auto ofob = BuildSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(ofob.ok());
  EXPECT_EQ(Join(ofob->actions[0]), "F0c0 F1c0 B0c0 F2c0 B1c0 F3c0 B2c0 B3c0");
  EXPECT_EQ(Join(ofob->actions[1]), "F0c0 B0c0 F1c0 B1c0 F2c0 B2c0 F3c0 B3c0");
  auto gpipe = BuildSchedule(ScheduleKind::kGPipe, 3, 2);
  ASSERT_TRUE(gpipe.ok());
  EXPECT_EQ(Join(gpipe->actions[2]), "F0c0 F1c0 B0c0 B1c0");
  // Megatron's interleaved order for p = 2, m = 4, v = 2 (groups of p = 2 micro-batches per
  // chunk; rank 0 warms up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards).
  auto il = BuildSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 2);
  ASSERT_TRUE(il.ok());
  EXPECT_EQ(Join(il->actions[0]),
            "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0");
  EXPECT_EQ(Join(il->actions[1]),
            "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0");
  EXPECT_EQ(il->StageOf(1, 1), 3);
  EXPECT_EQ(il->RankOf(3), 1);
  EXPECT_EQ(il->ChunkOf(3), 1);
  // ZB-V for p = 2, m = 4 (rank 0 holds stages 0 and 3, rank 1 stages 1 and 2): rank 0 warms
  // up with 2p - 1 = 3 forwards of chunk 0, rank 1 defers the W of one chunk-0 and one chunk-1
  // backward into the cool-down.
  auto zbv = BuildSchedule(ScheduleKind::kZBV, 2, 4, 2);
  ASSERT_TRUE(zbv.ok());
  EXPECT_EQ(Join(zbv->actions[0]),
            "F0c0 F1c0 F2c0 F0c1 B0c1 F1c1 B1c1 F3c0 B0c0 F2c1 B2c1 B1c0 F3c1 B3c1 I2c0 W2c0 I3c0 "
            "W3c0");
  EXPECT_EQ(Join(zbv->actions[1]),
            "F0c0 F0c1 F1c0 F1c1 B0c1 F2c0 B0c0 F2c1 B1c1 F3c0 B1c0 F3c1 B2c1 I2c0 I3c1 I3c0 W2c0 "
            "W3c1 W3c0");
  EXPECT_EQ(zbv->StageOf(0, 1), 3);
  EXPECT_EQ(zbv->StageOf(1, 1), 2);
  EXPECT_EQ(zbv->RankOf(3), 0);
  EXPECT_EQ(zbv->RankOf(2), 1);
  EXPECT_EQ(zbv->ChunkOf(2), 1);
  // DualPipeV for p = 2, m = 4: rank 1 (the V's turn) runs two steady steps of pairs (F2c0 B0c1,
  // F2c1 B0c0, ...); the last backwards are input-only, their W's at the end.
  auto dpv = BuildSchedule(ScheduleKind::kDualPipeV, 2, 4, 2);
  ASSERT_TRUE(dpv.ok());
  EXPECT_EQ(Join(dpv->actions[0]),
            "F0c0 F1c0 F2c0 F0c1 B0c1 F1c1 F3c0 B1c1 F2c1 B0c0 B2c1 F3c1 B1c0 B3c1 I2c0 W2c0 I3c0 "
            "W3c0");
  EXPECT_EQ(Join(dpv->actions[1]),
            "F0c0 F0c1 F1c0 F1c1 F2c0 B0c1 F2c1 B0c0 F3c0 B1c1 F3c1 B1c0 B2c1 B2c0 I3c1 I3c0 W3c1 "
            "W3c0");
}

TEST(PipelineSchedule, DeadlockFreeGridAndTimelineRespectsDependencies) {
  for (const GridCase& g : ValidGrid()) {
    auto plan = BuildSchedule(g.kind, g.p, g.m, g.v);
    ASSERT_TRUE(plan.ok());
    // Non-uniform costs too: deadlock freedom must not depend on the cost model.
    for (ActionCosts costs : {ActionCosts{1, 2}, ActionCosts{1, 1}, ActionCosts{3, 1},
                              ActionCosts{1, 2, 0, 0.5, 1.5}}) {
      auto sim = Simulate(*plan, costs);
      ASSERT_TRUE(sim.ok()) << ScheduleName(g.kind) << " p=" << g.p << " m=" << g.m << " v=" << g.v
                            << ": " << sim.status().ToString();
      // Independent check of the event times: every dependency finished before its consumer.
      const int S = plan->num_stages();
      std::vector<double> fwd_end(static_cast<size_t>(S * g.m)),
          bwd_end(static_cast<size_t>(S * g.m)), w_end(static_cast<size_t>(S * g.m));
      for (int r = 0; r < g.p; ++r) {
        double prev_end = 0;
        for (const TimedAction& t : sim->timeline[r]) {
          EXPECT_GE(t.start, prev_end);  // one action at a time per rank
          prev_end = t.end;
          auto& table = t.action.kind == ActionKind::kForward          ? fwd_end
                        : t.action.kind == ActionKind::kBackwardWeight ? w_end
                                                                       : bwd_end;
          table[static_cast<size_t>(t.stage * g.m + t.action.microbatch)] = t.end;
        }
      }
      for (int r = 0; r < g.p; ++r) {
        for (const TimedAction& t : sim->timeline[r]) {
          const size_t i = static_cast<size_t>(t.stage * g.m + t.action.microbatch);
          const size_t m = static_cast<size_t>(g.m);
          if (t.action.kind == ActionKind::kForward) {
            if (t.stage > 0) {
              EXPECT_GE(t.start, fwd_end[i - m]);
            }
          } else if (t.action.kind == ActionKind::kBackwardWeight) {
            EXPECT_GE(t.start, bwd_end[i]);  // after its I
          } else {
            EXPECT_GE(t.start, fwd_end[i]);
            if (t.stage < S - 1) {
              EXPECT_GE(t.start, bwd_end[i + m]);
            }
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, SimulatorReportsDeadlockAndMalformedPlans) {
  auto plan = BuildSchedule(ScheduleKind::k1F1B, 2, 2);
  ASSERT_TRUE(plan.ok());
  // Rank 1 (last stage) insists on micro-batch 1's backward before its forward.
  PipelinePlan bad = *plan;
  bad.actions[1] = {{ActionKind::kForward, 0, 0},
                    {ActionKind::kBackward, 1, 0},
                    {ActionKind::kForward, 1, 0},
                    {ActionKind::kBackward, 0, 0}};
  auto sim = Simulate(bad);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("deadlocks"), std::string::npos) << sim.status().message();
  EXPECT_NE(sim.status().message().find("rank 1 at B1c0"), std::string::npos)
      << sim.status().message();

  PipelinePlan dup = *plan;
  dup.actions[0][1] = dup.actions[0][0];
  auto d = Simulate(dup);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("appears twice"), std::string::npos);

  // A split backward needs both halves, the W after the I.
  PipelinePlan no_w = *plan;
  no_w.actions[0].back().kind = ActionKind::kBackwardInput;
  auto nw = Simulate(no_w);
  ASSERT_FALSE(nw.ok());
  EXPECT_NE(nw.status().message().find("micro-batch 1 chunk 0 lacks its W"), std::string::npos)
      << nw.status().message();
  PipelinePlan w_first = no_w;
  w_first.actions[0].insert(w_first.actions[0].end() - 1, {ActionKind::kBackwardWeight, 1, 0});
  auto wf = Simulate(w_first);
  ASSERT_FALSE(wf.ok());
  EXPECT_NE(wf.status().message().find("deadlocks: rank 0 at W1c0"), std::string::npos)
      << wf.status().message();
}

// The executor's programs complete even if every Send waits for its Recv (NCCL's semantics),
// run the plan's computes in the plan's order, and use each tag once per step.
TEST(PipelineSchedule, ProgramsAreDeadlockFreeUnderRendezvous) {
  for (const GridCase& g : ValidGrid()) {
    SCOPED_TRACE(std::string(ScheduleName(g.kind)) + " p=" + std::to_string(g.p) +
                 " m=" + std::to_string(g.m) + " v=" + std::to_string(g.v));
    auto plan = BuildSchedule(g.kind, g.p, g.m, g.v);
    ASSERT_TRUE(plan.ok());
    auto programs = BuildPrograms(*plan);
    ASSERT_TRUE(programs.ok()) << programs.status().ToString();
    Status st = CheckRendezvous(*plan, *programs);
    EXPECT_TRUE(st.ok()) << st.ToString();
    size_t messages = 0;
    for (int r = 0; r < g.p; ++r) {
      std::vector<Action> computes;
      std::vector<int> send_tags, recv_tags;
      for (const ProgramStep& s : (*programs)[r]) {
        if (s.type == StepType::kCompute) computes.push_back(s.action);
        if (s.type == StepType::kSend) send_tags.push_back(s.tag);
        if (s.type == StepType::kRecv) recv_tags.push_back(s.tag);
      }
      EXPECT_TRUE(computes == plan->actions[r]) << "rank " << r;
      for (auto* tags : {&send_tags, &recv_tags}) {
        std::sort(tags->begin(), tags->end());
        EXPECT_TRUE(std::adjacent_find(tags->begin(), tags->end()) == tags->end());
      }
      messages += send_tags.size();
    }
    // Two messages (activation and gradient) per micro-batch for every stage boundary between
    // two ranks: all S - 1 boundaries when p > 1, except the turn of a V (stages p - 1 and p on
    // rank p - 1); none when p == 1.
    size_t crossings = 0;
    for (int s = 0; s + 1 < plan->num_stages(); ++s) {
      if (plan->RankOf(s) != plan->RankOf(s + 1)) crossings += static_cast<size_t>(2 * g.m);
    }
    EXPECT_EQ(crossings, g.p == 1 ? 0u
                         : IsVShaped(g.kind)
                             ? static_cast<size_t>(2 * (2 * g.p - 2) * g.m)
                             : static_cast<size_t>(2 * (plan->num_stages() - 1) * g.m));
    EXPECT_EQ(messages, crossings);
  }
}

// The rendezvous check is not vacuous: the obvious order (receive each input just before its
// compute, send each output right after) deadlocks 1F1B, as the comment in BuildPrograms says.
TEST(PipelineSchedule, NaiveSendRecvOrderDeadlocks) {
  auto plan = BuildSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(plan.ok());
  const int S = 2, m = 4;
  std::vector<std::vector<ProgramStep>> naive(2);
  for (int r = 0; r < 2; ++r) {
    for (const Action& a : plan->actions[r]) {
      const bool fwd = a.kind == ActionKind::kForward;
      const int stage = r, from = fwd ? stage - 1 : stage + 1, to = fwd ? stage + 1 : stage - 1;
      const int dir = fwd ? 0 : 1;
      if (from >= 0 && from < S) {
        naive[r].push_back({StepType::kRecv, a, stage, from, (dir * S + from) * m + a.microbatch});
      }
      naive[r].push_back({StepType::kCompute, a, stage, -1, 0});
      if (to >= 0 && to < S) {
        naive[r].push_back({StepType::kSend, a, stage, to, (dir * S + stage) * m + a.microbatch});
      }
    }
  }
  Status st = CheckRendezvous(*plan, naive);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("deadlock"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0 at send F1c0"), std::string::npos) << st.message();
}

TEST(PipelineSchedule, InvalidLayoutsNameTheirFactors) {
  auto few = BuildSchedule(ScheduleKind::k1F1B, 4, 3);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(few.status().message().find("microbatches (3) < pipeline_parallel (4)"),
            std::string::npos)
      << few.status().message();

  auto uneven = BuildSchedule(ScheduleKind::kInterleaved1F1B, 4, 6, 2);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("microbatches (6) is not a multiple of "
                                           "pipeline_parallel (4)"),
            std::string::npos)
      << uneven.status().message();

  auto virt = BuildSchedule(ScheduleKind::k1F1B, 2, 4, 2);
  ASSERT_FALSE(virt.ok());
  EXPECT_NE(virt.status().message().find("virtual_stages = 2 needs"), std::string::npos);

  EXPECT_FALSE(BuildSchedule(ScheduleKind::kGPipe, 0, 4).ok());
  EXPECT_TRUE(BuildSchedule(ScheduleKind::kGPipe, 4, 2).ok());  // gpipe takes any m

  auto layers = SplitLayers(6, 2, 2);
  ASSERT_FALSE(layers.ok());
  EXPECT_NE(layers.status().message().find(
                "model.n_layers (6) is not divisible by pipeline_parallel (2) * virtual_stages "
                "(2) = 4"),
            std::string::npos)
      << layers.status().message();
  auto ok = SplitLayers(8, 2, 2);
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->size(), 4u);
  EXPECT_EQ((*ok)[3].begin, 6);
  EXPECT_EQ((*ok)[3].end, 8);

  auto flat = BuildSchedule(ScheduleKind::kZBV, 2, 4, 1);
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("set virtual_stages = 2 (it is 1)"), std::string::npos)
      << flat.status().message();
  auto short_v = BuildSchedule(ScheduleKind::kDualPipeV, 4, 6, 2);
  ASSERT_FALSE(short_v.ok());
  EXPECT_NE(short_v.status().message().find("microbatches (6) < 2 x pipeline_parallel (4)"),
            std::string::npos)
      << short_v.status().message();

  EXPECT_EQ(*ParseScheduleKind("interleaved_1f1b"), ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(*ParseScheduleKind("zbv"), ScheduleKind::kZBV);
  EXPECT_EQ(*ParseScheduleKind("dualpipev"), ScheduleKind::kDualPipeV);
  auto unknown = ParseScheduleKind("zero_bubble");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("zero_bubble"), std::string::npos);
}

}  // namespace
}  // namespace tenax::parallel
