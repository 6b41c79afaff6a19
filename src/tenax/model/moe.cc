#include "tenax/model/moe.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>

#include "tenax/core/check.h"
#include "tenax/model/layers.h"

namespace tenax::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity on `out`; in backward, hands `aux` the gradient `scale` (d(scale x aux)/d(aux)), so
// the aux loss is back-propagated exactly when, and scaled as, the layer's output is.
struct AttachAuxFn : public torch::autograd::Function<AttachAuxFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& aux,
                            double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({aux});
    return out;  // autograd returns an input as a fresh view carrying this node
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor aux = ctx->get_saved_variables()[0];
    const double scale = ctx->saved_data["scale"].toDouble();
    return {grads[0], at::full_like(aux, scale), at::Tensor()};
  }
};

}  // namespace

std::string ExpertParamPrefix(int64_t layer, int64_t expert) {
  return fmt::format("layers.{}.moe.experts.{}.", layer, expert);
}

int64_t ExpertOfParam(const std::string& name) {
  const std::string key = ".moe.experts.";
  const size_t at = name.find(key);
  if (at == std::string::npos || name.rfind("layers.", 0) != 0) return -1;
  return std::strtoll(name.c_str() + at + key.size(), nullptr, 10);
}

MoeState::MoeState(const ModelSpec& spec)
    : spec_(spec.moe), n_layers_(spec.n_layers), n_moe_layers_(spec.n_moe_layers()) {
  for (int64_t i = 0; i < n_layers_; ++i) {
    bias_.push_back(at::zeros({spec_.IsMoeLayer(i) ? spec_.n_experts : 0}, at::kFloat));
  }
  stats_.resize(static_cast<size_t>(n_layers_));
  held_.assign(static_cast<size_t>(n_layers_), true);
}

at::Tensor MoeState::BiasTable() const {
  at::Tensor t = at::zeros({n_layers_, spec_.n_experts}, at::kDouble);
  for (int64_t i = 0; i < n_layers_; ++i) {
    if (spec_.IsMoeLayer(i) && held_[static_cast<size_t>(i)]) {
      t[i].copy_(bias_[static_cast<size_t>(i)]);
    }
  }
  return t;
}

void MoeState::SetBiasTable(const at::Tensor& table) {
  TENAX_CHECK(table.dim() == 2 && table.size(0) == n_layers_ && table.size(1) == spec_.n_experts);
  for (int64_t i = 0; i < n_layers_; ++i) {
    if (spec_.IsMoeLayer(i)) bias_[static_cast<size_t>(i)].copy_(table[i]);
  }
}

void MoeState::Record(int64_t layer, const at::Tensor& global_counts, double aux,
                      int64_t remote_rows) {
  LayerStats& s = stats_.at(static_cast<size_t>(layer));
  at::Tensor c = global_counts.detach().to(at::kCPU, at::kDouble);
  s.counts = s.counts.defined() ? s.counts + c : c;
  s.aux_sum += aux;
  s.remote_rows += remote_rows;
  ++s.forwards;
}

void MoeState::EndStep(bool update_bias, const at::Tensor& totals) {
  if (has_bias() && update_bias) {
    at::NoGradGuard no_grad;
    TENAX_CHECK(!totals.defined() || (totals.dim() == 2 && totals.size(0) == n_layers_ &&
                                      totals.size(1) == spec_.n_experts));
    for (int64_t i = 0; i < n_layers_; ++i) {
      const LayerStats& s = stats_[static_cast<size_t>(i)];
      if (!s.counts.defined()) continue;  // a layer another pipeline stage holds
      // Every rank holding the layer sees the same global counts, so the biases stay identical.
      const at::Tensor counts = totals.defined() ? totals[i] : s.counts;
      const at::Tensor step = (counts.mean() - counts).sign() * spec_.bias_update_rate;
      bias_[static_cast<size_t>(i)].add_(step.to(at::kFloat));
    }
  }
  ClearStats();
}

void MoeState::ClearStats() {
  for (auto& s : stats_) s = LayerStats{};
}

