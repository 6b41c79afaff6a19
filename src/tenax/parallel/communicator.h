// tenax's collective-communication interface. Every collective must be called in the same order
// by every rank of the group (c10d's contract). Two c10d backends sit behind it, sharing every
// line of the multi-rank logic:
//   Gloo  (CPU ranks): collectives on CPU tensors; Wait() returns once the result is there.
//   NCCL  (GPU ranks): collectives on this rank's GPU, on NCCL's own CUDA stream (one per group,
//         c10d's); Wait() makes the caller's current stream wait for it and returns at once:
//         the host learns of completion later, from CUDA events (FlightRecorder::EndWhen).
// Tensors given on another device than the group's (a CPU loss or flag handed to an NCCL group,
// the control plane) are staged onto the group's device and the result copied back, so callers
// need not know the backend; data-plane callers (gradients, parameters, activations) pass device
// tensors and nothing is copied.
// Blocking: every method without "Async" in its name blocks until ready, which means the result
// may be read on the caller's current stream (and on the host, for CPU tensors) once the call
// returns. The *Async methods return at once with a PendingCollective whose Wait() blocks so.
// Byte counters feed the communication benchmark.
// Thread safety: one thread per communicator.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/parallel/dist_env.h"

namespace tenax::protocol {
class FlightRecorder;  // protocol/flight_recorder.h
}  // namespace tenax::protocol
namespace tenax::etcd {
struct EtcdOptions;  // etcd/client.h
}  // namespace tenax::etcd
namespace tenax::parallel {
using protocol::FlightRecorder;

struct CommStats {
  int64_t all_reduce_bytes = 0;      // payload per rank
  int64_t all_gather_bytes = 0;      // bytes received per rank
  int64_t reduce_scatter_bytes = 0;  // bytes sent per rank
  int64_t broadcast_bytes = 0;
  int64_t p2p_bytes = 0;
  int64_t all_to_all_bytes = 0;  // bytes sent to other ranks (the own chunk stays local)
  int64_t calls = 0;
  double wait_s = 0;  // seconds the host blocked waiting for collectives (Gloo; ~0 on NCCL)

  CommStats& operator+=(const CommStats& o) {
    all_reduce_bytes += o.all_reduce_bytes;
    all_gather_bytes += o.all_gather_bytes;
    reduce_scatter_bytes += o.reduce_scatter_bytes;
    broadcast_bytes += o.broadcast_bytes;
    p2p_bytes += o.p2p_bytes;
    all_to_all_bytes += o.all_to_all_bytes;
    calls += o.calls;
    wait_s += o.wait_s;
    return *this;
  }
  CommStats operator-(const CommStats& o) const {
    CommStats d = *this;
    d.all_reduce_bytes -= o.all_reduce_bytes;
    d.all_gather_bytes -= o.all_gather_bytes;
    d.reduce_scatter_bytes -= o.reduce_scatter_bytes;
    d.broadcast_bytes -= o.broadcast_bytes;
    d.p2p_bytes -= o.p2p_bytes;
    d.all_to_all_bytes -= o.all_to_all_bytes;
    d.calls -= o.calls;
    d.wait_s -= o.wait_s;
    return d;
  }
};

// A collective in flight (non-blocking variants below). Wait() blocks until the local result is
// ready (in the sense above) and returns it; call it exactly once, from the thread that issued
// the collective.
class PendingCollective {
 public:
  PendingCollective() = default;
  explicit PendingCollective(std::function<at::Tensor()> finish) : finish_(std::move(finish)) {}
  bool pending() const { return static_cast<bool>(finish_); }
  at::Tensor Wait() {
    auto f = std::move(finish_);
    finish_ = nullptr;
    return f ? f() : at::Tensor();
  }

