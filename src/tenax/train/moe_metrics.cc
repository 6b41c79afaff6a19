#include "tenax/train/moe_metrics.h"

#include <algorithm>
#include <numeric>

namespace tenax::train {
namespace {

// Sums `t` over the world and divides by the holders of each value: ranks not holding a layer
// contribute zeros, the holders contribute equal values (k * x / k is exact in fp64 for fp32
// values), so the result is exactly what one holder has.
at::Tensor SumOverHolders(at::Tensor t, parallel::Communicator* world, int copies) {
  if (world == nullptr || world->size() == 1) return t;
  world->AllReduceSum(t);
  return t / static_cast<double>(copies);
}

}  // namespace

MoeMetrics CollectMoeMetrics(const model::MoeState& state, parallel::Communicator* world,
                             int copies) {
  const MoeSpec& spec = state.spec();
  const int64_t e = spec.n_experts;
  std::vector<int64_t> moe_layers;
  for (int64_t i = 0; i < state.n_layers(); ++i) {
    if (spec.IsMoeLayer(i)) moe_layers.push_back(i);
  }
  // Row per MoE layer: tokens per expert, this rank's mean aux over its micro-batches, and its
  // remote rows times the holders (so that the division below leaves their sum).
  const int64_t w = e + 2;
  at::Tensor table = at::zeros({static_cast<int64_t>(moe_layers.size()), w}, at::kDouble);
  for (size_t r = 0; r < moe_layers.size(); ++r) {
    const auto& s = state.step_stats()[static_cast<size_t>(moe_layers[r])];
    if (s.forwards == 0) continue;  // another pipeline stage's layer
    table[static_cast<int64_t>(r)].narrow(0, 0, e).copy_(s.counts);
    table[static_cast<int64_t>(r)][e] = s.aux_sum / static_cast<double>(s.forwards);
    table[static_cast<int64_t>(r)][e + 1] = static_cast<double>(s.remote_rows * copies);
  }
  table = SumOverHolders(table, world, copies).contiguous();
  MoeMetrics out;
  const double* v = table.data_ptr<double>();
  for (size_t r = 0; r < moe_layers.size(); ++r) {
    MoeLayerMetrics l;
    l.layer = moe_layers[r];
    l.tokens.assign(v + r * w, v + r * w + e);
    const double total = std::accumulate(l.tokens.begin(), l.tokens.end(), 0.0);
    const double most = *std::max_element(l.tokens.begin(), l.tokens.end());
    l.imbalance = total > 0 ? most / (total / static_cast<double>(e)) : 0;
    l.aux_loss = v[r * w + e];
    l.remote_rows = v[r * w + e + 1];
    out.aux_loss += l.aux_loss / static_cast<double>(moe_layers.size());
    out.max_imbalance = std::max(out.max_imbalance, l.imbalance);
    out.layers.push_back(std::move(l));
  }
  return out;
}

at::Tensor GatherExpertBias(const model::MoeState& state, parallel::Communicator* world,
                            int copies) {
  return SumOverHolders(state.BiasTable(), world, copies);
}

}  // namespace tenax::train
