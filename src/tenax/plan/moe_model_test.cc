// The planner on mixture-of-experts models: total vs active parameters and FLOPs, what expert
// parallelism changes per GPU (experts held, the FSDP window, the unchanged sharded state), the
// all-to-all's cost against its formula, the search choosing ep (checked against an exhaustive
// enumeration over ep on a small cluster), and layouts ep cannot split.
#include "tenax/plan/moe_model.h"

#include <gtest/gtest.h>

#include "tenax/plan/cost_model.h"
#include "tenax/plan/kernels.h"
#include "tenax/plan/memory_model.h"
#include "tenax/plan/search.h"
#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

HardwareProfile H100() { return *LoadHardwareProfile("h100-sxm", testing::HardwareDirs()); }

Workload Load(const std::string& preset, int64_t seq, int64_t seqs) {
  int64_t ignored = 0;
  return *MakeWorkload(*LoadPlanModel(preset, &ignored), seq, seqs * seq);
}

// Mixtral 8x7B: 46.70B parameters, 12.88B active; FLOPs from the active ones (config's counts).
TEST(MoePlan, MixtralParametersAndFlops) {
  const Workload w = Load("mixtral-8x7b", 4096, 64);
  const ParamCounts c = CountParams(w.model);
  EXPECT_DOUBLE_EQ(w.params.total, static_cast<double>(c.total));
  EXPECT_DOUBLE_EQ(w.params.active, static_cast<double>(c.active));
  EXPECT_DOUBLE_EQ(w.params.experts, static_cast<double>(c.experts));
  EXPECT_NEAR(w.params.active / 1e9, 12.88, 0.01);
  // 6 x (active - embedding) + 12 L H d S, as tenax train counts it.
  const FlopsPerToken f = TrainingFlopsPerToken(w.model, 4096);
  EXPECT_NEAR(w.flops_per_token / f.total(), 1.0, 1e-12);
  EXPECT_TRUE(IsMoe(w));
  EXPECT_DOUBLE_EQ(MoeFraction(w), 1.0);
}

// Expert parallelism keeps E / ep experts on a GPU; FSDP's sharded state per GPU does not change
// (ep borrows dp_shard ranks), the gathered window and parameters in use shrink.
TEST(MoePlan, ExpertMemoryPerGpu) {
  const Workload w = Load("mixtral-8x7b", 4096, 64);
  const HardwareProfile hw = H100();
  double experts1 = 0, experts8 = 0;
  const double layer1 = LayerParamsOnGpu(w, 1, 1, &experts1);
  const double layer8 = LayerParamsOnGpu(w, 1, 8, &experts8);
  const double per_expert = 3.0 * 4096 * 14336;
  EXPECT_DOUBLE_EQ(experts1, 8 * per_expert);
  EXPECT_DOUBLE_EQ(experts8, per_expert);
  EXPECT_DOUBLE_EQ(layer1 - layer8, 7 * per_expert);
  Layout l;
  l.pp = 2;
  l.dp_shard = 32;
  l.micro_batch = 1;
  l.micro_batches = 2;
  l.recompute = Recompute::kFull;
  MemoryBreakdown m1 = EstimateMemory(w, hw, l);
  l.ep = 8;
  MemoryBreakdown m8 = EstimateMemory(w, hw, l);
  EXPECT_DOUBLE_EQ(m1.optimizer, m8.optimizer);
  EXPECT_DOUBLE_EQ(m1.expert_state, m8.expert_state);
  EXPECT_NEAR(m8.expert_state / 16 / (16 * 8 * per_expert / 32), 1.0, 1e-12);  // 16 layers held
  EXPECT_LT(m8.params, m1.params);  // the gathered window holds 1 expert instead of 8
  EXPECT_LT(m8.total(), m1.total());
}

// All-to-all: inside a node, (k - 1) / k of the bytes over NVLink; across nodes the remote share
// over the NIC, the local one over NVLink at the same time.
TEST(MoePlan, AllToAllTimeFollowsItsFormula) {
  const HardwareProfile hw = H100();
  const double bytes = 1e9;
  EXPECT_EQ(AllToAllTime(hw, 1, 1, bytes), 0.0);
  const double nvlink = hw.nvlink.bandwidth * hw.eff.collective_nvlink;
  const double nic = hw.network.bandwidth * hw.eff.collective_network;
  EXPECT_DOUBLE_EQ(AllToAllTime(hw, 1, 8, bytes), hw.nvlink.latency + 7.0 / 8.0 * bytes / nvlink);
  // 16 ranks, 8 per node: 7/16 of the bytes stay in the node, 8/16 leave it.
  EXPECT_DOUBLE_EQ(AllToAllTime(hw, 1, 16, bytes),
                   hw.network.latency + std::max(7.0 / 16.0 * bytes / nvlink, 0.5 * bytes / nic));
}

