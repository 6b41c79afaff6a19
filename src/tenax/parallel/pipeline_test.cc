// Tests of the pipeline executor on real ranks (2 and 4 CPU processes over Gloo) against the
// single-process model: loss, every parameter's gradient, which ranks own which parameters, the
// executed order, the activations held, and the measured idle fraction of each schedule.
//
// Tolerances. Both runs compute the same function in fp32; only the order of reductions differs.
// Loss: 1e-5 absolute. The pipeline averages m per-micro-batch means where the reference takes one
// mean over the batch; on a loss of ~3.7 nats that moves the result by a few fp32 ulps (observed
// <= 5e-7). Gradients: per parameter, max |g - g_ref| <= 1e-5 * max |g_ref|. The pipeline sums m
// micro-batch gradients, each scaled by 1 / m, where the reference reduces the whole batch inside
// each matmul and sum; through 4-8 layers of backward the reassociation costs ~10 ulps relative
// to the parameter's largest entry (observed 1e-6 to 3e-6, printed per case). Any real bug (a
// wrong scale, a missing or repeated micro-batch, a stale activation, a gradient that skipped a
// stage) is an error of order 1e-1 or more, so 1e-5 separates them with room on both sides.
#include "tenax/parallel/pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tenax/parallel/testing.h"

namespace tenax::parallel {
namespace {

// The same batch on every rank: drawn from a seeded CPU generator.
std::pair<at::Tensor, at::Tensor> Batch(int64_t batch, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor tokens = at::randint(vocab, {batch, 8}, gen, at::TensorOptions().dtype(at::kLong));
  at::Tensor targets = at::randint(vocab, {batch, 8}, gen, at::TensorOptions().dtype(at::kLong));
  return {tokens, targets};
}

struct Case {
  ScheduleKind schedule;
  int microbatches;
  int virtual_stages;
  int64_t layers;
  int64_t batch;
  bool tied;
  int steps;  // > 1: gradients accumulate over steps without zeroing (checks the tied-grad sum)
};

std::string Describe(const Case& c, int p) {
  return std::string(ScheduleName(c.schedule)) + " p=" + std::to_string(p) +
         " m=" + std::to_string(c.microbatches) + " v=" + std::to_string(c.virtual_stages) +
         " L=" + std::to_string(c.layers) + (c.tied ? " tied" : "") +
         " steps=" + std::to_string(c.steps);
}

std::vector<Action> ComputeOrder(const StepTimeline& t) {
  std::vector<Action> out;
  for (const TimelineEvent& e : t.events) {
    if (e.type == StepType::kCompute) out.push_back(e.action);
  }
  return out;
}

// Runs `c` on `comm` and compares with the single-process model. Every rank checks the loss;
// gradients are summed over ranks (each parameter contributed only by its first owning rank,
// zeros elsewhere) so every rank can check all of them.
void RunCase(Communicator& comm, const Case& c) {
  SCOPED_TRACE(Describe(c, comm.size()));
  const ModelSpec spec = testing::SmallLlamaSpec(c.layers, c.tied);
  model::Llama ref(spec, 7, at::Device(at::kCPU));
  model::Llama model(spec, 7, at::Device(at::kCPU));
  auto [tokens, targets] = Batch(c.batch, spec.vocab_size, 11);
  at::Tensor ref_loss = ref.Loss(tokens, targets);
  ref_loss.backward();

  PipelineOptions opt;
  opt.schedule = c.schedule;
  opt.microbatches = c.microbatches;
  opt.virtual_stages = c.virtual_stages;
  // A split backward: its I leaves the weight gradients of its chunk's layers as they were, its
  // W changes them (the weight-gradient GEMMs really are deferred, not done twice or early).
  PipelineExecutor* executor = nullptr;
  std::vector<double> chunk_grad(2, 0.0);  // [chunk] sum of |grad| over its layers' weights
  int split_checked = 0;
  auto layer_grad_sum = [&](int chunk) {
    const LayerRange& lr = executor->chunk_layers()[static_cast<size_t>(chunk)];
    double sum = 0;
    for (const auto& t : model.params()) {
      if (t.name.rfind("layers.", 0) != 0 || !t.tensor.grad().defined()) continue;
      const int64_t layer = std::stoll(t.name.substr(7));
      if (lr.begin <= layer && layer < lr.end) sum += t.tensor.grad().abs().sum().item<double>();
    }
    return sum;
  };
  if (IsVShaped(c.schedule)) {
    opt.on_action = [&](const Action& a) {
      const double now = layer_grad_sum(a.chunk);
      const int stage = executor->plan().StageOf(comm.rank(), a.chunk);
      if (a.kind == ActionKind::kBackwardInput && stage > 0) {
        EXPECT_EQ(now, chunk_grad[static_cast<size_t>(a.chunk)]) << ToString(a);
        ++split_checked;
      }
      if (a.kind == ActionKind::kBackwardWeight) {
        EXPECT_NE(now, chunk_grad[static_cast<size_t>(a.chunk)]) << ToString(a);
      }
      chunk_grad[static_cast<size_t>(a.chunk)] = now;
    };
  }
  LlamaStage stage(model);
  auto ex = PipelineExecutor::Create(stage, comm, opt);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  PipelineExecutor& pipe = **ex;
  executor = &pipe;

  auto sim = Simulate(pipe.plan());
  ASSERT_TRUE(sim.ok());
  double loss_err = 0, worst_rel = 0;
  for (int step = 0; step < c.steps; ++step) {
    auto res = pipe.Step(tokens, targets);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_NEAR(res->loss, ref_loss.item<double>(), 1e-5);
    loss_err = std::max(loss_err, std::abs(res->loss - ref_loss.item<double>()));
    const std::vector<Action>& planned = pipe.plan().actions[static_cast<size_t>(comm.rank())];
    EXPECT_TRUE(ComputeOrder(res->timeline) == planned) << "executed order differs from plan";
    EXPECT_EQ(res->timeline.peak_in_flight, sim->peak_in_flight[comm.rank()]);
  }
  if (IsVShaped(c.schedule) && comm.size() > 1) {
    // Every rank but the first runs input-only backwards of stages > 0 (rank 0's are those of
    // stage 0, which nothing waits for, and of the last stage in the steady state, whole).
    int planned = 0;
    for (const Action& a : pipe.plan().actions[static_cast<size_t>(comm.rank())]) {
      planned +=
          a.kind == ActionKind::kBackwardInput && pipe.plan().StageOf(comm.rank(), a.chunk) > 0;
    }
    EXPECT_EQ(split_checked, planned * c.steps);
    if (comm.rank() > 0) EXPECT_GT(planned, 0);
  }

  const auto& params = model.params();
  const auto& owned = pipe.owned_params();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    const std::vector<int> owners = pipe.OwningRanks(name);
    ASSERT_FALSE(owners.empty()) << name;
    const bool mine = std::find(owners.begin(), owners.end(), comm.rank()) != owners.end();
    EXPECT_EQ(mine, std::find(owned.begin(), owned.end(), i) != owned.end()) << name;
    const at::Tensor& g = params[i].tensor.grad();
    // Parameters of other stages never enter this rank's graph.
    EXPECT_EQ(g.defined(), mine) << name << " on rank " << comm.rank();
    at::Tensor sum =
        owners[0] == comm.rank() && g.defined() ? g.clone() : at::zeros_like(params[i].tensor);
    comm.AllReduceSum(sum);
    const at::Tensor want = ref.params()[i].tensor.grad() * static_cast<double>(c.steps);
    const double scale = want.abs().max().item<double>();
    const double err = (sum - want).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * scale) << name << ": max error " << err << ", max |g| " << scale;
    worst_rel = std::max(worst_rel, err / scale);
    if (mine && owners.size() > 1) {  // both holders of a tied table hold the full gradient
      const double e2 = (g - want).abs().max().item<double>();
      EXPECT_LE(e2, 1e-5 * scale) << name << " (second owner) on rank " << comm.rank();
    }
  }
  if (comm.rank() == 0) {
    std::printf("%-45s |loss - ref| %.2e  worst grad error / max|g| %.2e\n",
                Describe(c, comm.size()).c_str(), loss_err, worst_rel);
    std::fflush(stdout);
  }
}

