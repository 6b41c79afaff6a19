#include "tenax/train/parallel_model.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <tuple>

#include "tenax/core/check.h"
#include "tenax/parallel/context_parallel.h"
#include "tenax/parallel/gradients.h"

namespace tenax::train {

Result<at::ScalarType> FsdpParamDtype(const std::string& setting, const at::Device& device,
                                      at::ScalarType compute_dtype) {
  if (setting == "fp32") return at::kFloat;
  if (setting == "bf16") return at::kBFloat16;
  if (setting == "auto") {
    return device.is_cuda() && compute_dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
  }
  return InvalidArgument(fmt::format(
      "parallelism.fsdp_param_dtype = \"{}\": expected \"auto\", \"fp32\" or \"bf16\"", setting));
}

Result<std::unique_ptr<ParallelModel>> ParallelModel::Create(
    const ModelSpec& spec, const std::vector<model::NamedTensor>& full, ParallelGroups g,
    const ParallelismOptions& options, const at::Device& device, at::ScalarType compute_dtype,
    bool live, bool sdc) {
  TENAX_CHECK(g.world && g.replicate && g.shard && g.pp && g.tp);
  std::unique_ptr<ParallelModel> m(new ParallelModel());
  m->spec_ = spec;
  m->groups_ = g;
  m->compute_dtype_ = compute_dtype;
  m->device_ = device;
  // 1-2. TP shards of this pipeline rank's layers.
  parallel::Ownership own = parallel::Ownership::All(spec);
  const int p = g.pp->size(), r = g.pp->rank();
  if (p > 1) {
    // The schedule places the stages (c * p + r, or the V of zbv and dualpipev): this rank holds
    // the layers of its stages, the embedding with stage 0 and the head with the last.
    const int v = static_cast<int>(options.virtual_stages);
    TENAX_ASSIGN_OR_RETURN(parallel::ScheduleKind kind,
                           parallel::ParseScheduleKind(options.pipeline_schedule));
    TENAX_ASSIGN_OR_RETURN(
        parallel::PipelinePlan plan,
        parallel::BuildSchedule(kind, p, static_cast<int>(options.microbatches), v));
    TENAX_ASSIGN_OR_RETURN(std::vector<parallel::LayerRange> stages,
                           parallel::SplitLayers(spec.n_layers, p, v));
    own.layers.assign(static_cast<size_t>(spec.n_layers), false);
    for (int c = 0; c < v; ++c) {
      const parallel::LayerRange& lr = stages[static_cast<size_t>(plan.StageOf(r, c))];
      for (int64_t l = lr.begin; l < lr.end; ++l) own.layers[static_cast<size_t>(l)] = true;
    }
    own.embed = plan.RankOf(0) == r;
    own.head = plan.RankOf(plan.num_stages() - 1) == r;
  }
  // 3b. (before the model is built, so that only the held experts are copied) This rank's
  // experts.
  if (spec.moe.enabled()) {
    std::tie(own.expert_begin, own.expert_end) =
        parallel::ExpertRange(spec.moe.n_experts, g.ep ? g.ep->rank() : 0, g.ep ? g.ep->size() : 1);
  }
  m->model_ = std::make_unique<parallel::ShardedLlama>(spec, full, *g.tp, own, device);
  if (spec.moe.enabled()) {
    m->local_ = parallel::MakeLocalCommunicator();
    // Routing is counted over the ranks holding the micro-batch's other tokens: live, only those
    // of this replica (model/moe.h); with silent-data-corruption checks, only this data-parallel
    // rank's.
    std::vector<parallel::Communicator*> batch = {g.tp};
    if (!sdc) batch.push_back(g.shard);
    if (!sdc && !live) batch.push_back(g.replicate);
    m->moe_count_apart_ =
        sdc ? g.shard->size() * g.replicate->size() : (live ? g.replicate->size() : 1);
    m->moe_runtime_ = std::make_unique<parallel::ExpertParallelRuntime>(
        g.ep ? *g.ep : *m->local_, batch, spec.moe.n_experts, 1.0 / g.tp->size());
    m->model_->moe()->runtime = m->moe_runtime_.get();
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, shape] : model::Llama::ParamShapes(spec)) shapes[name] = shape;
  for (const auto& sp : m->model_->shard_specs()) m->full_shapes_.push_back(shapes.at(sp.name));
  // 3. Activation checkpointing.
  m->model_->SetActivationCheckpoint(options.activation_checkpoint);
  // 3c. Context parallelism.
  m->model_->SetContextParallel(g.cp);
  if (p > 1) {
    parallel::PipelineOptions po;
    TENAX_ASSIGN_OR_RETURN(po.schedule, parallel::ParseScheduleKind(options.pipeline_schedule));
    po.microbatches = static_cast<int>(options.microbatches);
    m->pipeline_microbatches_ = po.microbatches;
    po.virtual_stages = static_cast<int>(options.virtual_stages);
    po.compute_dtype = compute_dtype;
    TENAX_ASSIGN_OR_RETURN(m->pipeline_, parallel::PipelineExecutor::Create(*m->model_, *g.pp, po));
  }
  // 4. Data parallelism over the local tensors. Pipeline stages keep their units gathered for
  // the whole step (each micro-batch would otherwise gather them again).
  parallel::FsdpOptions fo;
  fo.reshard_after_forward = p == 1;
  fo.reduce_in_backward = !live;
  fo.keep_local_gradients = live;
  TENAX_ASSIGN_OR_RETURN(fo.param_dtype,
                         FsdpParamDtype(options.fsdp_param_dtype, device, compute_dtype));
  m->fsdp_ =
      std::make_unique<parallel::Fsdp>(*m->model_, *g.shard, *g.replicate, fo, g.expert_shard);
  m->model_->SetHooks(m->fsdp_.get());
  // Per-element weights of each flat shard for the gradient norm: 1 / copies of the values.
  for (int u = 0; u < m->fsdp_->num_units() && m->fsdp_->sharded(); ++u) {
    if (m->fsdp_->layout(u).total == 0) continue;  // not an optimizer parameter
    at::Tensor w =
        at::zeros({m->fsdp_->layout(u).shard_size}, at::TensorOptions(at::kDouble).device(device));
    for (auto& sl : m->fsdp_->Slices(u, w)) sl.values.fill_(m->CopiesWeight(sl.param));
    m->norm_weights_.push_back(w);
  }
  return m;
}