// The micro-batch cost of an MoE layer: ep 1 has no all-to-all; ep 8 sends 7/8 of each GPU's
// rows, 4 times per layer.
TEST(MoePlan, MicroBatchAllToAll) {
  const Workload w = Load("mixtral-8x7b", 4096, 64);
  const HardwareProfile hw = H100();
  MicroBatchShape ep8;
  ep8.ep = 8;
  const MicroBatchCost c1 = EstimateMicroBatch(w, hw, MicroBatchShape{});
  const MicroBatchCost c8 = EstimateMicroBatch(w, hw, ep8);
  EXPECT_EQ(c1.layer.ep_comm, 0.0);
  const double rows = 4096.0 * 2;  // tokens x top_k
  EXPECT_DOUBLE_EQ(c8.a2a_bytes_sent, rows * 4096 * 2 * 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(c8.layer.ep_comm, 4.0 * AllToAllTime(hw, 1, 8, rows * 4096 * 2));
  // Experts compute the same total work; with ep they run as fewer, larger GEMMs per GPU.
  EXPECT_GT(c8.layer.matmul, 0.5 * c1.layer.matmul);
  EXPECT_LT(c8.layer.matmul, 1.5 * c1.layer.matmul);
  // Full recomputation repeats the forward, its two all-to-alls included.
  MicroBatchShape ep8_full = ep8;
  ep8_full.recompute = Recompute::kFull;
  const MicroBatchCost r8 = EstimateMicroBatch(w, hw, ep8_full);
  EXPECT_EQ(c8.layer.recompute, 0.0);
  EXPECT_GT(r8.layer.recompute, 2.0 * AllToAllTime(hw, 1, 8, rows * 4096 * 2));
}

// The search tries every ep that divides dp_shard and the experts; its choice is the fastest of
// an exhaustive enumeration over (dp_shard, ep) with everything else fixed.
TEST(MoePlan, SearchChoosesTheFastestExpertParallelDegree) {
  const Workload w = Load("mixtral-8x7b", 4096, 256);
  const HardwareProfile hw = H100();
  SearchOptions o;
  o.gpus = 64;
  o.top_k = 3;
  o.fix = *ParseLayoutConstraints("tp=1,cp=1,pp=2,v=1,mbs=1,ac=full,fp8=no,reshard=yes");
  auto r = SearchLayouts(w, hw, o);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->best.empty());
  Candidate brute;
  brute.time.step = 1e300;
  for (int64_t ds : {1, 2, 4, 8, 16, 32}) {
    for (int64_t ep : {1, 2, 4, 8}) {
      Layout l;
      l.pp = 2;
      l.dp_shard = ds;
      l.dp_replicate = 32 / ds;
      l.ep = ep;
      l.micro_batch = 1;
      l.micro_batches = 256 / 32;
      l.recompute = Recompute::kFull;
      auto c = EvaluateLayout(w, hw, l);
      if (!c.ok()) {
        EXPECT_TRUE(ds % ep != 0) << c.status().ToString();
        continue;
      }
      if (c->memory.total() > hw.hbm_bytes) continue;
      if (c->time.step < brute.time.step) brute = *c;
    }
  }
  EXPECT_DOUBLE_EQ(r->best.front().time.step, brute.time.step)
      << LayoutName(r->best.front().layout) << " vs " << LayoutName(brute.layout);
  EXPECT_EQ(r->best.front().layout.ep, brute.layout.ep);
  // The per-ep table behind --explain: one entry per degree tried, the chosen one the fastest.
  ASSERT_GE(r->best_per_ep.size(), 2u);
  for (const auto& [ep, c] : r->best_per_ep) {
    EXPECT_EQ(c.layout.ep, ep);
    EXPECT_GE(c.time.step, r->best.front().time.step);
  }
}

TEST(MoePlan, DenseModelsHaveNoExpertParallelism) {
  const Workload w = Load("llama3-8b", 4096, 32);
  SearchOptions o;
  o.gpus = 8;
  auto r = SearchLayouts(w, H100(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->best_per_ep.empty());
  for (const auto& c : r->best) EXPECT_EQ(c.layout.ep, 1);
  Layout l;
  l.dp_shard = 8;
  l.ep = 2;
  l.micro_batches = 4;
  auto bad = EvaluateLayout(w, H100(), l);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ep (2) needs a mixture-of-experts model"),
            std::string::npos);
}

TEST(MoePlan, ExpertParallelProblemsNameTheFactors) {
  const Workload w = Load("mixtral-8x7b", 4096, 64);
  Layout l;
  l.dp_shard = 4;
  l.ep = 8;
  EXPECT_EQ(ExpertParallelProblem(w, l),
            "dp_shard (4) % ep (8) != 0 (expert parallelism borrows dp_shard ranks)");
  l.dp_shard = 48;
  l.ep = 16;
  EXPECT_EQ(ExpertParallelProblem(w, l), "n_experts (8) % ep (16) != 0");
}

}  // namespace
}  // namespace tenax::plan
