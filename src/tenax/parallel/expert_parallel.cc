#include "tenax/parallel/expert_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

#include <numeric>

#include "tenax/core/check.h"

namespace tenax::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct AllToAllFn : public torch::autograd::Function<AllToAllFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm,
                            std::vector<int64_t> send, std::vector<int64_t> recv) {
    // The communicator travels as an integer (IValue holds no raw pointer); the caller keeps it
    // alive through the backward pass.
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return reinterpret_cast<Communicator*>(comm)->AllToAll(x, send, recv);
  }
  // Row i went from this rank to rank d; its gradient comes back from d the same way.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {comm->AllToAll(grads[0].contiguous(), recv, send), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

std::vector<int64_t> ToVector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

std::pair<int64_t, int64_t> ExpertRange(int64_t n_experts, int rank, int size) {
  TENAX_CHECK(size >= 1 && n_experts % size == 0 && 0 <= rank && rank < size);
  const int64_t per = n_experts / size;
  return {rank * per, (rank + 1) * per};
}

at::Tensor AllToAllRows(const at::Tensor& x, const std::vector<int64_t>& send_splits,
                        const std::vector<int64_t>& recv_splits, Communicator& comm) {
  return AllToAllFn::apply(x, reinterpret_cast<int64_t>(&comm), send_splits, recv_splits);
}

ExpertParallelRuntime::ExpertParallelRuntime(Communicator& ep,
                                             std::vector<Communicator*> batch_groups,
                                             int64_t n_experts, double loss_share)
    : ep_(ep),
      batch_groups_(std::move(batch_groups)),
      n_experts_(n_experts),
      loss_share_(loss_share) {
  TENAX_CHECK(n_experts_ % ep_.size() == 0);
}

at::Tensor ExpertParallelRuntime::Exchange(const at::Tensor& rows,
                                           const std::vector<int64_t>& counts,
                                           const model::LocalExpertsFn& local) {
  const int n = ep_.size();
  TENAX_CHECK(static_cast<int64_t>(counts.size()) == n_experts_);
  if (n == 1) return local(rows, counts);
  const int64_t per = n_experts_ / n;  // experts per rank
  // 1. Counts: recv[s * per + j] = rows rank s sends for this rank's expert j.
  const std::vector<int64_t> equal(static_cast<size_t>(n), per);
  const std::vector<int64_t> recv =
      ToVector(ep_.AllToAll(at::tensor(counts, at::kLong), equal, equal));
  std::vector<int64_t> send_splits(static_cast<size_t>(n), 0),
      recv_splits(static_cast<size_t>(n), 0);
  for (int d = 0; d < n; ++d) {
    for (int64_t j = 0; j < per; ++j) {
      send_splits[static_cast<size_t>(d)] += counts[static_cast<size_t>(d * per + j)];
      recv_splits[static_cast<size_t>(d)] += recv[static_cast<size_t>(d * per + j)];
    }
  }
  // 2. Dispatch: rows are sorted by global expert, so by owner rank.
  const at::Tensor received = AllToAllRows(rows, send_splits, recv_splits, ep_);
  // 3. Regroup (source, expert) -> (expert, source) so each expert's rows are contiguous.
  std::vector<int64_t> block_start(static_cast<size_t>(n * per));  // of (s, j) in `received`
  int64_t total_rows = 0;
  for (int s = 0; s < n; ++s) {
    for (int64_t j = 0; j < per; ++j) {
      block_start[static_cast<size_t>(s * per + j)] = total_rows;
      total_rows += recv[static_cast<size_t>(s * per + j)];
    }
  }
  std::vector<int64_t> order;  // grouped position -> index in `received`
  order.reserve(static_cast<size_t>(total_rows));
  std::vector<int64_t> local_counts(static_cast<size_t>(per), 0);
  for (int64_t j = 0; j < per; ++j) {
    for (int s = 0; s < n; ++s) {
      const int64_t b = block_start[static_cast<size_t>(s * per + j)];
      const int64_t len = recv[static_cast<size_t>(s * per + j)];
      for (int64_t i = 0; i < len; ++i) order.push_back(b + i);
      local_counts[static_cast<size_t>(j)] += len;
    }
  }
  const at::Tensor index = at::tensor(order, at::kLong).to(rows.device());
  const at::Tensor grouped = received.index_select(0, index);
  const at::Tensor computed = local(grouped, local_counts);
  const at::Tensor inverse =
      at::empty_like(index).scatter_(0, index, at::arange(total_rows, index.options()));
  // 4. Combine: outputs back to the ranks of their tokens, in the order they were sent.
  return AllToAllRows(computed.index_select(0, inverse), recv_splits, send_splits, ep_);
}

int64_t ExpertParallelRuntime::RemoteRows(const std::vector<int64_t>& counts) const {
  const auto [begin, end] = ExpertRange(n_experts_, ep_.rank(), ep_.size());
  int64_t remote = 0;
  for (int64_t e = 0; e < n_experts_; ++e) {
    if (e < begin || e >= end) remote += counts[static_cast<size_t>(e)];
  }
  return remote;
}

at::Tensor ExpertParallelRuntime::SumCounts(const at::Tensor& counts) {
  at::Tensor total = counts.to(at::kCPU, at::kDouble).contiguous().clone();
  for (Communicator* g : batch_groups_) {
    if (g->size() > 1) g->AllReduceSum(total);
  }
  return total;
}

}  // namespace tenax::parallel
