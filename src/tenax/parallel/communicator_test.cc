#include "tenax/parallel/communicator.h"

#include <gtest/gtest.h>

#include <map>

#include "tenax/core/net.h"
#include "tenax/parallel/testing.h"
#include "tenax/protocol/flight_recorder.h"

namespace tenax::parallel {
namespace {

// Runs as one of 4 ranks (see Communicator.FourRanks). Values are chosen so every result has a
// closed form: rank r contributes r + 1 (or a shard of known integers).
TEST(CommunicatorWorker, DISABLED_Collectives) {
  auto env = ReadDistEnv();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  auto groups = ProcessGroups::Connect(*env, std::chrono::seconds(30));
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  Communicator& world = (*groups)->world();
  const int r = world.rank(), n = world.size();
  ASSERT_EQ(n, 4);

  at::Tensor t = at::full({3}, r + 1.0, at::kFloat);
  world.AllReduceSum(t);
  EXPECT_TRUE(at::equal(t, at::full({3}, 10.0, at::kFloat)));  // 1 + 2 + 3 + 4

  at::Tensor shard = at::arange(2, at::kFloat) + 2 * r;  // rank r holds [2r, 2r + 1]
  EXPECT_TRUE(at::equal(world.AllGather(shard), at::arange(8, at::kFloat)));

  // Every rank sends arange(8) * (r + 1); rank r gets elements [2r, 2r + 2) summed: x * 10.
  at::Tensor full = at::arange(8, at::kFloat) * (r + 1);
  EXPECT_TRUE(at::equal(world.ReduceScatterSum(full), (at::arange(2, at::kFloat) + 2 * r) * 10));

  at::Tensor b = at::full({2}, static_cast<float>(r), at::kFloat);
  world.Broadcast(b, 2);
  EXPECT_TRUE(at::equal(b, at::full({2}, 2.0, at::kFloat)));

  // Sub-groups: {0, 2} and {1, 3}.
  std::vector<int> ranks = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
  auto sub = (*groups)->NewGroup("pairs", ranks);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ((*sub)->size(), 2);
  EXPECT_EQ((*sub)->rank(), r / 2);
  at::Tensor s = at::full({1}, static_cast<float>(r), at::kFloat);
  (*sub)->AllReduceSum(s);
  EXPECT_EQ(s.item<float>(), r % 2 == 0 ? 2.0f : 4.0f);
  // Point to point around a ring: r sends to r + 1, receives from r - 1.
  at::Tensor out = at::full({4}, static_cast<float>(r), at::kFloat);
  at::Tensor in = at::empty({4}, at::kFloat);
  if (r % 2 == 0) {
    world.Send(out, (r + 1) % n, 7);
    world.Recv(in, (r + n - 1) % n, 7);
  } else {
    world.Recv(in, (r + n - 1) % n, 7);
    world.Send(out, (r + 1) % n, 7);
  }
  EXPECT_TRUE(at::equal(in, at::full({4}, static_cast<float>((r + n - 1) % n), at::kFloat)));
  world.Barrier();
  EXPECT_EQ(world.stats().all_reduce_bytes, 12);
  EXPECT_EQ(world.stats().reduce_scatter_bytes, 8 * 4 / 4 * 3);  // (n-1)/n of the input
}

TEST(Communicator, FourRanks) {
  auto codes = testing::RunRanks(4, "CommunicatorWorker.DISABLED_Collectives");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// parallelism.backend: auto follows the device; a setting that cannot work says what to change.
TEST(ResolveBackend, AutoFollowsTheDeviceAndImpossibleSettingsNameTheFix) {
  const at::Device cpu(at::kCPU), gpu(at::kCUDA, 0);
  EXPECT_EQ(*ResolveBackend("auto", cpu), Backend::kGloo);
  EXPECT_EQ(*ResolveBackend("gloo", cpu), Backend::kGloo);
  EXPECT_EQ(*ResolveBackend("gloo", gpu), Backend::kGloo);
  EXPECT_EQ(*ResolveBackend("auto", gpu), NcclBuilt() ? Backend::kNccl : Backend::kGloo);
  auto nccl_on_cpu = ResolveBackend("nccl", cpu);
  ASSERT_FALSE(nccl_on_cpu.ok());
  EXPECT_NE(nccl_on_cpu.status().message().find("parallelism.backend = \"gloo\""),
            std::string::npos)
      << nccl_on_cpu.status().message();
  if (NcclBuilt()) {
    EXPECT_EQ(*ResolveBackend("nccl", gpu), Backend::kNccl);
  }
  EXPECT_FALSE(ResolveBackend("mpi", cpu).ok());
  EXPECT_STREQ(BackendName(Backend::kNccl), "nccl");
  EXPECT_STREQ(BackendName(Backend::kGloo), "gloo");
}

// The code the NCCL path shares with Gloo, on a one-rank Gloo group (the GPU tests run the same
// on one NCCL rank): flat all-gather and reduce-scatter, gathering into a caller's buffer, and
// flight records that end when the work is done.
TEST(Communicator, OneRankC10dGroupRunsEveryCollectiveAndRecordsCompletion) {
  DistEnv env;
  env.master_port = FreeTcpPort();
  GroupOptions go;
  go.timeout = std::chrono::seconds(30);
  go.c10d_for_one_rank = true;
  auto groups = ProcessGroups::Connect(env, go);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  Communicator& world = (*groups)->world();
  protocol::FlightRecorder rec(0);
  world.SetFlightRecorder(&rec, "world");
  EXPECT_EQ(world.device(), at::Device(at::kCPU));
  at::Tensor t = at::arange(6, at::kFloat);
  world.AllReduceSum(t);
  EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat)));
  EXPECT_TRUE(at::equal(world.AllGather(at::arange(4, at::kFloat).view({2, 2})),
                        at::arange(4, at::kFloat)));
  EXPECT_TRUE(
      at::equal(world.ReduceScatterSum(at::arange(8, at::kDouble)), at::arange(8, at::kDouble)));
  at::Tensor out = at::zeros({4}, at::kBFloat16);
  at::Tensor got = world.AllGatherAsync(at::arange(4, at::kFloat).to(at::kBFloat16), out).Wait();
  EXPECT_TRUE(got.is_same(out)) << "gathered into the caller's buffer";
  EXPECT_TRUE(at::equal(out.to(at::kFloat), at::arange(4, at::kFloat)));
  at::Tensor a = at::full({2}, 3.0, at::kFloat);
  EXPECT_TRUE(at::equal(world.AllReduceSumAsync(a).Wait(), at::full({2}, 3.0, at::kFloat)));
  EXPECT_TRUE(at::equal(world.ReduceScatterSumAsync(at::ones({4}, at::kFloat)).Wait(),
                        at::ones({4}, at::kFloat)));
  world.Barrier();
  rec.Poll();
  EXPECT_FALSE(rec.OldestPending().has_value()) << rec.OldestPending()->op << " still pending";
  EXPECT_EQ(rec.Records().size(), 7u);
  auto sub = (*groups)->NewGroup("tp", {0});
  ASSERT_TRUE(sub.ok());
  at::Tensor s = at::ones({3}, at::kFloat);
  (*sub)->AllReduceSum(s);
  EXPECT_TRUE(at::equal(s, at::ones({3}, at::kFloat)));
  (*groups)->AbortAll();  // Gloo: nothing to abort, and nothing breaks
}

