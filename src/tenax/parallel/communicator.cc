#include "tenax/parallel/communicator.h"

#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
// PyTorch's wheels carry Gloo inside libtorch but ship none of its headers; scripts/setup
// installs Debian's libgloo-dev for the ones c10d's header includes (tests/README: the suite is
// what shows that c10d's Gloo header and the wheel's Gloo agree).
#if __has_include(<gloo/algorithm.h>)
#define TENAX_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(TENAX_WITH_NCCL)
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "tenax/core/check.h"
#include "tenax/core/net.h"
#include "tenax/parallel/etcd_store.h"
#include "tenax/parallel/watched_store.h"
#include "tenax/protocol/flight_recorder.h"

namespace tenax::parallel {
namespace {

using Work = c10::intrusive_ptr<c10d::Work>;

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllReduceSum(at::Tensor&) override {}
  at::Tensor AllGather(const at::Tensor& shard) override { return shard.reshape({-1}).clone(); }
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

// One c10d backend (Gloo or NCCL) behind the Communicator interface. Every collective goes
// through Blocking() or Issue(), which record it in the flight recorder and learn its completion
// from the work itself (NCCL: Work::isCompleted, its end event fired on the GPU; Gloo: its future,
// completed by Gloo's worker, or returning from a wait), never from a future callback on NCCL,
// whose future completes when the collective is enqueued, not when the GPU has run it.
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<c10d::Backend> group, int rank, int size, at::Device device,
                   std::function<std::optional<std::string>()> abandon = {})
      : group_(std::move(group)),
        rank_(rank),
        size_(size),
        device_(device),
        abandon_(device.is_cuda() ? nullptr : std::move(abandon)) {}
  ~C10dCommunicator() override {
    // A collective abandoned (GroupOptions::abandon) still runs on Gloo's thread until its own
    // timeout, and Gloo's destructor would wait for it: the group is left to it instead.
    if (abandoned_) (void)group_.release();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  at::Device device() const override { return device_; }

  void AllReduceSum(at::Tensor& t) override {
    at::Tensor x = OnDevice(t);
    std::vector<at::Tensor> v{x};
    Blocking("all_reduce", x.nbytes(), [&] { return group_->allreduce(v); });
    Restore(t, x);
    stats_.all_reduce_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }

  at::Tensor AllGather(const at::Tensor& shard) override {
    at::Tensor in = OnDevice(shard).reshape({-1});
    at::Tensor out = at::empty({size_ * in.numel()}, in.options());
    Blocking("all_gather", in.nbytes(), [&] { return group_->_allgather_base(out, in); });
    stats_.all_gather_bytes += static_cast<int64_t>(in.nbytes()) * (size_ - 1);
    ++stats_.calls;
    return out.to(shard.device());
  }

  at::Tensor ReduceScatterSum(const at::Tensor& full) override {
    return ReduceScatterSumAsync(full).Wait();
  }

  void Broadcast(at::Tensor& t, int root) override {
    at::Tensor x = OnDevice(t);
    std::vector<at::Tensor> v{x};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    Blocking("broadcast", x.nbytes(), [&] { return group_->broadcast(v, opts); });
    Restore(t, x);
    stats_.broadcast_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }

  // NCCL's barrier is an all-reduce on the bound device whose Wait blocks the host as well.
  void Barrier() override {
    Blocking("barrier", 0, [&] { return group_->barrier(); });
  }

  void Send(const at::Tensor& t, int peer, int tag) override {
    std::vector<at::Tensor> v{OnDevice(t)};
    Blocking(
        "send", t.nbytes(), [&] { return group_->send(v, peer, tag); }, /*p2p=*/true);
    stats_.p2p_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
  }
  PendingCollective SendAsync(const at::Tensor& t, int peer, int tag) override {
    at::Tensor x = OnDevice(t);
    std::vector<at::Tensor> v{x};
    auto [work, id] = Issue("send", t.nbytes(), [&] { return group_->send(v, peer, tag); });
    stats_.p2p_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
    // `x` stays referenced until the send is waited for.
    return PendingCollective([this, work = work, id = id, x]() mutable {
      Wait(work, /*p2p=*/true);
      Waited(id);
      return x;
    });
  }
  PendingCollective RecvAsync(at::Tensor t, int peer, int tag) override {
    TENAX_CHECK(t.is_contiguous());
    at::Tensor x = OnDevice(t);
    std::vector<at::Tensor> v{x};
    auto [work, id] = Issue("recv", t.nbytes(), [&] { return group_->recv(v, peer, tag); });
    stats_.p2p_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
    return PendingCollective([this, work = work, id = id, x, t]() mutable {
      Wait(work, /*p2p=*/true);
      Waited(id);
      Restore(t, x);
      return t;
    });
  }
  void Recv(at::Tensor& t, int peer, int tag) override {
    TENAX_CHECK(t.is_contiguous());
    at::Tensor x = OnDevice(t);
    std::vector<at::Tensor> v{x};
    Blocking(
        "recv", t.nbytes(), [&] { return group_->recv(v, peer, tag); }, /*p2p=*/true);
    Restore(t, x);
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
    at::Tensor in = OnDevice(input).contiguous().view({-1});
    at::Tensor out = at::empty({out_rows * row}, in.options());
    const int64_t bytes = sent * row * static_cast<int64_t>(input.element_size());
    Blocking("all_to_all", bytes,
             [&] { return group_->alltoall_base(out, in, out_elems, in_elems); });
    stats_.all_to_all_bytes += bytes;
    ++stats_.calls;
    return out.view(out_shape).to(input.device());
  }

  PendingCollective AllGatherAsync(const at::Tensor& shard, at::Tensor out) override {
    at::Tensor in = OnDevice(shard).reshape({-1});
    const at::Device back = out.defined() ? out.device() : shard.device();
    // Straight into the caller's buffer when it can take the collective's output as it is.
    const bool direct = out.defined() && out.device() == device_ && out.is_contiguous() &&
                        out.scalar_type() == in.scalar_type();
    at::Tensor dst = direct ? out.view({-1}) : at::empty({size_ * in.numel()}, in.options());
    TENAX_CHECK_MSG(dst.numel() == size_ * in.numel(), "AllGatherAsync: wrong output size");
    auto [work, id] =
        Issue("all_gather", in.nbytes(), [&] { return group_->_allgather_base(dst, in); });
    stats_.all_gather_bytes += static_cast<int64_t>(in.nbytes()) * (size_ - 1);
    ++stats_.calls;
    return PendingCollective([this, work = work, id = id, dst, in, out, back, direct] {
      Wait(work);
      Waited(id);
      if (!out.defined()) return dst.to(back);
      if (!direct) out.view({-1}).copy_(dst);
      return out;
    });
  }

  // NCCL: one flat reduce_scatter_tensor. Gloo: an alltoall and a local sum (the same bytes per
  // rank as a ring reduce-scatter, (N-1)/N of the buffer): Gloo's own flat reduce-scatter
  // completes neither its future nor isCompleted, so neither the flight record nor a hang
  // analysis could tell when it finished (measured with PyTorch 2.11; every other Gloo
  // collective tenax uses reports both).
  PendingCollective ReduceScatterSumAsync(const at::Tensor& full) override {
    at::Tensor in = OnDevice(full).reshape({-1});
    TENAX_CHECK_MSG(in.numel() % size_ == 0, "ReduceScatterSum: length not divisible by size");
    const int64_t chunk = in.numel() / size_;
    const bool flat = device_.is_cuda();
    at::Tensor out = flat ? at::empty({chunk}, in.options()) : at::empty_like(in);
    auto [work, id] = Issue("reduce_scatter", in.nbytes(), [&] {
      if (flat) return group_->_reduce_scatter_base(out, in);
      std::vector<int64_t> equal_splits;
      return group_->alltoall_base(out, in, equal_splits, equal_splits);
    });
    stats_.reduce_scatter_bytes += static_cast<int64_t>(in.nbytes()) / size_ * (size_ - 1);
    ++stats_.calls;
    const at::Device back = full.device();
    const int n = size_;
    return PendingCollective([this, work = work, id = id, out, in, back, flat, n, chunk] {
      Wait(work);
      Waited(id);
      // alltoall: rank r holds every rank's r-th chunk; their sum is its slice.
      return (flat ? out : out.view({n, chunk}).sum(0)).to(back);
    });
  }

  PendingCollective AllReduceSumAsync(at::Tensor t) override {
    at::Tensor x = OnDevice(t);
    std::vector<at::Tensor> v{x};
    auto [work, id] = Issue("all_reduce", x.nbytes(), [&] { return group_->allreduce(v); });
    stats_.all_reduce_bytes += static_cast<int64_t>(t.nbytes());
    ++stats_.calls;
    return PendingCollective([this, work = work, id = id, t, x]() mutable {
      Wait(work);
      Waited(id);
      Restore(t, x);
      return t;
    });
  }

  PendingCollective ExchangeAsync(const at::Tensor& send, int to, at::Tensor recv, int from,
                                  int tag) override {
    TENAX_CHECK(recv.is_contiguous());
    at::Tensor out = OnDevice(send), in = OnDevice(recv);
    std::vector<at::Tensor> sv{out}, rv{in};
    stats_.p2p_bytes += static_cast<int64_t>(send.nbytes() + recv.nbytes());
    stats_.calls += 2;
    std::vector<std::pair<Work, uint64_t>> works;
    if (group_->supportsCoalescing()) {  // NCCL: one group, so that no send waits for its recv
      works.push_back(Issue("send_recv", send.nbytes() + recv.nbytes(), [&] {
        group_->startCoalescing();
        group_->recv(rv, from, tag);
        group_->send(sv, to, tag);
        return group_->endCoalescing();
      }));
    } else {
      works.push_back(Issue("recv", recv.nbytes(), [&] { return group_->recv(rv, from, tag); }));
      works.push_back(Issue("send", send.nbytes(), [&] { return group_->send(sv, to, tag); }));
    }
    // `out` stays referenced until the send is waited for.
    return PendingCollective([this, works, out, in, recv]() mutable {
      for (const auto& [work, id] : works) {
        Wait(work);
        Waited(id);
      }
      Restore(recv, in);
      return recv;
    });
  }

  void Abort() override { group_->abort(); }

 private:
  // The tensor the collective runs on: `t` itself when it is already on the group's device and
  // dense, otherwise a copy there (control-plane values handed to an NCCL group from the CPU).
  at::Tensor OnDevice(const at::Tensor& t) const {
    if (t.device() == device_ && t.is_contiguous()) return t;
    return t.to(device_).contiguous();
  }
  // After an in-place collective on OnDevice(t): the result back in `t` if it ran on a copy.
  static void Restore(at::Tensor& t, const at::Tensor& x) {
    if (!x.is_same(t)) t.copy_(x);
  }

  // A collective the caller waits for now. Recorded from before it is issued (Gloo runs it on
  // its own thread at once) until it completes; a collective that throws stays pending in the
  // record, as it did not complete.
  template <class F>
  void Blocking(const char* op, size_t bytes, F&& issue, bool p2p = false) {
    const uint64_t id = recorder_ ? recorder_->Begin(op, name_, static_cast<int64_t>(bytes)) : 0;
    Work work = issue();
    Wait(work, p2p);
    Record(id, work, /*waited=*/true);
  }
  // A collective waited for later (PendingCollective::Wait, which calls Waited).
  template <class F>
  std::pair<Work, uint64_t> Issue(const char* op, size_t bytes, F&& issue) {
    const uint64_t id = recorder_ ? recorder_->Enqueue(op, name_, static_cast<int64_t>(bytes)) : 0;
    if (recorder_) recorder_->Start(id);  // the backend starts it as it can, without a signal
    Work work = issue();
    Record(id, work, /*waited=*/false);
    return {work, id};
  }
  // After PendingCollective::Wait: on Gloo the collective is done now.
  void Waited(uint64_t id) {
    if (recorder_ != nullptr && !device_.is_cuda()) recorder_->End(id);
  }
  // How the host learns that a collective has finished where it runs, without waiting for it.
  // NCCL: its end event has fired on the GPU (isCompleted). Gloo: its future, which Gloo's worker
  // completes when done, or isCompleted for the works that have no future (Gloo's flat
  // collectives); the ones that update neither end when they are waited for.
  static std::function<bool()> Probe(const Work& work, bool cuda) {
    if (!cuda) {
      try {
        auto future = work->getFuture();
        return [future] { return future->completed(); };
      } catch (const c10::Error&) {
      }
    }
    return [work] { return work->isCompleted(); };
  }
  // Ends the record now if the work is done (Gloo after a wait: Gloo's wait returns when it is),
  // or when the recorder's watchdog finds it done (NCCL's wait does not block the host; an async
  // Gloo collective finishes on Gloo's thread).
  void Record(uint64_t id, const Work& work, bool waited) {
    if (recorder_ == nullptr) return;
    const bool cuda = device_.is_cuda();
    if (waited && !cuda) {
      recorder_->End(id);
      return;
    }
    std::function<bool()> done = Probe(work, cuda);
    if (done()) {
      recorder_->End(id);
    } else {
      recorder_->EndWhen(id, std::move(done));
    }
  }

  // Blocks on `work` (Gloo: until it is done; NCCL: only until the current stream is ordered
  // after it), counting the time in stats_.wait_s (the trainer subtracts it from a step's time
  // to get its compute time, which finds stragglers).
  // With abandon_ (Gloo): in slices of 100 ms, asking it between them (GroupOptions::abandon).
  void Wait(const Work& work, bool p2p = false) {
    const auto t0 = std::chrono::steady_clock::now();
    if (abandon_ && p2p) {
      WaitOnAThreadOfItsOwn(work);
    } else if (abandon_) {
      const std::function<bool()> done = Probe(work, /*cuda=*/false);
      while (!done()) {
        try {
          work->wait(std::chrono::milliseconds(100));
          break;
        } catch (const c10::Error&) {
          if (done()) break;  // it failed: the wait below says how
        }
        if (std::optional<std::string> why = abandon_()) {
          abandoned_ = true;
          throw std::runtime_error("collective abandoned: " + *why);
        }
      }
    }
    if (!abandon_ || !p2p) work->wait();
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Gloo's send and receive have no future, and a timed wait that runs out ends the transfer for
  // good (the buffer reports the timeout to its context): waited for without a limit on a thread
  // of its own, while this one asks abandon_. An abandoned one stays on that thread until
  // Gloo's timeout, holding the work (and through it the group, which abandoned_ keeps).
  void WaitOnAThreadOfItsOwn(const Work& work) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([work, done] {
      try {
        work->wait();
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    }).detach();
    while (finished.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (std::optional<std::string> why = abandon_()) {
        abandoned_ = true;
        throw std::runtime_error("collective abandoned: " + *why);
      }
    }
    finished.get();
  }

  c10::intrusive_ptr<c10d::Backend> group_;
  const int rank_, size_;
  const at::Device device_;
  const std::function<std::optional<std::string>()> abandon_;
  bool abandoned_ = false;  // a collective is left running: the group must outlive this object
};

}  // namespace

std::unique_ptr<Communicator> MakeLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

const char* BackendName(Backend b) { return b == Backend::kNccl ? "nccl" : "gloo"; }

bool NcclBuilt() {
#if defined(TENAX_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

Result<Backend> ResolveBackend(const std::string& setting, const at::Device& device) {
  if (setting == "gloo") return Backend::kGloo;
  if (setting == "auto") return device.is_cuda() && NcclBuilt() ? Backend::kNccl : Backend::kGloo;
  if (setting != "nccl") {
    return InvalidArgument(fmt::format(
        "parallelism.backend = \"{}\": expected \"auto\", \"nccl\" or \"gloo\"", setting));
  }
  if (!NcclBuilt()) {
    return InvalidArgument(
        "parallelism.backend = \"nccl\", but this tenax was built without NCCL (no CUDA libtorch "
        "or no nccl.h at configure time): set it to \"auto\" or \"gloo\", or rebuild with "
        "scripts/setup's libtorch (PyTorch's wheel brings NCCL)");
  }
  if (!device.is_cuda()) {
    return InvalidArgument(
        "parallelism.backend = \"nccl\" needs GPU ranks, but training.device resolved to the "
        "CPU: set parallelism.backend = \"gloo\" (or \"auto\"), or training.device = \"cuda\" on "
        "a machine with GPUs");
  }
  return Backend::kNccl;
}

namespace {

// c10d's group for `size` ranks over `store`, as `options` asks. Throws (c10::Error) when it
// cannot be made; the callers turn that into a Status.
c10::intrusive_ptr<c10d::Backend> MakeGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int size, const GroupOptions& options) {
  if (options.backend == Backend::kNccl) {
#if defined(TENAX_WITH_NCCL)
    // c10d's NCCL watchdog, on an NCCL error, aborts the communicators and leaves the process
    // up (2 = CleanUpOnly), so the error reaches the rank's own handling (exit report naming the
    // collective, the exit code the launcher reads) instead of a SIGABRT. Set once, before the
    // first group reads it; a user's own setting wins.
    static std::once_flag once;
    std::call_once(once, [] { ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0); });
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = options.nccl_timeout.count() > 0 ? options.nccl_timeout : options.timeout;
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
    // Bound: barriers run on this device (not a guess), and the communicator is made now, so a
    // rank that cannot join says so here rather than in its first collective.
    group->setBoundDeviceId(options.device);
    group->eagerConnectSingleDevice(options.device);
    return group;
#else
    TENAX_CHECK_MSG(false, "NCCL group requested in a build without NCCL (ResolveBackend)");
#endif
  }
#if defined(TENAX_HAVE_GLOO)
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = options.timeout;
  // GLOO_SOCKET_IFNAME picks the network interface, as in PyTorch (whose Python layer, not the
  // C++ default device, reads it); without it Gloo uses the address the hostname resolves to.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  opts->devices.push_back(ifname != nullptr && *ifname != '\0'
                              ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                              : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
#else
  throw std::runtime_error(
      "this tenax was built without Gloo's headers (Debian's libgloo-dev; scripts/setup "
      "installs it), so CPU ranks have no process groups: run one process, use NCCL on GPUs, or "
      "rebuild after scripts/setup");
#endif
}

}  // namespace

