#define TENAX_COMPAT_C10D
#include "tenax/parallel/communicator.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "tenax/core/check.h"
#include "tenax/core/net.h"
#include "tenax/core/torch_compat.h"
#include "tenax/protocol/flight_recorder.h"

namespace tenax::parallel {
namespace {

using protocol::CollectiveScope;

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllReduceSum(at::Tensor&) override {}
  at::Tensor AllGather(const at::Tensor& shard) override { return shard.clone(); }
  at::Tensor ReduceScatterSum(const at::Tensor& full) override { return full.clone(); }
  void Broadcast(at::Tensor&, int) override {}
  void Barrier() override {}
  void Send(const at::Tensor&, int, int) override { TENAX_CHECK_MSG(false, "Send to self"); }
  void Recv(at::Tensor&, int, int) override { TENAX_CHECK_MSG(false, "Recv from self"); }
  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                      const std::vector<int64_t>& output_splits) override {
    TENAX_CHECK(input_splits.size() == 1 && output_splits == input_splits &&
                input_splits[0] == input.size(0));
    return input.clone();
  }
};

class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<compat::C10dGroup> group, int rank, int size)
      : group_(std::move(group)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllReduceSum(at::Tensor& t) override {
    CollectiveScope rec(recorder_, "all_reduce", name_, static_cast<int64_t>(t.nbytes()));
    std::vector<at::Tensor> v{t};
    Wait(group_->allreduce(v));
    stats_.all_reduce_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }

  at::Tensor AllGather(const at::Tensor& shard) override {
    CollectiveScope rec(recorder_, "all_gather", name_, static_cast<int64_t>(shard.nbytes()));
    std::vector<at::Tensor> in{shard.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int i = 0; i < size_; ++i) out[0].push_back(at::empty_like(in[0]));
    Wait(group_->allgather(out, in));
    stats_.all_gather_bytes += static_cast<int64_t>(shard.nbytes()) * (size_ - 1);
    ++stats_.calls;
    return at::cat(out[0]);
  }

  at::Tensor ReduceScatterSum(const at::Tensor& full) override {
    CollectiveScope rec(recorder_, "reduce_scatter", name_, static_cast<int64_t>(full.nbytes()));
    const int64_t chunk = full.numel() / size_;
    at::Tensor in = full.contiguous();
    stats_.reduce_scatter_bytes += static_cast<int64_t>(in.nbytes()) / size_ * (size_ - 1);
    ++stats_.calls;
    if (compat::HasNativeReduceScatter(*group_)) {
      at::Tensor out = at::empty({chunk}, in.options());
      Wait(group_->_reduce_scatter_base(out, in));
      return out;
    }
    // alltoall: rank r receives every rank's r-th chunk, then sums them locally.
    at::Tensor out = at::empty_like(in);
    std::vector<int64_t> splits;
    Wait(group_->alltoall_base(out, in, splits, splits));
    return out.view({size_, chunk}).sum(0);
  }

  void Broadcast(at::Tensor& t, int root) override {
    CollectiveScope rec(recorder_, "broadcast", name_, static_cast<int64_t>(t.nbytes()));
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    Wait(group_->broadcast(v, opts));
    stats_.broadcast_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }

  void Barrier() override {
    CollectiveScope rec(recorder_, "barrier", name_, 0);
    Wait(group_->barrier());
  }

  void Send(const at::Tensor& t, int peer, int tag) override {
    CollectiveScope rec(recorder_, "send", name_, static_cast<int64_t>(t.nbytes()));
    std::vector<at::Tensor> v{t.contiguous()};
    Wait(group_->send(v, peer, tag));
    stats_.p2p_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }
  void Recv(at::Tensor& t, int peer, int tag) override {
    CollectiveScope rec(recorder_, "recv", name_, static_cast<int64_t>(t.nbytes()));
    TENAX_CHECK(t.is_contiguous());
    std::vector<at::Tensor> v{t};
    Wait(group_->recv(v, peer, tag));
    stats_.p2p_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }

  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                      const std::vector<int64_t>& output_splits) override {
    TENAX_CHECK(static_cast<int>(input_splits.size()) == size_ &&
                static_cast<int>(output_splits.size()) == size_);
    // Flat buffers with element counts: c10d's row arithmetic divides by dim 0, which may be 0.
    int64_t row = 1;  // elements per row
    for (int64_t d = 1; d < input.dim(); ++d) row *= input.size(d);
    std::vector<int64_t> in_elems, out_elems;
    int64_t in_rows = 0, out_rows = 0, sent = 0;
    for (int r = 0; r < size_; ++r) {
      in_elems.push_back(input_splits[static_cast<size_t>(r)] * row);
      out_elems.push_back(output_splits[static_cast<size_t>(r)] * row);
      in_rows += input_splits[static_cast<size_t>(r)];
      out_rows += output_splits[static_cast<size_t>(r)];
      if (r != rank_) sent += input_splits[static_cast<size_t>(r)];
    }
    TENAX_CHECK(in_rows == input.size(0));
    std::vector<int64_t> out_shape = input.sizes().vec();
    out_shape[0] = out_rows;
    at::Tensor in = input.contiguous().view({-1});
    at::Tensor out = at::empty({out_rows * row}, in.options());
    const int64_t bytes = sent * row * static_cast<int64_t>(input.element_size());
    CollectiveScope rec(recorder_, "all_to_all", name_, bytes);
    Wait(group_->alltoall_base(out, in, out_elems, in_elems));
    stats_.all_to_all_bytes += bytes;
    ++stats_.calls;
    return out.view(out_shape);
  }

  PendingCollective AllGatherAsync(const at::Tensor& shard) override {
    std::vector<at::Tensor> in{shard.contiguous()};
    auto out = std::make_shared<std::vector<std::vector<at::Tensor>>>(1);
    for (int i = 0; i < size_; ++i) (*out)[0].push_back(at::empty_like(in[0]));
    auto work = group_->allgather(*out, in);
    stats_.all_gather_bytes += static_cast<int64_t>(shard.nbytes()) * (size_ - 1);
    ++stats_.calls;
    Track("all_gather", static_cast<int64_t>(shard.nbytes()), work);
    return PendingCollective([this, work, out, in] {
      Wait(work);
      return at::cat((*out)[0]);
    });
  }

  PendingCollective ReduceScatterSumAsync(const at::Tensor& full) override {
    const int64_t chunk = full.numel() / size_;
    at::Tensor in = full.contiguous();
    stats_.reduce_scatter_bytes += static_cast<int64_t>(in.nbytes()) / size_ * (size_ - 1);
    ++stats_.calls;
    if (compat::HasNativeReduceScatter(*group_)) {
      at::Tensor out = at::empty({chunk}, in.options());
      auto work = group_->_reduce_scatter_base(out, in);
      Track("reduce_scatter", static_cast<int64_t>(in.nbytes()), work);
      return PendingCollective([this, work, out, in] {
        Wait(work);
        return out;
      });
    }
    at::Tensor out = at::empty_like(in);
    std::vector<int64_t> splits;
    auto work = group_->alltoall_base(out, in, splits, splits);
    const int n = size_;
    Track("reduce_scatter", static_cast<int64_t>(in.nbytes()), work);
    return PendingCollective([this, work, out, in, n, chunk] {
      Wait(work);
      return out.view({n, chunk}).sum(0);
    });
  }

  PendingCollective AllReduceSumAsync(at::Tensor t) override {
    std::vector<at::Tensor> v{t};
    auto work = group_->allreduce(v);
    stats_.all_reduce_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
    Track("all_reduce", static_cast<int64_t>(t.nbytes()), work);
    return PendingCollective([this, work, t] {
      Wait(work);
      return t;
    });
  }

 private:
  // Records a non-blocking collective as issued now and completed when the backend finishes it
  // (the work's future callback, on the backend's thread), not when the caller waits: a rank
  // that issued it and then got stuck elsewhere must not look like it waits inside it.
  template <class W>
  void Track(const char* op, int64_t bytes, const W& work) {
    if (recorder_ == nullptr) return;
    FlightRecorder* rec = recorder_;
    const uint64_t id = rec->Enqueue(op, name_, bytes);
    rec->Start(id);  // Gloo starts it on its own thread right away
    work->getFuture()->addCallback([rec, id](c10::ivalue::Future&) { rec->End(id); });
  }

  // Blocks on `work`, counting the time in stats_.wait_s (the trainer subtracts it from a step's
  // time to get its compute time, which finds stragglers).
  template <class W>
  void Wait(const W& work) {
    const auto t0 = std::chrono::steady_clock::now();
    work->wait();
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  c10::intrusive_ptr<compat::C10dGroup> group_;
  int rank_, size_;
};

}  // namespace