TEST(Communicator, LocalIsIdentity) {
  auto c = MakeLocalCommunicator();
  at::Tensor t = at::arange(4, at::kFloat);
  c->AllReduceSum(t);
  EXPECT_TRUE(at::equal(t, at::arange(4, at::kFloat)));
  EXPECT_TRUE(at::equal(c->ReduceScatterSum(t), t));
}

TEST(DistEnv, TorchrunSlurmAndErrors) {
  auto from = [](std::map<std::string, std::string> m) {
    return ReadDistEnv([m](const char* n) -> const char* {
      auto it = m.find(n);
      return it == m.end() ? nullptr : it->second.c_str();
    });
  };
  auto single = from({});
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(single->distributed());
  auto tr = from({{"RANK", "3"},
                  {"WORLD_SIZE", "8"},
                  {"LOCAL_RANK", "1"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->rank, 3);
  EXPECT_EQ(tr->world, 8);
  EXPECT_EQ(tr->local_rank, 1);
  EXPECT_EQ(tr->master_addr, "10.0.0.1");
  EXPECT_EQ(tr->master_port, 1234);
  auto sl = from({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "16"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_NTASKS_PER_NODE", "4(x4)"},
                  {"SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1"}});
  ASSERT_TRUE(sl.ok());
  EXPECT_EQ(sl->source, "slurm");
  EXPECT_EQ(sl->rank, 5);
  EXPECT_EQ(sl->local_world, 4);
  EXPECT_EQ(sl->master_addr, "10.1.1.1");
  EXPECT_FALSE(from({{"RANK", "1"}}).ok());
  EXPECT_FALSE(from({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).ok());
  EXPECT_FALSE(from({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).ok());
}

}  // namespace
}  // namespace tenax::parallel