std::unique_ptr<ProcessGroups> ConnectOrFail() {
  auto env = ReadDistEnv();
  EXPECT_TRUE(env.ok()) << env.status().ToString();
  if (!env.ok()) return nullptr;
  auto groups = ProcessGroups::Connect(*env, std::chrono::seconds(60));
  EXPECT_TRUE(groups.ok()) << groups.status().ToString();
  if (!groups.ok()) return nullptr;
  return std::move(groups).value();
}

TEST(PipelineWorker, DISABLED_MatchesSingleProcess) {
  auto groups = ConnectOrFail();
  ASSERT_NE(groups, nullptr);
  Communicator& world = groups->world();
  using K = ScheduleKind;
  // {schedule, m, v, layers, batch, tied, steps}
  const Case two[] = {{K::kGPipe, 4, 1, 4, 4, false, 1},
                      {K::k1F1B, 4, 1, 4, 4, false, 1},
                      {K::kInterleaved1F1B, 4, 2, 4, 8, false, 1},
                      {K::kInterleaved1F1B, 2, 2, 4, 4, false, 1},  // m == p: forwards first
                      {K::k1F1B, 2, 1, 4, 4, true, 2},
                      {K::kZBV, 4, 2, 4, 8, false, 1},
                      {K::kDualPipeV, 4, 2, 4, 8, false, 1},
                      {K::kZBV, 6, 2, 4, 6, true, 2}};
  const Case four[] = {{K::kGPipe, 4, 1, 4, 4, false, 1},
                       {K::k1F1B, 8, 1, 4, 8, false, 1},
                       {K::kInterleaved1F1B, 4, 2, 8, 8, false, 1},
                       {K::kInterleaved1F1B, 8, 2, 8, 8, false, 1},
                       {K::k1F1B, 4, 1, 4, 4, true, 2},
                       {K::kZBV, 8, 2, 8, 8, false, 1},
                       {K::kDualPipeV, 8, 2, 8, 8, false, 1},
                       {K::kDualPipeV, 9, 2, 8, 9, true, 2}};
  ASSERT_TRUE(world.size() == 2 || world.size() == 4);
  if (world.size() == 2) {
    for (const Case& c : two) RunCase(world, c);
  } else {
    for (const Case& c : four) RunCase(world, c);
  }

  // Ownership as documented: with p = 2, v = 2 and 4 layers, stage s = layer s lives on rank
  // s % 2; the embedding on rank 0, the final norm and output projection on the last rank.
  if (world.size() == 2) {
    model::Llama m(testing::SmallLlamaSpec(4, false), 7, at::Device(at::kCPU));
    PipelineOptions opt;
    opt.schedule = ScheduleKind::kInterleaved1F1B;
    opt.microbatches = 2;
    opt.virtual_stages = 2;
    LlamaStage stage(m);
    auto ex = PipelineExecutor::Create(stage, world, opt);
    ASSERT_TRUE(ex.ok());
    EXPECT_EQ((*ex)->OwningRanks("tok_embeddings.weight"), std::vector<int>{0});
    EXPECT_EQ((*ex)->OwningRanks("layers.1.attention.wq.weight"), std::vector<int>{1});
    EXPECT_EQ((*ex)->OwningRanks("layers.2.ffn_norm.weight"), std::vector<int>{0});
    EXPECT_EQ((*ex)->OwningRanks("output.weight"), std::vector<int>{1});
    const auto& layers = (*ex)->chunk_layers();
    ASSERT_EQ(layers.size(), 2u);
    EXPECT_EQ(layers[1].begin, world.rank() == 0 ? 2 : 3);

    // The V: rank 0 holds stages 0 and 3 (layers 0 and 3, the embedding and the head), rank 1
    // stages 1 and 2.
    opt.schedule = ScheduleKind::kZBV;
    opt.microbatches = 4;
    auto zbv = PipelineExecutor::Create(stage, world, opt);
    ASSERT_TRUE(zbv.ok()) << zbv.status().ToString();
    EXPECT_EQ((*zbv)->OwningRanks("tok_embeddings.weight"), std::vector<int>{0});
    EXPECT_EQ((*zbv)->OwningRanks("layers.3.attention.wq.weight"), std::vector<int>{0});
    EXPECT_EQ((*zbv)->OwningRanks("layers.2.ffn_norm.weight"), std::vector<int>{1});
    EXPECT_EQ((*zbv)->OwningRanks("output.weight"), std::vector<int>{0});
    const auto& v_layers = (*zbv)->chunk_layers();
    ASSERT_EQ(v_layers.size(), 2u);
    EXPECT_EQ(v_layers[0].begin, world.rank() == 0 ? 0 : 1);
    EXPECT_EQ(v_layers[1].begin, world.rank() == 0 ? 3 : 2);
  }
  world.Barrier();
}

