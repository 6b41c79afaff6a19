// A mixture-of-experts feed-forward block, used in place of the dense SwiGLU on the layers
// ModelSpec::moe names: a router scores the E routed experts for each token, the token goes to
// its top-k experts (each a SwiGLU of width F), their outputs are summed with the router's
// weights, and optional shared experts (one SwiGLU of width n_shared x F) see every token.
// Dropless: every token reaches all k of its experts however uneven the load; there is no
// capacity factor and nothing is ever dropped.
//
// Routers:
//   softmax (Mixtral)    p = softmax(x Wr^T); top-k of p; weights = the k probabilities
//                        renormalised to sum 1 (Mixtral's routing).
//   sigmoid (DeepSeek-V3) s = sigmoid(x Wr^T); top-k of s + b, with b a per-expert bias that is
//                        no parameter (no gradient): after each optimizer step it moves by
//                        bias_update_rate towards balance, b_e += rate x sign(mean load - load_e)
//                        ("auxiliary-loss-free" balancing); weights = the k scores of s (without
//                        b) renormalised to sum 1.
// The router runs in fp32 whatever the compute dtype (its top-k must not flip on bf16 rounding).
//
// Load-balancing loss (Switch Transformer's, per layer): aux = E x sum_e f_e P_e with f_e the
// fraction of the micro-batch's token-to-expert assignments that went to expert e (counted over
// the whole micro-batch on every rank that holds part of it: data-parallel ranks and sequence
// shards, MoeRuntime::SumCounts) and P_e the mean routing probability of e over this rank's
// tokens (softmax: p; sigmoid: s normalised over the experts). A balanced router gives 1. Because
// f is global and P enters linearly, the mean of the ranks' aux equals the aux of the whole
// micro-batch on one rank: the loss and its gradient do not depend on the layout (Qwen's
// "global-batch" balancing). The model's loss stays the cross-entropy; the aux loss, averaged over
// the MoE layers and times aux_loss_coef, enters the gradient only: its gradient is injected
// where the layer's output is back-propagated (MoeState::aux_grad_scale; Megatron-LM's
// MoEAuxLossAutoScaler), which also works inside pipeline stages and recomputed blocks.
// Live recovery (resilience.mode = "live") counts f over one data-parallel replica's part of the
// micro-batch instead: a replica's samples must give the same gradients when another replica
// runs them after a failure, so nothing of a forward may depend on the other replicas. The
// selection biases still move by the counts of the whole global batch (EndStep's `totals`).
// Silent-data-corruption checks (resilience.sdc_check_interval) count f over one data-parallel
// rank's micro-batch, for the same reason: another rank replays its step.
//
// Parameters of MoE layer i (canonical names; experts by their global index e, so checkpoints do
// not depend on how experts are split over ranks):
//   layers.{i}.moe.router.weight            (E, C)
//   layers.{i}.moe.experts.{e}.w1.weight    (F, C)   w3: (F, C)   w2: (C, F)
//   layers.{i}.moe.shared.w1.weight         (S F, C) w3: (S F, C) w2: (C, S F)   if S > 0
//
// Expert parallelism plugs in through MoeRuntime (parallel/expert_parallel.h ships the routed
// tokens to the ranks holding their experts with all-to-alls); model/ knows no communicator.
// Non-goals: capacity factors and token dropping, grouped GEMM kernels (experts run one matmul
// each), node-limited routing, expert-choice routing.
// Thread safety: none; one training thread.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "tenax/config/model_spec.h"