struct ProcessGroups::Impl {
  DistEnv env;
  GroupOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  std::mutex mu;
  // Every c10d group made here, world included, for AbortAll (shared with its communicator, so
  // one its owner has destroyed is still safe to abort). Guarded by mu.
  std::vector<c10::intrusive_ptr<c10d::Backend>> made;
  // Adopt: the groups it can give (live recovery); null otherwise.
  GroupMaker make_group;
};

ProcessGroups::~ProcessGroups() = default;

Backend ProcessGroups::backend() const { return impl_->options.backend; }

Result<std::unique_ptr<ProcessGroups>> ProcessGroups::Connect(const DistEnv& env,
                                                              std::chrono::milliseconds timeout) {
  GroupOptions options;
  options.timeout = timeout;
  return Connect(env, options);
}

Result<std::unique_ptr<ProcessGroups>> ProcessGroups::Connect(const DistEnv& env,
                                                              const GroupOptions& options) {
  std::unique_ptr<ProcessGroups> pg(new ProcessGroups());
  pg->impl_ = std::make_unique<Impl>();
  pg->impl_->env = env;
  pg->impl_->options = options;
  if (!env.distributed() && !options.c10d_for_one_rank) {
    pg->world_ = MakeLocalCommunicator();
    return pg;
  }
  if (options.backend == Backend::kNccl && !NcclBuilt()) {
    return InvalidArgument("NCCL groups need a build with NCCL (parallel/communicator.h)");
  }
#if !defined(TENAX_HAVE_GLOO)
  if (options.backend == Backend::kGloo) {
    // Said before any rank waits for the others: no retry can help.
    return InvalidArgument(fmt::format(
        "rank {} of {}: this tenax was built without Gloo's headers (Debian's libgloo-dev), so "
        "CPU ranks have no process groups: run ./scripts/setup and rebuild, or train on GPUs "
        "(parallelism.backend = \"nccl\")",
        env.rank, env.world));
  }
#endif
  const std::chrono::milliseconds timeout = options.timeout;
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
    auto group = MakeGroup(world_store, env.rank, env.world, options);
    pg->impl_->made.push_back(group);
    pg->world_ = std::make_unique<C10dCommunicator>(group, env.rank, env.world, options.device);
  } catch (const std::exception& e) {
    return Unavailable(fmt::format(
        "rank {}: cannot join the {} process group at {}:{} within {}s: {} (is rank 0 / the "
        "launcher running, and MASTER_ADDR/MASTER_PORT right?)",
        env.rank, BackendName(options.backend), env.master_addr, env.master_port,
        timeout.count() / 1000, e.what()));
  }
  return pg;
}