std::unique_ptr<Communicator> MakeLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

struct ProcessGroups::Impl {
  DistEnv env;
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> store;
};

ProcessGroups::~ProcessGroups() = default;

Result<std::unique_ptr<ProcessGroups>> ProcessGroups::Connect(const DistEnv& env,
                                                              std::chrono::milliseconds timeout) {
  std::unique_ptr<ProcessGroups> pg(new ProcessGroups());
  pg->impl_ = std::make_unique<Impl>();
  pg->impl_->env = env;
  pg->impl_->timeout = timeout;
  if (!env.distributed()) {
    pg->world_ = MakeLocalCommunicator();
    return pg;
  }
#if !defined(TENAX_HAVE_GLOO)
  // Said before any rank waits for the others: no retry can help (torch_compat.h).
  return InvalidArgument(fmt::format(
      "rank {} of {}: this tenax was built against a libtorch without Gloo's headers (PyTorch's "
      "pip wheels ship none), so it has no process groups: run one process (no tenax launch "
      "--nproc-per-node > 1), or build against a libtorch that has them (Debian's "
      "libtorch-dev, or PyTorch built from source)",
      env.rank, env.world));
#endif
  if (env.rank != 0) {
    // c10d's client sleeps a whole second between attempts while the server is not up yet
    // (rank 0 is still starting): wait for the listener with short retries instead.
    Status up = WaitForTcpListener(env.master_addr, env.master_port,
                                   std::chrono::duration<double>(timeout).count());
    if (!up.ok()) {
      return Unavailable(
          fmt::format("rank {}: cannot reach the rendezvous store: {} (is rank 0 / "
                      "the launcher running, and MASTER_ADDR/MASTER_PORT right?)",
                      env.rank, up.message()));
    }
  }
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0;
    opts.numWorkers = env.world;
    opts.waitWorkers = true;
    opts.timeout = timeout;
    pg->impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    auto world_store = c10::make_intrusive<c10d::PrefixStore>("world", pg->impl_->store);
    pg->world_ = std::make_unique<C10dCommunicator>(
        compat::MakeGlooGroup(world_store, env.rank, env.world, timeout), env.rank, env.world);
  } catch (const std::exception& e) {
    return Unavailable(fmt::format(
        "rank {}: cannot join the process group at {}:{} within {}s: {} (is rank 0 / the "
        "launcher running, and MASTER_ADDR/MASTER_PORT right?)",
        env.rank, env.master_addr, env.master_port, timeout.count() / 1000, e.what()));
  }
  return pg;
}

Result<std::unique_ptr<Communicator>> ProcessGroups::NewGroup(const std::string& name,
                                                              const std::vector<int>& ranks) {
  const int me = impl_->env.rank;
  auto it = std::find(ranks.begin(), ranks.end(), me);
  if (it == ranks.end()) return Internal("rank " + std::to_string(me) + " is not in group " + name);
  if (ranks.size() == 1) return MakeLocalCommunicator();
  const int local = static_cast<int>(it - ranks.begin());
  std::string key = name;
  for (int r : ranks) key += "_" + std::to_string(r);
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>(key, impl_->store);
    return std::unique_ptr<Communicator>(std::make_unique<C10dCommunicator>(
        compat::MakeGlooGroup(store, local, static_cast<int>(ranks.size()), impl_->timeout), local,
        static_cast<int>(ranks.size())));
  } catch (const std::exception& e) {
    return Unavailable(
        fmt::format("rank {}: cannot create process group {}: {}", me, key, e.what()));
  }
}

}  // namespace tenax::parallel