void ParallelModel::BeginStep() { fsdp_->BeginStep(); }

Result<double> ParallelModel::ForwardBackward(const at::Tensor& tokens, const at::Tensor& targets,
                                              int micro_batches, double share) {
  TENAX_CHECK_MSG(share == 1.0 || !pipeline_, "a pipeline runs whole micro-batches");
  if (model::MoeState* moe = model_->moe()) {
    // The aux loss's gradient is scaled like the cross-entropy it joins: the pipeline
    // back-propagates each of its micro-batches at 1 / m (FinishStep applies 1 / micro_batches
    // to everything afterwards); otherwise the loss below is divided by micro_batches.
    moe->aux_grad_scale = pipeline_ ? 1.0 / pipeline_microbatches_ : share / micro_batches;
  }
  micro_batches_ = micro_batches;
  const at::Tensor x = LocalTokens(tokens), y = LocalTokens(targets);
  if (pipeline_) {
    // The executor back-propagates each step at scale 1; FinishStep applies 1 / micro_batches.
    TENAX_ASSIGN_OR_RETURN(parallel::PipelineStepResult r, pipeline_->Step(x, y));
    return ContextMean(r.loss);
  }
  at::Tensor loss = model_->Loss(x, y, compute_dtype_);
  at::Tensor scaled = loss / static_cast<double>(micro_batches);
  if (share != 1.0) scaled = scaled * share;
  scaled.backward();
  return ContextMean(loss.item<double>());
}

at::Tensor ParallelModel::LocalTokens(const at::Tensor& x) const {
  if (groups_.cp == nullptr || groups_.cp->size() == 1) return x;
  return parallel::ContextShard(x, groups_.cp->rank(), groups_.cp->size());
}

double ParallelModel::ContextMean(double loss) const {
  if (groups_.cp == nullptr || groups_.cp->size() == 1) return loss;
  // Every rank holds as many tokens of each sequence, so the mean of the means is the
  // sequence's mean.
  at::Tensor t = at::full({1}, loss, at::kDouble);
  groups_.cp->AllReduceSum(t);
  return t.item<double>() / groups_.cp->size();
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
  // On the gradients' device throughout (NCCL sums it there): the host reads the norm once, to
  // report it, and clipping needs no read-back.
  at::Tensor sumsq = at::zeros({1}, at::TensorOptions(at::kDouble).device(device_));
  std::vector<at::Tensor> grads;
  if (fsdp_->sharded()) {
    for (size_t k = 0; k < optimizer_params().size(); ++k) {
      at::Tensor g = optimizer_params()[k].tensor.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      sumsq += (g.to(at::kDouble).pow(2) * norm_weights_[k]).sum();
    }
  } else {
    for (size_t i = 0; i < model_->params().size(); ++i) {
      at::Tensor g = model_->params()[i].tensor.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      sumsq += g.to(at::kDouble).pow(2).sum() * CopiesWeight(static_cast<int>(i));
    }
  }
  groups_.world->AllReduceSum(sumsq);
  // Data-parallel replicas hold identical gradients (shards): count one replica.
  const at::Tensor total = (sumsq / static_cast<double>(groups_.replicate->size())).sqrt();
  parallel::ClipToMaxNorm(grads, total, max_norm);
  return total.item<double>();
}