 private:
  std::function<at::Tensor()> finish_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How many ranks' samples the group's sums stand for: size(), except in a live group that
  // lost members (parallel/live_group.h), whose others run the missing ranks' samples too; a
  // data-parallel mean divides by it.
  virtual int nominal_size() const { return size(); }
  // Where this group's collectives run: the CPU (Gloo, one rank) or this rank's GPU (NCCL).
  virtual at::Device device() const { return at::kCPU; }
  virtual void AllReduceSum(at::Tensor& t) = 0;  // in place
  // Concatenates equal-sized shards of every rank, flattened, in rank order (one flat
  // all-gather: all_gather_into_tensor).
  virtual at::Tensor AllGather(const at::Tensor& shard) = 0;
  // Sums `full` (1-D, length divisible by size()) over ranks and returns this rank's slice (NCCL:
  // one flat reduce_scatter_tensor; Gloo: an alltoall and a local sum, communicator.cc says why).
  virtual at::Tensor ReduceScatterSum(const at::Tensor& full) = 0;
  virtual void Broadcast(at::Tensor& t, int root) = 0;
  virtual void Barrier() = 0;
  // Point-to-point (group-local ranks). A Send must meet a Recv of the same shape and dtype on
  // `peer`; messages between two ranks are matched in the order they are issued (NCCL has no
  // tags: `tag` only labels the message for Gloo and the flight record).
  virtual void Send(const at::Tensor& t, int peer, int tag = 0) = 0;
  virtual void Recv(at::Tensor& t, int peer, int tag = 0) = 0;
  // All-to-all with variable sizes along dim 0 (expert parallelism's token exchange): this rank
  // sends rows [sum(input_splits[0..d)), + input_splits[d]) of `input` to rank d and receives
  // output_splits[s] rows from each rank s, concatenated in rank order into the result
  // (sum(output_splits), input's other dims). Every rank's input_splits[d] must equal rank d's
  // output_splits[this rank] (the callers exchange counts first).
  virtual at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                              const std::vector<int64_t>& output_splits) = 0;
  // Non-blocking variants (results as above). The defaults run the blocking version; c10d groups
  // override them. Same-order contract: issue order counts, not wait order. `out` (AllGather):
  // a buffer of size() * shard.numel() elements to gather into, so the caller owns the result's
  // storage (FSDP's flat parameters); undefined: one is allocated.
  virtual PendingCollective AllGatherAsync(const at::Tensor& shard, at::Tensor out = {}) {
    at::Tensor r = AllGather(shard);
    if (out.defined()) {
      out.view({-1}).copy_(r);
      r = out;
    }
    return PendingCollective([r] { return r; });
  }
  virtual PendingCollective ReduceScatterSumAsync(const at::Tensor& full) {
    at::Tensor r = ReduceScatterSum(full);
    return PendingCollective([r] { return r; });
  }
  virtual PendingCollective AllReduceSumAsync(at::Tensor t) {  // in place; Wait returns t
    AllReduceSum(t);
    return PendingCollective([t] { return t; });
  }
  // Send without waiting for it: Wait blocks until `t` may be reused (the peer has it, or the
  // transport holds a copy). Sends and receives still pair up in the order each rank issues them.
  // This default blocks.
  virtual PendingCollective SendAsync(const at::Tensor& t, int peer, int tag = 0) {
    Send(t, peer, tag);
    return PendingCollective([t] { return t; });
  }
  // Receive without waiting for it: posts the receive into `t` (contiguous) at once, in issue
  // order like Recv; Wait blocks until the message is in `t` and returns it. Lets a pipeline post
  // its receives in the one order that pairs them (NCCL has no tags) and wait only where the
  // message is used. This default blocks.
  virtual PendingCollective RecvAsync(at::Tensor t, int peer, int tag = 0) {
    Recv(t, peer, tag);
    return PendingCollective([t] { return t; });
  }
  // One step of a ring shift (context parallelism's keys and values): sends `send` to group
  // rank `to` and receives `recv` (contiguous; its shape and dtype are what `to`'s peer sends)
  // from `from`, both at once; Wait returns `recv`. Every rank of the ring issues its exchanges
  // in the same order. c10d groups run it non-blocking: NCCL coalesces the send and the receive
  // into one group (a ring of blocking sends would deadlock), Gloo posts both. This default
  // blocks, rank 0 sending first and the others receiving first, which serialises a ring but
  // cannot deadlock it.
  virtual PendingCollective ExchangeAsync(const at::Tensor& send, int to, at::Tensor recv, int from,
                                          int tag = 0) {
    if (rank() == 0) {
      Send(send, to, tag);
      Recv(recv, from, tag);
    } else {
      Recv(recv, from, tag);
      Send(send, to, tag);
    }
    return PendingCollective([recv] { return recv; });
  }
  // Ends this group's collectives in flight and any later ones with an error (NCCL: aborts its
  // communicators, so a rank stuck in one can exit). For a rank that is going down after a
  // timeout or a peer's failure. May be called from another thread than the one using it.
  virtual void Abort() {}
  const CommStats& stats() const { return stats_; }
  // Records every collective of this group under `name` (protocol/flight_recorder.h); null: off.
  void SetFlightRecorder(FlightRecorder* recorder, std::string name) {
    recorder_ = recorder;
    name_ = std::move(name);
  }

 protected:
  CommStats stats_;
  FlightRecorder* recorder_ = nullptr;
  std::string name_ = "world";
};

// A group of one: every collective is the identity (single-process training).
std::unique_ptr<Communicator> MakeLocalCommunicator();

// parallelism.backend: c10d's backend under the communicators.
enum class Backend { kGloo, kNccl };
const char* BackendName(Backend b);
// Whether this tenax was built with NCCL (a CUDA libtorch and nccl.h at configure time).
bool NcclBuilt();
// parallelism.backend ("auto" | "nccl" | "gloo") for a rank computing on `device`: auto is NCCL
// on a GPU, Gloo on the CPU. An error names what to change: NCCL for a CPU rank, or NCCL in a
// build without it.
Result<Backend> ResolveBackend(const std::string& setting, const at::Device& device);

