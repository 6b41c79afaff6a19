// tenax's collective-communication interface. Every collective must be called in the same order
// by every rank of the group (c10d's contract); all methods block until the local result is
// ready. Gloo (CPU) and NCCL (GPU) groups sit behind it; operations a backend lacks are built here
// from ones it has (1.13 Gloo: reduce-scatter = alltoall + local sum, which moves the same bytes
// as a ring reduce-scatter). Byte counters feed the communication benchmark.
// Thread safety: one thread per communicator.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tenax/core/status.h"
#include "tenax/parallel/dist_env.h"

namespace tenax::parallel {}  // namespace tenax::parallel
namespace tenax::protocol {
class FlightRecorder;  // protocol/flight_recorder.h
}  // namespace tenax::protocol
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
  double wait_s = 0;  // seconds blocked waiting for collectives to complete

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
// ready and returns it; call it exactly once, from the thread that issued the collective.
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
  virtual void AllReduceSum(at::Tensor& t) = 0;  // in place
  // Concatenates equal-sized 1-D shards of every rank, in rank order.
  virtual at::Tensor AllGather(const at::Tensor& shard) = 0;
  // Sums `full` (1-D, length divisible by size()) over ranks and returns this rank's slice.
  virtual at::Tensor ReduceScatterSum(const at::Tensor& full) = 0;
  virtual void Broadcast(at::Tensor& t, int root) = 0;
  virtual void Barrier() = 0;
  // Point-to-point (group-local ranks). Blocking; a Send must meet a Recv of the same shape and
  // dtype on `peer` with the same tag.
  virtual void Send(const at::Tensor& t, int peer, int tag = 0) = 0;
  virtual void Recv(at::Tensor& t, int peer, int tag = 0) = 0;
  // All-to-all with variable sizes along dim 0 (expert parallelism's token exchange): this rank
  // sends rows [sum(input_splits[0..d)), + input_splits[d]) of `input` to rank d and receives
  // output_splits[s] rows from each rank s, concatenated in rank order into the result
  // (sum(output_splits), input's other dims). Every rank's input_splits[d] must equal rank d's
  // output_splits[this rank] (the callers exchange counts first). Blocking.
  virtual at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                              const std::vector<int64_t>& output_splits) = 0;
  // Non-blocking variants (the backend runs them on its own threads; results as above). The
  // defaults run the blocking version; c10d groups override them. Same-order contract: issue order
  // counts, not wait order.
  virtual PendingCollective AllGatherAsync(const at::Tensor& shard) {
    at::Tensor r = AllGather(shard);
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

// The world and its sub-groups, connected through one c10d store (TCPStore at
// MASTER_ADDR:MASTER_PORT; rank 0 hosts it).
class ProcessGroups {
 public:
  static Result<std::unique_ptr<ProcessGroups>> Connect(const DistEnv& env,
                                                        std::chrono::milliseconds timeout);
  ~ProcessGroups();
  Communicator& world() { return *world_; }
  // A communicator over `ranks` (global ranks, sorted; this rank must be among them). Every rank
  // in `ranks` must call it with the same list; `name` distinguishes groups in the store.
  Result<std::unique_ptr<Communicator>> NewGroup(const std::string& name,
                                                 const std::vector<int>& ranks);

 private:
  ProcessGroups() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Communicator> world_;
};

}  // namespace tenax::parallel