TEST(Pipeline, TwoRanksMatchSingleProcess) {
  auto codes = testing::RunRanks(2, "PipelineWorker.DISABLED_MatchesSingleProcess");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(Pipeline, FourRanksMatchSingleProcess) {
  auto codes = testing::RunRanks(4, "PipelineWorker.DISABLED_MatchesSingleProcess");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Measured bubble on 4 real ranks.
//
// Why a sleep per action: this machine has 2 cores shared by 4 ranks and by other jobs (load
// average 6-7 while this was written), and the test model's real compute is ~1 ms, so raw
// wall-clock idle would measure CPU contention, not the schedule. Each action therefore sleeps a
// fixed 50 ms / v (forward) or 100 ms / v (backward) inside its timed span: a sleeping rank needs
// no core, so the sleeps run truly in parallel and the real compute becomes a small
// perturbation. What stays real: the blocking Send/Recv order, its latency, and whether the
// executor keeps the pipeline as full as the schedule says.
//
// Measured fraction per rank: (step - compute) / compute (the simulator's idle / busy), with step
// the time between a barrier before and a barrier after the actions, so that every rank spans the
// whole makespan as in the simulator, and compute the summed action spans (sleeps included).
//
// Noise only ever adds idle time (a descheduled rank or a slow hop delays its successors, never
// speeds anything up), so each case runs 3 timed steps and keeps the one with the least mean idle.
// Tolerance: |measured - formula| <= 0.05 + 0.15 * formula, per rank. The measured bubble sits
// systematically above the formula: every hop of the critical path pays a Gloo send/recv (measured
// below: 0.4-1.8 ms on this machine depending on load), interleaved 1F1B has about v times more
// hops than 1F1B for the same busy time, and real compute differs between stages (stage 0 embeds,
// the last stage runs the head and loss), which delays the pipeline in proportion to its depth.
// The table printed by rank 0 shows the replay (the plan simulated with this step's measured
// action durations and the measured latency: what a perfect executor would reach here) next to
// the measurement. Observed over 4 runs at load average 2-7: measured - formula = +0.01..+0.06
// (largest for interleaved), replay - formula = +0.006..+0.05, measured - replay <= 0.03. The
// tolerance covers that with ~0.02 to spare; a schedule that ran, say, GPipe's order instead of
// 1F1B's would still pass on bubble (same formula) but fails the exact order check, and an
// executor that serialised the ranks would measure a bubble near p - 1 = 3. Separately and
// exactly: the executed order is the plan, and the plan's simulated bubble is the formula.
//
// That tolerance is a timing goal: on a machine kept busy by other processes (two spinning
// processes on these 2 cores) measured - formula reached +0.10. So the suite asserts only what
// load cannot break, measured <= formula + 1 (a serialised executor measures ~3), and the tight
// tolerance applies with TENAX_TIMING_CHECKS=1, which bench/pipeline_bubble.sh sets (run it on an
// idle machine).
TEST(PipelineWorker, DISABLED_IdleFraction) {
  auto groups = ConnectOrFail();
  ASSERT_NE(groups, nullptr);
  Communicator& world = groups->world();
  const int p = world.size(), me = world.rank();
  using K = ScheduleKind;

  // Point-to-point latency: ping-pong of an activation-sized tensor between rank pairs.
  double latency = 0;
  {
    at::Tensor buf = at::zeros({2, 8, 32});
    const int peer = me ^ 1, iters = 50;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (me % 2 == 0) {
        world.Send(buf, peer, 1);
        world.Recv(buf, peer, 2);
      } else {
        world.Recv(buf, peer, 1);
        world.Send(buf, peer, 2);
      }
    }
    at::Tensor l = at::full(
        {1},
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (2 * iters),
        at::kDouble);
    world.AllReduceSum(l);
    latency = l.item<double>() / p;
  }
  if (me == 0) {
    std::printf("p2p latency %.2f ms\n%-17s %2s %2s %2s  %-7s %-7s %-7s  %-31s %s\n", latency * 1e3,
                "schedule", "p", "m", "v", "formula", "sim", "replay", "measured per rank", "mean");
  }

  struct TimedCase {
    ScheduleKind schedule;
    int m, v;
  };
  for (const TimedCase& c : std::vector<TimedCase>{{K::kGPipe, 4, 1},
                                                   {K::kGPipe, 8, 1},
                                                   {K::k1F1B, 4, 1},
                                                   {K::k1F1B, 8, 1},
                                                   {K::kInterleaved1F1B, 4, 2},
                                                   {K::kInterleaved1F1B, 8, 2},
                                                   {K::kZBV, 8, 2},
                                                   {K::kZBV, 16, 2},
                                                   {K::kDualPipeV, 8, 2},
                                                   {K::kDualPipeV, 16, 2}}) {
    SCOPED_TRACE(std::string(ScheduleName(c.schedule)) + " m=" + std::to_string(c.m) +
                 " v=" + std::to_string(c.v));
    const ModelSpec spec = testing::SmallLlamaSpec(8, false);
    model::Llama model(spec, 7, at::Device(at::kCPU));
    auto [tokens, targets] = Batch(std::max(8, c.m), spec.vocab_size, 11);  // B % m == 0
    bool inject = false;
    PipelineOptions opt;
    opt.schedule = c.schedule;
    opt.microbatches = c.m;
    opt.virtual_stages = c.v;
    opt.barrier_for_timing = true;
    const int v = c.v;
    opt.on_action = [&inject, v](const Action& a) {
      if (!inject) return;
      // A split backward's halves, I and W, each half a whole one (F = I = W: the V schedules'
      // formulas assume it).
      const int ms = (a.kind == ActionKind::kBackward ? 100 : 50) / v;
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    };
    LlamaStage stage(model);
    auto ex = PipelineExecutor::Create(stage, world, opt);
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    const PipelinePlan& plan = (*ex)->plan();
    const double formula = BubbleFraction(c.schedule, p, c.m, c.v);
    auto sim = Simulate(plan);
    ASSERT_TRUE(sim.ok());
    EXPECT_NEAR(sim->bubble_fraction(me), formula, 1e-9);
    ASSERT_TRUE((*ex)->Step(tokens, targets).ok());  // warm-up: allocator, rope table, sockets
    inject = true;

    size_t n = 0;  // the most actions of a rank (a split backward is two)
    for (const auto& list : plan.actions) n = std::max(n, list.size());
    at::Tensor best_idle, best_durations;  // (p), (p, n): from the step with least mean idle
    for (int rep = 0; rep < 3; ++rep) {
      auto res = (*ex)->Step(tokens, targets);
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      EXPECT_TRUE(ComputeOrder(res->timeline) == plan.actions[static_cast<size_t>(me)]);
      at::Tensor idle = at::zeros({p}, at::kDouble);
      idle[me].fill_(res->timeline.idle_fraction());
      at::Tensor durations = at::zeros({p, static_cast<int64_t>(n)}, at::kDouble);
      int i = 0;
      for (const TimelineEvent& e : res->timeline.events) {
        if (e.type == StepType::kCompute) durations[me][i++].fill_(e.end_s - e.start_s);
      }
      world.AllReduceSum(idle);
      world.AllReduceSum(durations);
      if (!best_idle.defined() || idle.mean().item<double>() < best_idle.mean().item<double>()) {
        best_idle = idle;
        best_durations = durations;
      }
    }
    std::vector<std::vector<double>> dv(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < plan.actions[static_cast<size_t>(r)].size(); ++i) {
        dv[static_cast<size_t>(r)].push_back(
            best_durations[r][static_cast<int64_t>(i)].item<double>());
      }
    }
    auto replay = SimulateWithDurations(plan, dv, latency);
    ASSERT_TRUE(replay.ok()) << replay.status().ToString();
    if (me == 0) {
      std::string per_rank;
      for (int r = 0; r < p; ++r) per_rank += fmt::format("{:.4f} ", best_idle[r].item<double>());
      double replay_mean = 0;
      for (int r = 0; r < p; ++r) replay_mean += replay->bubble_fraction(r) / p;
      std::printf("%-17s %2d %2d %2d  %-7.4f %-7.4f %-7.4f  %-31s %.4f\n", ScheduleName(c.schedule),
                  p, c.m, c.v, formula, sim->bubble_fraction(0), replay_mean, per_rank.c_str(),
                  best_idle.mean().item<double>());
      std::fflush(stdout);
    }
    const char* timing = std::getenv("TENAX_TIMING_CHECKS");
    const bool tight = timing != nullptr && std::string(timing) == "1";
    for (int r = 0; r < p; ++r) {
      const double measured = best_idle[r].item<double>();
      if (tight) {
        EXPECT_NEAR(measured, formula, 0.05 + 0.15 * formula) << "rank " << r;
      } else {
        EXPECT_LE(measured, formula + 1.0) << "rank " << r << ": the ranks ran one after another";
      }
    }
  }
  world.Barrier();
}