void ParallelModel::ZeroGrad() {
  for (auto& p : model_->params()) p.tensor.mutable_grad() = at::Tensor();
  for (auto& o : optimizer_params()) o.tensor.mutable_grad() = at::Tensor();
}

bool ParallelModel::AbandonStep(bool keep) {
  const bool kept = fsdp_->AbandonStep(keep);
  ZeroGrad();
  return kept;
}

Result<double> ParallelModel::EvalLoss(const at::Tensor& tokens, const at::Tensor& targets) {
  at::NoGradGuard no_grad;
  fsdp_->BeginStep();
  const at::Tensor x = LocalTokens(tokens), y = LocalTokens(targets);
  if (pipeline_) {
    TENAX_ASSIGN_OR_RETURN(const double loss, pipeline_->EvalLoss(x, y));
    return ContextMean(loss);
  }
  return ContextMean(model_->Loss(x, y, compute_dtype_).item<double>());
}

void ParallelModel::EndEval() { fsdp_->ReleaseAll(); }

namespace {

model::TensorSlice Piece(const std::string& name, const std::vector<int64_t>& full_shape,
                         const parallel::ShardSpec& sp, int64_t begin, int64_t end,
                         const at::Tensor& values) {
  // On the state's device: a GPU checkpoint copies it to the host in the background.
  model::TensorSlice t{name, full_shape, begin, end, values.detach().reshape({-1})};
  if (sp.dim >= 0) {
    t.block_dim = sp.dim;
    t.block_begin = sp.begin;
    t.block_end = sp.end;
  }
  return t;
}

}  // namespace

void ParallelModel::AppendPieces(const std::string& prefix, const std::string& opt_name,
                                 const at::Tensor& values, std::vector<model::TensorSlice>* out) {
  const auto& specs = model_->shard_specs();
  auto add = [&](int i, int64_t begin, int64_t end, const at::Tensor& v) {
    if (!Writes(i)) return;
    const auto& sp = specs[static_cast<size_t>(i)];
    out->push_back(
        Piece(prefix + sp.name, full_shapes_[static_cast<size_t>(i)], sp, begin, end, v));
  };
  if (fsdp_->sharded()) {  // opt_name is "fsdp.<unit>": slices of the unit's flat shard
    for (int u = 0; u < fsdp_->num_units(); ++u) {
      if ("fsdp." + fsdp_->unit_name(u) != opt_name) continue;
      for (auto& sl : fsdp_->Slices(u, values.detach())) add(sl.param, sl.begin, sl.end, sl.values);
    }
    return;
  }
  const int i = model_->IndexOf(opt_name);  // DDP: the parameter itself
  TENAX_CHECK_MSG(i >= 0, opt_name.c_str());
  add(i, 0, values.numel(), values);
}

std::vector<model::TensorSlice> ParallelModel::ParamPieces() {
  std::vector<model::TensorSlice> out;
  for (const auto& o : optimizer_params()) AppendPieces("", o.name, o.tensor, &out);
  return out;
}

std::vector<model::TensorSlice> ParallelModel::StatePieces(
    const std::vector<model::NamedTensor>& state) {
  // State tensors are named "<state>.<optimizer param>" and laid out like that parameter.
  std::vector<model::TensorSlice> out;
  for (const auto& s : state) {
    const size_t dot = s.name.find('.');
    AppendPieces(s.name.substr(0, dot + 1), s.name.substr(dot + 1), s.tensor, &out);
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
      if (specs[i].dim >= 0)
        t = t.narrow(specs[i].dim, specs[i].begin, specs[i].end - specs[i].begin);
      out.push_back({prefix + specs[i].name,
                     t.contiguous().to(model_->params()[i].tensor.device(), at::kFloat)});
    }
  }
  return out;
}

}  // namespace tenax::train