at::Tensor MoeFeedForward(const at::Tensor& x, const MoeWeights& w, const MoeSpec& spec,
                          MoeState& state, int64_t layer) {
  TENAX_CHECK(x.dim() == 2);
  const int64_t n = x.size(0), c = x.size(1), e = spec.n_experts, k = spec.top_k;
  TENAX_CHECK(w.router.size(0) == e);
  const bool training = at::GradMode::is_enabled();
  // Router in fp32 (fp64 in gradient tests): a bf16 top-k would flip on rounding.
  const at::ScalarType rt = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor logits = at::matmul(x.to(rt), w.router.to(rt).t());  // (N, E)
  at::Tensor probs;  // (N, E) what the aux loss averages
  at::Tensor gate_source, selection;
  if (spec.router == "sigmoid") {
    const at::Tensor s = at::sigmoid(logits);
    probs = s / s.sum(-1, /*keepdim=*/true);
    gate_source = s;
    selection = s.detach() + state.bias(layer).to(s.device(), rt);
  } else {
    probs = at::softmax(logits, -1);
    gate_source = probs;
    selection = probs.detach();
  }
  const at::Tensor idx = std::get<1>(at::topk(selection, k, -1));  // (N, k) expert indices
  at::Tensor gates = gate_source.gather(1, idx);                   // (N, k)
  gates = gates / gates.sum(-1, /*keepdim=*/true);

  // Dispatch: one row per (token, choice), sorted by expert (stable: token order within one).
  const at::Tensor flat = idx.reshape({-1});  // (N k)
  const at::Tensor order = std::get<1>(at::sort(flat, /*stable=*/true, 0, /*descending=*/false));
  const at::Tensor counts_t = at::bincount(flat, {}, e).to(at::kCPU);  // (E) int64
  const std::vector<int64_t> counts(counts_t.data_ptr<int64_t>(), counts_t.data_ptr<int64_t>() + e);
  const at::Tensor rows = x.index_select(0, at::div(order, k, "floor"));  // (N k, C)
  LocalExpertsFn local = [&w](const at::Tensor& r, const std::vector<int64_t>& local_counts) {
    TENAX_CHECK(local_counts.size() == w.w1.size());
    std::vector<at::Tensor> outs;
    int64_t offset = 0;
    for (size_t j = 0; j < local_counts.size(); ++j) {
      // Every expert runs, on zero rows if none were routed to it, so that each of its
      // parameters gets a (zero) gradient: FSDP's and DDP's hooks wait for all of them.
      outs.push_back(FeedForward(r.narrow(0, offset, local_counts[j]), w.w1[j], w.w2[j], w.w3[j]));
      offset += local_counts[j];
    }
    return at::cat(outs);
  };
  const at::Tensor expert_out =
      state.runtime ? state.runtime->Exchange(rows, counts, local) : local(rows, counts);
  // Combine: back to (token, choice) order, weighted by the gates, summed over the k choices.
  const at::Tensor inverse =
      at::empty_like(order).scatter_(0, order, at::arange(n * k, order.options()));
  const at::Tensor per_choice = expert_out.index_select(0, inverse).view({n, k, c});
  at::Tensor out = (per_choice * gates.to(per_choice.scalar_type()).unsqueeze(-1)).sum(1);
  if (w.shared_w1.defined()) out = out + FeedForward(x, w.shared_w1, w.shared_w2, w.shared_w3);
  if (!training) return out;

  at::Tensor global = at::tensor(std::vector<double>(counts.begin(), counts.end()), at::kDouble);
  if (state.runtime) global = state.runtime->SumCounts(global);
  const at::Tensor f = (global / global.sum()).to(probs.device(), rt);        // (E), sums to 1
  const at::Tensor aux = static_cast<double>(e) * (f * probs.mean(0)).sum();  // ()
  state.Record(layer, global, aux.item<double>(),
               state.runtime ? state.runtime->RemoteRows(counts) : 0);
  if (spec.aux_loss_coef > 0) {
    const double share = state.runtime ? state.runtime->loss_share() : 1.0;
    // The loss is the mean over MoE layers of the layers' aux, times the coefficient.
    const double scale = spec.aux_loss_coef * state.aux_grad_scale * share /
                         static_cast<double>(state.n_moe_layers());
    out = AttachAuxFn::apply(out, aux, scale);
  }
  return out;
}

}  // namespace tenax::model