struct GroupOptions {
  Backend backend = Backend::kGloo;
  // NCCL: this rank's GPU (cuda:LOCAL_RANK), bound to every group (barriers use it) and the
  // device control-plane tensors are staged onto. Gloo: the CPU.
  at::Device device = at::kCPU;
  // Joining the store and the groups; Gloo also takes it as its per-collective timeout.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // NCCL: c10d's own per-collective timeout (its watchdog aborts the communicators after it);
  // zero: `timeout`. tenax's flight-recorder watchdog (parallelism.collective_timeout_s) should
  // fire first, as it is the one that names the stuck collective and the rank waited for.
  std::chrono::milliseconds nccl_timeout{0};
  // Tests: a real c10d group even when the world is one rank (a one-rank NCCL group exercises
  // the same streams, events and staging as many ranks do).
  bool c10d_for_one_rank = false;
  // ConnectFileStoreGroup and ConnectEtcdStoreGroup: asked while joining waits for a peer; a
  // reason it returns ends the wait at once (parallel/watched_store.h: a live member that died
  // after checking in, superseded by a newer epoch). Empty: wait up to `timeout`.
  std::function<std::optional<std::string>()> give_up;
  // Gloo (live groups, parallel/live_group.h): asked every 100 ms while a collective waits; a
  // reason it returns abandons the wait: the call throws it as a peer-lost error
  // ("collective abandoned: ...", protocol::IsPeerLostError). For a peer that can no longer answer
  // and whose connections will not close either (its node cut off: nothing comes back, not even a
  // reset), which would otherwise hold the collective for the whole `timeout`. The group must be
  // dropped then; dropping it leaves the abandoned collective to end on Gloo's thread at that
  // timeout (the group is not destroyed: its destructor would wait for it). Until then a peer
  // that comes back (a node stopped, then continued) could still write into the collective's
  // tensors: callers give it memory they do not use again after an abandon (LiveGroup::Sync
  // receives into copies; the trainer drops its reduction buffers, Fsdp::AbandonStep). Empty:
  // wait.
  std::function<std::optional<std::string>()> abandon;
};

// The world and its sub-groups, connected through one c10d store (TCPStore at
// MASTER_ADDR:MASTER_PORT; rank 0 hosts it).
class ProcessGroups {
 public:
  static Result<std::unique_ptr<ProcessGroups>> Connect(const DistEnv& env,
                                                        const GroupOptions& options);
  // Gloo on the CPU.
  static Result<std::unique_ptr<ProcessGroups>> Connect(const DistEnv& env,
                                                        std::chrono::milliseconds timeout);
  // Around a world made elsewhere (live recovery's proxy: parallel/live_group.h): NewGroup
  // returns a group of one rank as local and any other as `make_group(name, ranks)`: its error,
  // or null for a group it cannot give (a layout live mode does not run: NewGroup refuses it).
  using GroupMaker = std::function<Result<std::unique_ptr<Communicator>>(
      const std::string& name, const std::vector<int>& ranks)>;
  static std::unique_ptr<ProcessGroups> Adopt(const DistEnv& env,
                                              std::unique_ptr<Communicator> world,
                                              GroupMaker make_group);
  ~ProcessGroups();
  Communicator& world() { return *world_; }
  Backend backend() const;
  // A communicator over `ranks` (global ranks, sorted; this rank must be among them). Every rank
  // in `ranks` must call it with the same list; `name` distinguishes groups in the store.
  Result<std::unique_ptr<Communicator>> NewGroup(const std::string& name,
                                                 const std::vector<int>& ranks);
  // Aborts every group made here (Communicator::Abort), world included; safe from any thread,
  // e.g. the flight-recorder watchdog's when a collective timed out.
  void AbortAll();

 private:
  ProcessGroups() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Communicator> world_;
};

// A group of `size` ranks formed through a c10d FileStore at `path` instead of the job's TCP
// store (which rank 0 hosts, so it dies with rank 0): live recovery's groups, one store file per
// membership epoch (parallel/live_group.h). Every member passes the same path and size; blocks
// until all joined or `options.timeout` passed. Destroying the result closes the group's
// connections.
Result<std::unique_ptr<Communicator>> ConnectFileStoreGroup(const std::string& path, int rank,
                                                            int size, const GroupOptions& options);
// The same through keys under `prefix` in etcd (parallel/etcd_store.h) instead of a file: live
// recovery's groups when their members are on several nodes. Every member passes the same prefix.
Result<std::unique_ptr<Communicator>> ConnectEtcdStoreGroup(const etcd::EtcdOptions& etcd,
                                                            const std::string& prefix, int rank,
                                                            int size, const GroupOptions& options);

}  // namespace tenax::parallel
