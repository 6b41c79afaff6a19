#include "tenax/train/parallel_model.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "tenax/core/check.h"
#include "tenax/parallel/gradients.h"

namespace tenax::train {

Result<std::unique_ptr<ParallelModel>> ParallelModel::Create(
    const ModelSpec& spec, const std::vector<model::NamedTensor>& full, ParallelGroups g,
    const ParallelismOptions& options, const at::Device& device, at::ScalarType compute_dtype) {
  TENAX_CHECK(g.world && g.replicate && g.shard && g.pp && g.tp);
  std::unique_ptr<ParallelModel> m(new ParallelModel());
  m->spec_ = spec;
  m->groups_ = g;
  m->compute_dtype_ = compute_dtype;
  for (const auto& [name, shape] : model::Llama::ParamShapes(spec)) m->full_shapes_.push_back(shape);
  // 1-2. TP shards of this pipeline rank's layers.
  parallel::Ownership own = parallel::Ownership::All(spec);
  const int p = g.pp->size(), r = g.pp->rank();
  if (p > 1) {
    const int v = static_cast<int>(options.virtual_stages);
    TENAX_ASSIGN_OR_RETURN(std::vector<parallel::LayerRange> stages,
                           parallel::SplitLayers(spec.n_layers, p, v));
    own.layers.assign(static_cast<size_t>(spec.n_layers), false);
    for (int c = 0; c < v; ++c) {
      const parallel::LayerRange& lr = stages[static_cast<size_t>(c * p + r)];  // stage c*p + r
      for (int64_t l = lr.begin; l < lr.end; ++l) own.layers[static_cast<size_t>(l)] = true;
    }
    own.embed = r == 0;
    own.head = r == p - 1;
  }
  m->model_ = std::make_unique<parallel::ShardedLlama>(spec, full, *g.tp, own, device);
  // 3. Activation checkpointing.
  m->model_->SetActivationCheckpoint(options.activation_checkpoint);
  if (p > 1) {
    parallel::PipelineOptions po;
    TENAX_ASSIGN_OR_RETURN(po.schedule, parallel::ParseScheduleKind(options.pipeline_schedule));
    po.microbatches = static_cast<int>(options.microbatches);
    po.virtual_stages = static_cast<int>(options.virtual_stages);
    po.compute_dtype = compute_dtype;
    TENAX_ASSIGN_OR_RETURN(m->pipeline_,
                           parallel::PipelineExecutor::Create(*m->model_, *g.pp, po));
  }
  // 4. Data parallelism over the local tensors. Pipeline stages keep their units gathered for
  // the whole step (each micro-batch would otherwise gather them again).
  parallel::FsdpOptions fo;
  fo.reshard_after_forward = p == 1;
  m->fsdp_ = std::make_unique<parallel::Fsdp>(*m->model_, *g.shard, *g.replicate, fo);
  m->model_->SetHooks(m->fsdp_.get());
  return m;
}

void ParallelModel::BeginStep() { fsdp_->BeginStep(); }

Result<double> ParallelModel::ForwardBackward(const at::Tensor& tokens, const at::Tensor& targets,
                                              int micro_batches) {
  micro_batches_ = micro_batches;
  if (pipeline_) {
    // The executor back-propagates each step at scale 1; FinishStep applies 1 / micro_batches.
    TENAX_ASSIGN_OR_RETURN(parallel::PipelineStepResult r, pipeline_->Step(tokens, targets));
    return r.loss;
  }
  at::Tensor loss = model_->Loss(tokens, targets, compute_dtype_);
  (loss / static_cast<double>(micro_batches)).backward();
  return loss.item<double>();
}

void ParallelModel::FinishStep() {
  fsdp_->FinishStep();
  if (pipeline_ && micro_batches_ > 1) {
    at::NoGradGuard no_grad;
    for (auto& o : optimizer_params()) {
      if (o.tensor.grad().defined()) o.tensor.mutable_grad().div_(micro_batches_);
    }
  }
}

double ParallelModel::CopiesWeight(int i) const {
  const auto& sp = model_->shard_specs()[static_cast<size_t>(i)];
  double w = 1.0;
  if (sp.dim < 0) w /= groups_.tp->size();  // every TP rank holds it
  if (sp.name == "tok_embeddings.weight" && spec_.tie_embeddings && groups_.pp->size() > 1) {
    w /= 2;  // the first and the last stage both hold the tied table
  }
  return w;
}

bool ParallelModel::Writes(int i) const {
  const auto& sp = model_->shard_specs()[static_cast<size_t>(i)];
  if (groups_.replicate->rank() != 0) return false;
  if (sp.dim < 0 && groups_.tp->rank() != 0) return false;
  if (sp.name == "tok_embeddings.weight" && !model_->ownership().embed) return false;
  return true;
}

double ParallelModel::ClipGradNorm(double max_norm) {
  at::NoGradGuard no_grad;
  at::Tensor sumsq = at::zeros({1}, at::kDouble);
  std::vector<at::Tensor> grads;
  if (fsdp_->sharded()) {
    int k = 0;
    for (int u = 0; u < fsdp_->num_units(); ++u) {
      const parallel::FlatLayout& l = fsdp_->layout(u);
      if (l.total == 0) continue;
      at::Tensor g = optimizer_params()[static_cast<size_t>(k++)].tensor.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      // Per-element weights over this rank's shard: 1 / copies of each parameter's values.
      const int64_t lo = fsdp_->shard_rank() * l.shard_size;
      at::Tensor w = at::zeros({l.shard_size}, at::kDouble);
      const auto& idx = fsdp_->param_indices(u);
      for (size_t e = 0; e < l.entries.size(); ++e) {
        const int64_t b = std::max(lo, l.entries[e].offset);
        const int64_t end = std::min(lo + l.shard_size, l.entries[e].offset + l.entries[e].numel);
        if (b < end) w.narrow(0, b - lo, end - b).fill_(CopiesWeight(idx[e]));
      }
      sumsq += (g.to(at::kDouble).cpu().pow(2) * w).sum();
    }
  } else {
    for (size_t i = 0; i < model_->params().size(); ++i) {
      at::Tensor g = model_->params()[i].tensor.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      sumsq += g.to(at::kDouble).pow(2).sum().cpu() * CopiesWeight(static_cast<int>(i));
    }
  }
  groups_.world->AllReduceSum(sumsq);
  // Data-parallel replicas hold identical gradients (shards): count one replica.
  const double total = std::sqrt(sumsq.item<double>() / groups_.replicate->size());
  parallel::ClipToMaxNorm(grads, total, max_norm);
  return total;
}

void ParallelModel::ZeroGrad() {
  for (auto& p : model_->params()) p.tensor.mutable_grad() = at::Tensor();
  for (auto& o : optimizer_params()) o.tensor.mutable_grad() = at::Tensor();
}

Result<double> ParallelModel::EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) {
  at::NoGradGuard no_grad;
  fsdp_->BeginStep();
  if (pipeline_) return pipeline_->EvalLoss(tokens, targets);
  return model_->Loss(tokens, targets, compute_dtype_).item<double>();
}