TEST(Pipeline, FourRanksIdleFractionMatchesSchedule) {
  auto codes = testing::RunRanks(4, "PipelineWorker.DISABLED_IdleFraction");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// One rank, two chunks: the hand-over between chunks stays on the rank (no communicator calls).
TEST(Pipeline, SingleRankInterleavedMatchesSingleProcess) {
  auto comm = MakeLocalCommunicator();
  RunCase(*comm, {ScheduleKind::kInterleaved1F1B, 2, 2, 4, 4, true, 1});
  EXPECT_EQ(comm->stats().p2p_bytes, 0);
}

// The split backward on one rank (both stages of the V on it): every I computes only its input's
// gradient and every W the weight gradients it left, which together are the whole backward's.
TEST(Pipeline, SingleRankVSchedulesMatchSingleProcess) {
  auto comm = MakeLocalCommunicator();
  RunCase(*comm, {ScheduleKind::kZBV, 2, 2, 4, 4, true, 1});
  RunCase(*comm, {ScheduleKind::kDualPipeV, 3, 2, 4, 6, false, 2});
  EXPECT_EQ(comm->stats().p2p_bytes, 0);
}

TEST(Pipeline, InvalidInputsAreErrors) {
  auto comm = MakeLocalCommunicator();
  model::Llama model(testing::SmallLlamaSpec(6, false), 7, at::Device(at::kCPU));
  PipelineOptions opt;
  opt.schedule = ScheduleKind::kInterleaved1F1B;
  opt.microbatches = 2;
  opt.virtual_stages = 4;
  LlamaStage stage(model);
  auto bad = PipelineExecutor::Create(stage, *comm, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.n_layers (6) is not divisible"), std::string::npos)
      << bad.status().message();

  opt.virtual_stages = 2;
  opt.microbatches = 4;
  model::Llama even(testing::SmallLlamaSpec(4, false), 7, at::Device(at::kCPU));
  LlamaStage even_stage(even);
  auto ex = PipelineExecutor::Create(even_stage, *comm, opt);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  auto [tokens, targets] = Batch(6, 40, 1);
  auto res = (*ex)->Step(tokens, targets);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("batch size 6 is not divisible by microbatches (4)"),
            std::string::npos)
      << res.status().message();
  auto mismatched = (*ex)->Step(tokens, targets.narrow(1, 0, 4));
  EXPECT_FALSE(mismatched.ok());
}

}  // namespace
}  // namespace tenax::parallel
