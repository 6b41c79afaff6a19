// Expert parallelism: the routed experts of every MoE layer (model/moe.h) split over the `ep`
// ranks of an expert-parallel group, rank r holding experts [r E/ep, (r+1) E/ep). The group's
// ranks are data-parallel ranks (expert parallelism borrows from data_parallel_shard, as in
// torchtitan): each routes its own tokens, and one MoE layer's forward exchanges them:
//   1. counts     all-to-all of the per-expert row counts (E/ep int64 to each rank), so every
//                 rank knows how many rows it receives from each rank for each of its experts;
//   2. dispatch   all-to-all of the rows (sorted by expert, hence by owner rank) with variable
//                 split sizes;
//   3. compute    received rows regrouped from (source rank, expert) to (expert, source rank)
//                 order, each held expert run once on its rows, regrouped back;
//   4. combine    the reverse all-to-all returns every row's output to the rank of its token.
// Backward mirrors 2 and 4 (each all-to-all's gradient is the all-to-all with the splits
// swapped), so an expert's weight gradient sums the tokens of every rank of the group.
//
// The load-balancing statistics are global: SumCounts all-reduces the per-expert counts over
// the groups whose ranks hold other tokens of the same micro-batch (tensor-parallel sequence
// shards, data-parallel shards and replicas; one small all-reduce each).
//
// Communication volume per MoE layer and micro-batch on one rank, rows of C values: forward
// dispatch + combine send 2 x (rows routed to experts on other ranks) x C x dtype bytes, backward
// the same again (a recomputed block repeats its forward's two), plus E/ep x 8 bytes of counts to
// each other rank per forward. Measured by CommStats::all_to_all_bytes (bench/moe_layouts.sh
// checks it against this formula).
//
// Contract: every rank of the groups calls the MoE layers in the same order (collectives inside
// forward, backward and recomputation); the counts all-to-all makes the row exchange's variable
// splits consistent. Thread safety: one training thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"
#include "tenax/model/moe.h"
#include "tenax/parallel/communicator.h"

namespace tenax::parallel {

// The experts [begin, end) that expert-parallel rank `rank` of `size` holds.
std::pair<int64_t, int64_t> ExpertRange(int64_t n_experts, int rank, int size);

// Rows with variable splits to the ranks of `comm` and back, as an autograd function: forward
// all-to-alls `x` (sum(send_splits), ...) into (sum(recv_splits), ...); backward all-to-alls the
// gradient with the splits swapped. `comm` must outlive the backward pass.
at::Tensor AllToAllRows(const at::Tensor& x, const std::vector<int64_t>& send_splits,
                        const std::vector<int64_t>& recv_splits, Communicator& comm);

class ExpertParallelRuntime final : public model::MoeRuntime {
 public:
  // `ep`: the expert-parallel group (size 1: every expert here, no exchange). `batch_groups`:
  // the groups to sum routing counts over (size-1 ones are skipped). `loss_share`: 1 / tp.
  // All must outlive this object and every backward pass through it.
  ExpertParallelRuntime(Communicator& ep, std::vector<Communicator*> batch_groups,
                        int64_t n_experts, double loss_share);

  at::Tensor Exchange(const at::Tensor& rows, const std::vector<int64_t>& counts,
                      const model::LocalExpertsFn& local) override;
  at::Tensor SumCounts(const at::Tensor& counts) override;
  double loss_share() const override { return loss_share_; }
  int64_t RemoteRows(const std::vector<int64_t>& counts) const override;

 private:
  Communicator& ep_;
  const std::vector<Communicator*> batch_groups_;
  const int64_t n_experts_;
  const double loss_share_;
};

}  // namespace tenax::parallel