void ParallelModel::EndEval() { fsdp_->ReleaseAll(); }

namespace {

model::TensorSlice Piece(const std::string& name, const std::vector<int64_t>& full_shape,
                         const parallel::ShardSpec& sp, int64_t begin, int64_t end,
                         const at::Tensor& values) {
  model::TensorSlice t{name, full_shape, begin, end, values.detach().reshape({-1}).cpu()};
  if (sp.dim >= 0) {
    t.block_dim = sp.dim;
    t.block_begin = sp.begin;
    t.block_end = sp.end;
  }
  return t;
}

}  // namespace

std::vector<model::TensorSlice> ParallelModel::ParamPieces() {
  std::vector<model::TensorSlice> out;
  const auto& specs = model_->shard_specs();
  auto full_shape = [&](int i) {
    const std::string& name = specs[static_cast<size_t>(i)].name;
    size_t k = 0;
    for (const auto& [n, shape] : model::Llama::ParamShapes(spec_)) {
      if (n == name) return full_shapes_[k];
      ++k;
    }
    TENAX_CHECK_MSG(false, name.c_str());
    return full_shapes_[0];
  };
  if (fsdp_->sharded()) {
    for (int u = 0; u < fsdp_->num_units(); ++u) {
      if (fsdp_->layout(u).total == 0) continue;
      for (auto& sl : fsdp_->Slices(u, fsdp_->unit_shard(u).detach())) {
        if (!Writes(sl.param)) continue;
        out.push_back(Piece(specs[static_cast<size_t>(sl.param)].name, full_shape(sl.param),
                            specs[static_cast<size_t>(sl.param)], sl.begin, sl.end, sl.values));
      }
    }
    return out;
  }
  for (size_t i = 0; i < model_->params().size(); ++i) {
    if (!Writes(static_cast<int>(i))) continue;
    const at::Tensor& t = model_->params()[i].tensor;
    out.push_back(Piece(specs[i].name, full_shape(static_cast<int>(i)), specs[i], 0, t.numel(), t));
  }
  return out;
}