std::unique_ptr<ProcessGroups> ProcessGroups::Adopt(const DistEnv& env,
                                                    std::unique_ptr<Communicator> world,
                                                    GroupMaker make_group) {
  std::unique_ptr<ProcessGroups> pg(new ProcessGroups());
  pg->impl_ = std::make_unique<Impl>();
  pg->impl_->env = env;
  pg->impl_->make_group = std::move(make_group);
  pg->world_ = std::move(world);
  return pg;
}

Result<std::unique_ptr<Communicator>> ProcessGroups::NewGroup(const std::string& name,
                                                              const std::vector<int>& ranks) {
  const int me = impl_->env.rank;
  auto it = std::find(ranks.begin(), ranks.end(), me);
  if (it == ranks.end()) return Internal("rank " + std::to_string(me) + " is not in group " + name);
  if (ranks.size() == 1 && !impl_->options.c10d_for_one_rank) return MakeLocalCommunicator();
  if (impl_->make_group) {
    TENAX_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, impl_->make_group(name, ranks));
    if (c) return c;
    return InvalidArgument(fmt::format(
        "group {} ({} of {} ranks) is not supported with this world (live recovery re-forms the "
        "groups across replicas and inside one only)",
        name, ranks.size(), impl_->env.world));
  }
  const int local = static_cast<int>(it - ranks.begin());
  std::string key = name;
  for (int r : ranks) key += "_" + std::to_string(r);
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>(key, impl_->store);
    auto group = MakeGroup(store, local, static_cast<int>(ranks.size()), impl_->options);
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->made.push_back(group);
    }
    return std::unique_ptr<Communicator>(std::make_unique<C10dCommunicator>(
        group, local, static_cast<int>(ranks.size()), impl_->options.device));
  } catch (const std::exception& e) {
    return Unavailable(
        fmt::format("rank {}: cannot create process group {}: {}", me, key, e.what()));
  }
}