namespace tenax::model {

// One MoE layer's weights on this rank.
struct MoeWeights {
  at::Tensor router;                           // (E, C), every expert's row
  int64_t first_expert = 0;                    // global index of w1[0]
  std::vector<at::Tensor> w1, w2, w3;          // this rank's experts: (F, C), (C, F), (F, C)
  at::Tensor shared_w1, shared_w2, shared_w3;  // (S F, C), (C, S F), (S F, C); undefined: none
};

// Runs this rank's experts on rows grouped by local expert: rows (sum(counts), C), counts[j]
// rows for local expert j, in order -> outputs (sum(counts), C) in the same order.
using LocalExpertsFn =
    std::function<at::Tensor(const at::Tensor& rows, const std::vector<int64_t>& counts)>;

// How routed rows reach their experts and what is summed over other ranks. The default is one
// process holding every expert.
class MoeRuntime {
 public:
  virtual ~MoeRuntime() = default;
  // rows (N k, C) sorted by global expert, counts[e] rows for expert e (E entries) -> each row's
  // expert output, in the same order. `local` runs the experts this rank holds.
  virtual at::Tensor Exchange(const at::Tensor& rows, const std::vector<int64_t>& counts,
                              const LocalExpertsFn& local) {
    return local(rows, counts);
  }
  // Sums per-expert assignment counts (E, fp64) over every rank holding other tokens of the same
  // micro-batch (identity for one process). Collective when distributed.
  virtual at::Tensor SumCounts(const at::Tensor& counts) { return counts; }
  // This rank's share of the loss's gradient (1 / tensor_parallel: sequence shards each
  // back-propagate their part of the mean, as TensorParallelHeadLoss does).
  virtual double loss_share() const { return 1.0; }
  // Of the rows Exchange sends for `counts`, how many go to other ranks (what crosses links).
  virtual int64_t RemoteRows(const std::vector<int64_t>& counts) const { return 0; }
};

// Routing statistics and balancing state of the MoE layers of one model on this rank.
// Statistics accumulate over the forward passes that record a graph (training micro-batches,
// including recomputation in backward, which replaces the forward that ran without one); forward
// passes without gradients (evaluation) record nothing.
class MoeState {
 public:
  explicit MoeState(const ModelSpec& spec);
  MoeState(const MoeState&) = delete;
  MoeState& operator=(const MoeState&) = delete;

  const MoeSpec& spec() const { return spec_; }
  int64_t n_layers() const { return n_layers_; }
  int64_t n_moe_layers() const { return n_moe_layers_; }

  // (E) fp32 selection bias of `layer` (zeros unless the sigmoid router's balancing is on).
  const at::Tensor& bias(int64_t layer) const { return bias_[static_cast<size_t>(layer)]; }
  // Every held layer's bias as one (n_layers, E) fp64 table (rows of dense layers and of layers
  // another pipeline stage holds are zero), and back (SetBiasTable reads every MoE layer's row).
  at::Tensor BiasTable() const;
  // Which layers this rank runs (all, unless pipeline stages split them).
  void SetHeldLayers(std::vector<bool> held) { held_ = std::move(held); }
  bool holds(int64_t layer) const { return held_[static_cast<size_t>(layer)]; }
  void SetBiasTable(const at::Tensor& table);
  bool has_bias() const { return spec_.router == "sigmoid" && spec_.bias_update_rate > 0; }

  // Multiplies the aux loss's gradient (the scale applied to the cross-entropy before backward:
  // 1 / micro-batches). Set by the step model before each forward.
  double aux_grad_scale = 1.0;
  MoeRuntime* runtime = nullptr;  // null: one process, every expert here

  // Called by a layer's forward.
  void Record(int64_t layer, const at::Tensor& global_counts, double aux, int64_t remote_rows);
  // The step's statistics per layer: global assignments per expert (summed over micro-batches),
  // and this rank's aux summed over micro-batches with their number.
  struct LayerStats {
    at::Tensor counts;  // (E) fp64
    double aux_sum = 0;
    int64_t forwards = 0;
    int64_t remote_rows = 0;  // rows this rank's forwards sent to experts on other ranks
  };
  const std::vector<LayerStats>& step_stats() const { return stats_; }
  // After the optimizer step: moves the biases by the step's loads (when has_bias() and
  // `update_bias`: false for a step whose update was skipped), then clears the statistics.
  // `totals`: the step's assignments per expert over the whole global batch, (n_layers, E) fp64
  // (rows of layers not held are not read); undefined when this rank's statistics are them
  // already (one process, or counts summed over every data-parallel rank).
  void EndStep(bool update_bias = true, const at::Tensor& totals = at::Tensor());
  // Drops the step's statistics (a step run again from the start: live recovery).
  void ClearStats();

 private:
  const MoeSpec spec_;
  const int64_t n_layers_;
  const int64_t n_moe_layers_;
  std::vector<at::Tensor> bias_;   // [layer] (E) fp32, CPU
  std::vector<bool> held_;         // [layer]
  std::vector<LayerStats> stats_;  // [layer]
};

// The MoE block for layer `layer`: x (N, C) in the compute dtype -> (N, C). Records statistics
// and attaches the aux loss when gradients are being recorded.
at::Tensor MoeFeedForward(const at::Tensor& x, const MoeWeights& w, const MoeSpec& spec,
                          MoeState& state, int64_t layer);

// Parameter name helpers.
std::string ExpertParamPrefix(int64_t layer, int64_t expert);  // "layers.{i}.moe.experts.{e}."
// The expert index of an expert parameter's name, or -1 for any other name.
int64_t ExpertOfParam(const std::string& name);

}  // namespace tenax::model