std::vector<model::TensorSlice> ParallelModel::StatePieces(
    const std::vector<model::NamedTensor>& state) {
  std::vector<model::TensorSlice> out;
  // The parameters' pieces say where each slice goes; the state tensors have the same layout.
  const auto& specs = model_->shard_specs();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [n, shape] : model::Llama::ParamShapes(spec_)) shapes[n] = shape;
  for (const auto& s : state) {
    const size_t dot = s.name.find('.');
    const std::string prefix = s.name.substr(0, dot + 1), opt_name = s.name.substr(dot + 1);
    if (fsdp_->sharded()) {
      for (int u = 0; u < fsdp_->num_units(); ++u) {
        if ("fsdp." + fsdp_->unit_name(u) != opt_name) continue;
        for (auto& sl : fsdp_->Slices(u, s.tensor.detach())) {
          if (!Writes(sl.param)) continue;
          const auto& sp = specs[static_cast<size_t>(sl.param)];
          out.push_back(Piece(prefix + sp.name, shapes.at(sp.name), sp, sl.begin, sl.end,
                              sl.values));
        }
      }
      continue;
    }
    const int i = model_->IndexOf(opt_name);
    TENAX_CHECK_MSG(i >= 0, s.name.c_str());
    if (!Writes(i)) continue;
    const auto& sp = specs[static_cast<size_t>(i)];
    out.push_back(Piece(s.name, shapes.at(sp.name), sp, 0, s.tensor.numel(), s.tensor));
  }
  return out;
}

void ParallelModel::LoadFull(const std::vector<model::NamedTensor>& full_params) {
  fsdp_->LoadFull(full_params);
}

std::vector<model::NamedTensor> ParallelModel::ShardState(
    const std::vector<model::NamedTensor>& full_state, const std::vector<std::string>& prefixes) {
  std::vector<model::NamedTensor> out;
  std::map<std::string, at::Tensor> by_name;
  for (const auto& t : full_state) by_name[t.name] = t.tensor;
  for (const std::string& prefix : prefixes) {
    if (fsdp_->sharded()) {
      for (int u = 0; u < fsdp_->num_units(); ++u) {
        if (fsdp_->layout(u).total == 0) continue;
        out.push_back({prefix + "fsdp." + fsdp_->unit_name(u),
                       fsdp_->ShardOf(u, full_state, prefix).to(fsdp_->unit_shard(u).device())});
      }
      continue;
    }
    const auto& specs = model_->shard_specs();
    for (size_t i = 0; i < specs.size(); ++i) {
      auto it = by_name.find(prefix + specs[i].name);
      TENAX_CHECK_MSG(it != by_name.end(), (prefix + specs[i].name).c_str());
      at::Tensor t = it->second;
      if (specs[i].dim >= 0) t = t.narrow(specs[i].dim, specs[i].begin, specs[i].end - specs[i].begin);
      out.push_back({prefix + specs[i].name,
                     t.contiguous().to(model_->params()[i].tensor.device(), at::kFloat)});
    }
  }
  return out;
}

}  // namespace tenax::train