void ProcessGroups::AbortAll() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& group : impl_->made) group->abort();
}

Result<std::unique_ptr<Communicator>> ConnectFileStoreGroup(const std::string& path, int rank,
                                                            int size, const GroupOptions& options) {
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(path, size);
    store->setTimeout(options.timeout);
    if (options.give_up) store = c10::make_intrusive<WatchedStore>(store, options.give_up);
    auto group = MakeGroup(store, rank, size, options);
    return std::unique_ptr<Communicator>(
        std::make_unique<C10dCommunicator>(group, rank, size, options.device, options.abandon));
  } catch (const std::exception& e) {
    return Unavailable(
        fmt::format("rank {} of {}: cannot form the group of store {} within {}s: {}", rank, size,
                    path, options.timeout.count() / 1000, e.what()));
  }
}

Result<std::unique_ptr<Communicator>> ConnectEtcdStoreGroup(const etcd::EtcdOptions& etcd,
                                                            const std::string& prefix, int rank,
                                                            int size, const GroupOptions& options) {
  try {
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<EtcdStore>(etcd, prefix, options.timeout, options.give_up);
    if (options.give_up) store = c10::make_intrusive<WatchedStore>(store, options.give_up);
    auto group = MakeGroup(store, rank, size, options);
    return std::unique_ptr<Communicator>(
        std::make_unique<C10dCommunicator>(group, rank, size, options.device, options.abandon));
  } catch (const std::exception& e) {
    return Unavailable(
        fmt::format("rank {} of {}: cannot form the group of etcd keys {} within {}s: {}", rank,
                    size, prefix, options.timeout.count() / 1000, e.what()));
  }
}

}  // namespace tenax::parallel
