#include "tenax/train/moe_metrics.h"

#include <algorithm>
#include <numeric>

namespace tenax::train {

MoeMetrics CollectMoeMetrics(const model::MoeState& state, parallel::Communicator* world,
                             int count_copies) {
  const MoeSpec& spec = state.spec();
  const int64_t e = spec.n_experts;
  std::vector<int64_t> moe_layers;
  for (int64_t i = 0; i < state.n_layers(); ++i) {
    if (spec.IsMoeLayer(i)) moe_layers.push_back(i);
  }
  // Row per MoE layer: tokens per expert (count_copies holders have each count), this rank's aux
  // summed over its forwards, their number, and the rows it sent to other ranks. Sums only, so
  // the result does not depend on which rank ran which micro-batch.
  const int64_t w = e + 3;
  at::Tensor table = at::zeros({static_cast<int64_t>(moe_layers.size()), w}, at::kDouble);
  for (size_t r = 0; r < moe_layers.size(); ++r) {
    const auto& s = state.step_stats()[static_cast<size_t>(moe_layers[r])];
    if (s.forwards == 0) continue;  // another pipeline stage's layer
    at::Tensor row = table[static_cast<int64_t>(r)];
    row.narrow(0, 0, e).copy_(s.counts);
    row[e] = s.aux_sum;
    row[e + 1] = static_cast<double>(s.forwards);
    row[e + 2] = static_cast<double>(s.remote_rows);
  }
  if (world != nullptr && world->size() > 1) {
    world->AllReduceSum(table);
    // k * x / k is exact in fp64 for integer counts.
    table.narrow(1, 0, e).div_(static_cast<double>(count_copies));
  }
  table = table.contiguous();
  MoeMetrics out;
  const double* v = table.data_ptr<double>();
  for (size_t r = 0; r < moe_layers.size(); ++r) {
    const double* row = v + r * w;
    MoeLayerMetrics l;
    l.layer = moe_layers[r];
    l.tokens.assign(row, row + e);
    const double total = std::accumulate(l.tokens.begin(), l.tokens.end(), 0.0);
    const double most = *std::max_element(l.tokens.begin(), l.tokens.end());
    l.imbalance = total > 0 ? most / (total / static_cast<double>(e)) : 0;
    l.aux_loss = row[e + 1] > 0 ? row[e] / row[e + 1] : 0;
    l.remote_rows = row[e + 2];
    out.aux_loss += l.aux_loss / static_cast<double>(moe_layers.size());
    out.max_imbalance = std::max(out.max_imbalance, l.imbalance);
    out.layers.push_back(std::move(l));
  }
  return out;
}

at::Tensor StepTotals(const MoeMetrics& m, const model::MoeState& state) {
  at::Tensor t = at::zeros({state.n_layers(), state.spec().n_experts}, at::kDouble);
  for (const MoeLayerMetrics& l : m.layers) {
    t[l.layer].copy_(at::tensor(l.tokens, at::kDouble));
  }
  return t;
}

at::Tensor GatherExpertBias(const model::MoeState& state, parallel::Communicator* world) {
  const at::Tensor bias = state.BiasTable();
  if (world == nullptr || world->size() == 1) return bias;
  // Summed over the world with a count of the holders of each row: the holders have equal values
  // (k * x / k is exact in fp64 for fp32 values), so each row is exactly what one holder has.
  const int64_t e = bias.size(1);
  at::Tensor t = at::zeros({bias.size(0), e + 1}, at::kDouble);
  t.narrow(1, 0, e).copy_(bias);
  for (int64_t i = 0; i < state.n_layers(); ++i) {
    if (state.spec().IsMoeLayer(i) && state.holds(i)) t[i][e] = 1.0;
  }
  world->AllReduceSum(t);
  const at::Tensor holders = t.narrow(1, e, 1).clamp_min(1.0);
  return (t.narrow(1, 0, e) / holders).contiguous();
}

}  // namespace tenax::train
