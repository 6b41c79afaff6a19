// What the MoE layers did during one training step, as metrics.jsonl and TensorBoard show it:
// per layer, the tokens routed to each expert (each token counted once per expert it reaches,
// over the whole global batch) and the imbalance max / mean of those counts (1 = perfectly
// balanced, E / k = every token to the same k experts), and the load-balancing (aux) loss. Also
// the selection biases of the sigmoid router as checkpoints keep them.
// Thread safety: none (the training thread).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "tenax/model/moe.h"
#include "tenax/parallel/communicator.h"

namespace tenax::train {

struct MoeLayerMetrics {
  int64_t layer = 0;
  std::vector<double> tokens;  // [expert]
  double imbalance = 0;        // max / mean of tokens
  double aux_loss = 0;         // mean over the step's micro-batches and the ranks
  // Rows (token-expert assignments) sent to experts on other ranks in the step's forward passes,
  // summed over the ranks: each crosses a link 4 times (dispatch and combine, forward and
  // backward; 6 with recomputation). bench/moe_layouts.sh checks the all-to-all bytes with it.
  double remote_rows = 0;
};

struct MoeMetrics {
  std::vector<MoeLayerMetrics> layers;  // MoE layers in order
  double aux_loss = 0;       // mean over the MoE layers (the loss the coefficient scales)
  double max_imbalance = 0;  // the most unbalanced layer's
};

// The step's statistics of every MoE layer, whichever pipeline stage runs it. Collective over
// `world` when it is not null (every rank calls it after the step's backward). `count_copies`:
// how many ranks of `world` hold each layer's routing counts of the same samples (every holder
// when the counts are summed over all data-parallel ranks; a replica's holders when they are
// summed within each replica: StepModel::moe_count_copies). The aux loss is the mean over every
// forward of every holder, so it does not depend on which rank ran a micro-batch.
MoeMetrics CollectMoeMetrics(const model::MoeState& state, parallel::Communicator* world,
                             int count_copies);

// The tokens per expert of every layer, (n_layers, E) fp64, for MoeState::EndStep (rows of
// dense layers are zero).
at::Tensor StepTotals(const MoeMetrics& m, const model::MoeState& state);

// Every layer's selection bias as one (n_layers, E) fp64 table, whichever pipeline stage holds
// the layer (its holders have the same). Collective over `world` when it is not null.
at::Tensor GatherExpertBias(const model::MoeState& state, parallel::Communicator* world);

}  // namespace tenax::train
