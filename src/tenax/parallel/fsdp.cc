#include "tenax/parallel/fsdp.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tenax/core/check.h"
#include "tenax/model/moe.h"

namespace tenax::parallel {
namespace {

// Freeing and re-allocating a storage under tensors that autograd has saved. StorageImpl's
// set_data_ptr_noswap / set_nbytes / allocator are the same in libtorch 1.13 and 2.x.
void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}
void AllocateStorage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}
// A fresh tensor over `t`'s storage with its own version counter: writing through it does not
// bump the counter that autograd checks on the saved parameter views.
at::Tensor Alias(const at::Tensor& t) {
  return at::empty({0}, t.options()).set_(t.storage(), 0, {t.numel()}, {1});
}

}  // namespace

FlatLayout MakeFlatLayout(const std::vector<model::NamedTensor>& params, int shards) {
  FlatLayout l;
  for (const auto& p : params) {
    l.entries.push_back({p.name, p.tensor.sizes().vec(), l.total, p.tensor.numel()});
    l.total += p.tensor.numel();
  }
  l.padded = (l.total + shards - 1) / shards * shards;
  l.shard_size = l.padded / shards;
  return l;
}

struct Fsdp::Unit {
  std::string name;              // "root", "layers.<i>" or "layers.<i>.experts"
  int64_t layer = -1;            // the block's layer; -1 for the root
  Communicator* comm = nullptr;  // the group sharding this unit
  std::vector<int> params;       // model params() indices, in params() order
  FlatLayout layout;
  std::vector<std::pair<int64_t, int64_t>> tp_replicated;  // shard-local ranges summed over TP
  bool hooked = false;  // per-parameter gradient hooks collect a bucket
  // Sharded mode only:
  at::Tensor shard;  // (shard_size) fp32 master copy, an autograd leaf
  at::Tensor full;   // (padded) gathered buffer in param_dtype; storage freed while resharded
  std::vector<at::Tensor> leaves;  // views of full, the model's parameters
  bool gathered = false;
  PendingCollective gather;  // prefetch in flight
  at::Tensor bucket;         // (padded) fp32 gradients collected by hooks in this backward
  int grads_seen = 0;
  std::vector<PendingCollective> reductions;  // reduce-scatters in flight
  // options.keep_local_gradients: this rank's own gradients of the step, from FinishStep until
  // ForgetKeptGradients (DDP: each parameter's unreduced .grad; sharded: a copy of the shard's
  // gradient summed over the shard group, before the reduction across replicas).
  std::vector<at::Tensor> kept;
};

Fsdp::Fsdp(ShardedLlama& model, Communicator& shard, Communicator& replicate, FsdpOptions options,
           Communicator* expert_shard)
    : model_(model),
      shard_(shard),
      replicate_(replicate),
      options_(options),
      expert_shard_(expert_shard != &shard ? expert_shard : nullptr) {
  TENAX_CHECK_MSG(expert_shard_ == nullptr || sharded(),
                  "expert parallelism borrows from data_parallel_shard, which must be > 1");
  TENAX_CHECK_MSG(!options_.keep_local_gradients || !options_.reduce_in_backward,
                  "keep_local_gradients needs the reductions issued in FinishStep");
  auto& params = model_.params();
  const int64_t n_layers = model_.spec().n_layers;
  units_of_layer_.assign(static_cast<size_t>(n_layers), {});
  units_.push_back(std::make_unique<Unit>());
  units_[0]->name = "root";
  units_[0]->comm = &shard_;
  std::map<std::pair<int64_t, bool>, int> unit_by_layer;  // (layer, experts) -> unit
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    if (name.rfind("layers.", 0) != 0) {
      units_[0]->params.push_back(static_cast<int>(i));
      continue;
    }
    const int64_t layer = std::stoll(name.substr(7));
    const bool experts = expert_shard_ != nullptr && model::ExpertOfParam(name) >= 0;
    auto it = unit_by_layer.find({layer, experts});
    if (it == unit_by_layer.end()) {
      it = unit_by_layer.emplace(std::pair{layer, experts}, static_cast<int>(units_.size())).first;
      units_.push_back(std::make_unique<Unit>());
      units_.back()->name = fmt::format(experts ? "layers.{}.experts" : "layers.{}", layer);
      units_.back()->layer = layer;
      units_.back()->comm = experts ? expert_shard_ : &shard_;
      units_of_layer_[static_cast<size_t>(layer)].push_back(it->second);
    }
    units_[static_cast<size_t>(it->second)]->params.push_back(static_cast<int>(i));
  }

  at::NoGradGuard no_grad;
  const auto& specs = model_.shard_specs();
  const bool tp_split = model_.tp().size() > 1;
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = *units_[k];
    std::vector<model::NamedTensor> entries;
    for (int i : u.params) entries.push_back(params[static_cast<size_t>(i)]);
    u.layout = MakeFlatLayout(entries, u.comm->size());
    if (tp_split) {  // ranges of this rank's shard (or of everything, unsharded) replicated over TP
      const int64_t lo = sharded() ? u.comm->rank() * u.layout.shard_size : 0;
      const int64_t hi = sharded() ? lo + u.layout.shard_size : u.layout.total;
      for (size_t e = 0; e < u.params.size(); ++e) {
        if (specs[static_cast<size_t>(u.params[e])].dim >= 0) continue;
        const auto& en = u.layout.entries[e];
        const int64_t b = std::max(lo, en.offset), end = std::min(hi, en.offset + en.numel);
        if (b < end) u.tp_replicated.push_back({b - lo, end - b});
      }
    }
    u.hooked = options_.reshard_after_forward && options_.reduce_in_backward && k > 0;
    if (!sharded()) {
      // DDP: the block's bucket is all-reduced as soon as its gradients exist (hooks below).
      for (size_t e = 0; e < u.params.size() && u.hooked; ++e) {
        HookGrad(u, e, params[static_cast<size_t>(u.params[e])].tensor);
      }
      continue;
    }
    std::vector<at::Tensor> flat;
    for (const auto& e : entries) flat.push_back(e.tensor.detach().reshape({-1}));
    at::Tensor all =
        flat.empty() ? at::zeros({0}, at::TensorOptions().device(model_.device())) : at::cat(flat);
    all = at::constant_pad_nd(all, {0, u.layout.padded - u.layout.total});
    u.shard = all.narrow(0, u.comm->rank() * u.layout.shard_size, u.layout.shard_size).clone();
    u.shard.set_requires_grad(true);
    u.full = at::empty({u.layout.padded},
                       u.shard.options().dtype(options_.param_dtype).requires_grad(false));
    for (size_t e = 0; e < u.params.size(); ++e) {
      const auto& en = u.layout.entries[e];
      // Views of one buffer; each is its own autograd leaf so it collects its own gradient.
      at::Tensor leaf = u.full.narrow(0, en.offset, en.numel).view(en.shape).detach();
      leaf.set_requires_grad(true);
      if (u.hooked) HookGrad(u, e, leaf);
      params[static_cast<size_t>(u.params[e])].tensor = leaf;
      u.leaves.push_back(leaf);
    }
    u.gathered = true;
    Reshard(u);
    if (u.layout.total > 0) opt_params_.push_back({"fsdp." + u.name, u.shard});
  }
  if (!sharded()) opt_params_ = params;
}

void Fsdp::HookGrad(Unit& u, size_t entry, const at::Tensor& param) {
  Unit* up = &u;
  param.register_hook([this, up, entry](const at::Tensor& g) { OnParamGrad(*up, entry, g); });
}

Fsdp::~Fsdp() {
  // Collectives still in flight must finish before their buffers go away. One that fails (a
  // peer died: the rank is being torn down after an error) has finished too; a destructor must
  // not throw, so the error is dropped here (the rank already reported it).
  for (auto& u : units_) {
    try {
      if (u->gather.pending()) u->gather.Wait();
    } catch (const std::exception&) {
    }
    for (auto& r : u->reductions) {
      try {
        r.Wait();
      } catch (const std::exception&) {
      }
    }
  }
}

const FlatLayout& Fsdp::layout(int unit) const {
  return units_.at(static_cast<size_t>(unit))->layout;
}
const std::string& Fsdp::unit_name(int unit) const {
  return units_.at(static_cast<size_t>(unit))->name;
}
at::Tensor Fsdp::unit_shard(int unit) const { return units_.at(static_cast<size_t>(unit))->shard; }
const std::vector<int>& Fsdp::param_indices(int unit) const {
  return units_.at(static_cast<size_t>(unit))->params;
}

std::vector<at::Tensor> Fsdp::decay_masks() const {
  if (!sharded()) return {};
  std::vector<at::Tensor> masks;
  for (const auto& u : units_) {
    if (u->layout.total == 0) continue;  // not among optimizer_params()
    at::Tensor mask = at::zeros({u->layout.padded}, at::kFloat);
    for (const auto& e : u->layout.entries) {
      if (e.shape.size() >= 2) mask.narrow(0, e.offset, e.numel).fill_(1.0);
    }
    masks.push_back(mask.narrow(0, u->comm->rank() * u->layout.shard_size, u->layout.shard_size)
                        .clone()
                        .to(u->shard.device()));
  }
  return masks;
}

const std::vector<int>& Fsdp::UnitsOfLayer(int64_t layer) const {
  static const std::vector<int> kNone;
  if (layer < 0 || layer >= static_cast<int64_t>(units_of_layer_.size())) return kNone;
  return units_of_layer_[static_cast<size_t>(layer)];
}

void Fsdp::StartGather(Unit& u) {
  if (u.gathered || u.gather.pending() || u.layout.padded == 0) return;
  // The buffer's storage comes back now and the gather writes into it; it is only read after
  // EnsureGathered's wait. The alias keeps the parameters' version counter untouched.
  AllocateStorage(u.full, static_cast<size_t>(u.layout.padded) * u.full.element_size());
  at::Tensor shard = u.shard.detach();
  if (shard.scalar_type() != options_.param_dtype) shard = shard.to(options_.param_dtype);
  u.gather = u.comm->AllGatherAsync(shard, Alias(u.full));
}

void Fsdp::EnsureGathered(Unit& u) {
  if (!sharded() || u.gathered) return;
  if (u.layout.padded > 0) {
    StartGather(u);
    u.gather.Wait();  // u.full holds the gathered parameters
    if (observer_ != nullptr && u.layer >= 0) {
      observer_->OnBlockWeights(u.layer, u.leaves, /*gathered=*/true);
    }
  }
  u.gathered = true;
}

void Fsdp::Reshard(Unit& u) {
  if (!sharded() || !u.gathered) return;
  if (u.layout.padded > 0) FreeStorage(u.full);
  u.gathered = false;
}

void Fsdp::BeginStep() {
  if (!sharded()) return;
  // Issue the first block's gather before waiting for the root's, so they overlap.
  if (units_.size() > 1) StartGather(*units_[1]);
  EnsureGathered(*units_[0]);
  if (!options_.reshard_after_forward) {
    for (auto& u : units_) StartGather(*u);
    for (auto& u : units_) EnsureGathered(*u);
  }
}

void Fsdp::BeforeBlock(int64_t layer) {
  if (sharded()) {
    for (int k : UnitsOfLayer(layer)) EnsureGathered(*units_[static_cast<size_t>(k)]);
    if (options_.prefetch) {
      for (int k : UnitsOfLayer(layer + 1)) StartGather(*units_[static_cast<size_t>(k)]);
    }
  }
  if (observer_ == nullptr || sharded()) return;  // sharded: shown once gathered
  std::vector<at::Tensor> weights;
  for (int k : UnitsOfLayer(layer)) {
    for (int i : units_[static_cast<size_t>(k)]->params) {
      weights.push_back(model_.params()[static_cast<size_t>(i)].tensor);
    }
  }
  observer_->OnBlockWeights(layer, weights, /*gathered=*/false);
}

void Fsdp::AfterBlock(int64_t layer, const at::Tensor& output) {
  if (observer_ != nullptr) observer_->OnBlockOutput(layer, output);
  const std::vector<int>& ks = UnitsOfLayer(layer);
  if (!sharded() || ks.empty() || !options_.reshard_after_forward) return;
  if (output.requires_grad() && at::GradMode::is_enabled()) {
    // Fires when the gradient of the block's output is complete: just before its backward.
    output.register_hook([this, layer](const at::Tensor&) {
      for (int k : UnitsOfLayer(layer)) EnsureGathered(*units_[static_cast<size_t>(k)]);
      if (!options_.prefetch) return;
      for (int k : UnitsOfLayer(layer - 1)) StartGather(*units_[static_cast<size_t>(k)]);
    });
  }
  // The last block's backward comes first: keep it (torchtitan does the same).
  const bool last_held = ks.back() == static_cast<int>(units_.size()) - 1;
  if (last_held && at::GradMode::is_enabled()) return;
  for (int k : ks) Reshard(*units_[static_cast<size_t>(k)]);
}

void Fsdp::OnParamGrad(Unit& u, size_t entry, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  // fp32 whatever the parameters' dtype: gradients are summed and reduced in fp32.
  if (!u.bucket.defined())
    u.bucket = at::zeros({u.layout.padded}, grad.options().dtype(at::kFloat));
  const auto& e = u.layout.entries[entry];
  u.bucket.narrow(0, e.offset, e.numel).add_(grad.reshape({-1}));
  if (++u.grads_seen < static_cast<int>(u.params.size())) return;
  // Every parameter of the block has its gradient: its backward is done.
  u.grads_seen = 0;
  if (observer_ != nullptr) observer_->OnLocalGradients(u.name, u.bucket);
  if (replay_) {
    u.bucket = at::Tensor();
    DropGrads(u);
    return;
  }
  if (!sharded()) {
    u.reductions.push_back(replicate_.AllReduceSumAsync(u.bucket));
    u.bucket = at::Tensor();
    return;
  }
  u.reductions.push_back(u.comm->ReduceScatterSumAsync(u.bucket));
  u.bucket = at::Tensor();
  for (auto& leaf : u.leaves) leaf.mutable_grad() = at::Tensor();  // the bucket has them
  Reshard(u);
}

at::Tensor Fsdp::FlatGrads(const Unit& u) const {
  std::vector<at::Tensor> grads;
  for (int i : u.params) {
    const at::Tensor& p = model_.params()[static_cast<size_t>(i)].tensor;
    at::Tensor g = p.grad();
    grads.push_back(g.defined() ? g.reshape({-1}).to(at::kFloat)
                                : at::zeros({p.numel()}, p.options().dtype(at::kFloat)));
  }
  return at::constant_pad_nd(at::cat(grads), {0, u.layout.padded - u.layout.total});
}

at::Tensor Fsdp::ObservedGrads(const Unit& u) {
  at::Tensor flat = FlatGrads(u);
  if (observer_ != nullptr) observer_->OnLocalGradients(u.name, flat);
  return flat;
}

void Fsdp::DropGrads(Unit& u) {
  if (!sharded()) return;  // DDP: .grad stays until ZeroGrad, as after a real step
  for (auto& leaf : u.leaves) leaf.mutable_grad() = at::Tensor();
  Reshard(u);
}

void Fsdp::ReduceFromGrads(Unit& u) {
  at::NoGradGuard no_grad;
  if (u.layout.padded == 0) return;
  u.reductions.push_back(u.comm->ReduceScatterSumAsync(ObservedGrads(u)));
  for (auto& leaf : u.leaves) leaf.mutable_grad() = at::Tensor();
}

void Fsdp::WaitReduction(Unit& u) {
  for (auto& r : u.reductions) {
    at::Tensor g = r.Wait();
    if (u.shard.grad().defined()) {
      u.shard.mutable_grad().add_(g);
    } else {
      u.shard.mutable_grad() = g;
    }
  }
  u.reductions.clear();
}

void Fsdp::SumOverTp(const std::vector<std::pair<const Unit*, at::Tensor>>& flats) {
  // Replicated-over-TP parameters: each TP rank holds its sequence shard's contribution. One
  // bucket: they are the norms, tiny.
  std::vector<at::Tensor> parts;
  for (const auto& [u, flat] : flats) {
    for (auto [b, n] : u->tp_replicated) parts.push_back(flat.narrow(0, b, n));
  }
  AllReduceSumInOneBucket(model_.tp(), parts);
}

void Fsdp::FinishStep() {
  at::NoGradGuard no_grad;
  // The mean over every data-parallel rank's samples (a live group short of members runs the
  // missing ranks' samples on the others: nominal_size, not size).
  const double scale = 1.0 / (shard_.size() * replicate_.nominal_size());
  if (replay_) {
    // Hooked units showed their buckets during backward; the others now, in the order the
    // reductions below issue them.
    for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
      Unit& u = **it;
      if (!u.hooked && u.layout.total > 0) ObservedGrads(u);
      DropGrads(u);
    }
    return;
  }
  // Every collective inside a replica (the shard group's, the tensor-parallel group's) is done
  // before the first one across replicas is issued: a rank that fails a collective across
  // replicas (a replica lost, live recovery) has then issued the same collectives inside its
  // replica as its peers there, so those groups stay usable (train/trainer_live.cc). Hooked DDP
  // units (never live: keep_local_gradients issues every reduction here) reduced across replicas
  // in backward already; their TP sum comes after.
  if (!sharded()) {
    // DDP: hooked units' buckets are in flight since their backward; the others (the root, or
    // every unit of a pipeline stage) go now, one bucket per unit, all issued before any wait.
    for (auto& u : units_) {
      TENAX_CHECK_MSG(u->grads_seen == 0, ("partial gradients in DDP unit " + u->name).c_str());
    }
    if (options_.keep_local_gradients) {
      // The flat buckets below are copies: the .grad tensors are this rank's own until replaced.
      for (auto& u : units_) {
        u->kept.clear();
        for (int i : u->params)
          u->kept.push_back(model_.params()[static_cast<size_t>(i)].tensor.grad());
      }
    }
    std::vector<std::pair<const Unit*, at::Tensor>> local, hooked;
    for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
      Unit& u = **it;
      if (u.layout.total == 0) continue;
      if (!u.hooked) {
        local.push_back({&u, ObservedGrads(u)});
        continue;
      }
      // Micro-batches of an accumulated step each reduced their own bucket: sum them.
      at::Tensor sum;
      for (auto& r : u.reductions) {
        at::Tensor g = r.Wait();
        sum = sum.defined() ? sum.add_(g) : g;
      }
      u.reductions.clear();
      if (!sum.defined()) {
        sum = at::zeros({u.layout.padded},
                        model_.params()[static_cast<size_t>(u.params[0])].tensor.options());
      }
      hooked.push_back({&u, sum});
    }
    SumOverTp(local);
    std::vector<std::pair<const Unit*, PendingCollective>> inflight;
    for (auto& [u, flat] : local) inflight.push_back({u, replicate_.AllReduceSumAsync(flat)});
    auto assign = [&](const Unit* u, at::Tensor flat) {
      flat.mul_(scale);
      for (size_t e = 0; e < u->params.size(); ++e) {
        const auto& en = u->layout.entries[e];
        model_.params()[static_cast<size_t>(u->params[e])].tensor.mutable_grad() =
            flat.narrow(0, en.offset, en.numel).view(en.shape);
      }
    };
    for (auto& [u, pending] : inflight) assign(u, pending.Wait());
    SumOverTp(hooked);
    for (auto& [u, sum] : hooked) assign(u, sum);
    return;
  }
  for (auto& u : units_) {
    TENAX_CHECK_MSG(u->grads_seen == 0, ("partial gradients in FSDP unit " + u->name).c_str());
  }
  // Hooked units issued their reduce-scatters during backward; the others go now, last first.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    if (!(*it)->hooked) ReduceFromGrads(**it);
  }
  std::vector<std::pair<const Unit*, at::Tensor>> shards;
  for (auto& u : units_) {
    WaitReduction(*u);
    if (!u->shard.grad().defined()) u->shard.mutable_grad() = at::zeros_like(u->shard);
    shards.push_back({u.get(), u->shard.grad()});
  }
  std::vector<PendingCollective> across;  // HSDP: shard gradients summed over replicas
  if (replicate_.size() > 1 && options_.keep_local_gradients) {
    for (auto& u : units_) u->kept = {u->shard.grad().clone()};  // before the sums below
  }
  SumOverTp(shards);
  if (replicate_.size() > 1) {
    for (auto& u : units_) across.push_back(replicate_.AllReduceSumAsync(u->shard.grad()));
  }
  for (auto& a : across) a.Wait();
  for (auto& u : units_) {
    u->shard.mutable_grad().mul_(scale);
    for (auto& leaf : u->leaves) leaf.mutable_grad() = at::Tensor();
    Reshard(*u);
  }
}

bool Fsdp::AbandonStep(bool keep) {
  bool kept = false;
  for (auto& u : units_) {
    if (!keep) u->kept.clear();
    kept = kept || !u->kept.empty();
    u->reductions.clear();
    u->bucket = at::Tensor();
    u->grads_seen = 0;
    u->gather = PendingCollective();
    for (auto& leaf : u->leaves) leaf.mutable_grad() = at::Tensor();
    if (u->shard.defined()) u->shard.mutable_grad() = at::Tensor();
    Reshard(*u);
  }
  return kept;
}

void Fsdp::ResumeStep() {
  for (auto& u : units_) {
    if (u->kept.empty()) continue;
    if (sharded()) {
      // The reduce-scatters of the micro-batches still to run add to it (WaitReduction).
      u->shard.mutable_grad() = u->kept[0];
    } else {
      for (size_t e = 0; e < u->params.size(); ++e) {
        model_.params()[static_cast<size_t>(u->params[e])].tensor.mutable_grad() = u->kept[e];
      }
    }
    u->kept.clear();
  }
}

void Fsdp::ForgetKeptGradients() {
  for (auto& u : units_) u->kept.clear();
}

void Fsdp::GatherAll() {
  for (auto& u : units_) StartGather(*u);
  for (auto& u : units_) EnsureGathered(*u);
}

void Fsdp::ReleaseAll() {
  for (auto& u : units_) Reshard(*u);
}

at::Tensor Fsdp::ShardOf(int k, const std::vector<model::NamedTensor>& full,
                         const std::string& prefix) const {
  const Unit& u = *units_.at(static_cast<size_t>(k));
  std::map<std::string, at::Tensor> by_name;
  for (const auto& t : full) by_name[t.name] = t.tensor;
  std::vector<at::Tensor> flat;
  for (size_t e = 0; e < u.params.size(); ++e) {
    const ShardSpec& s = model_.shard_specs()[static_cast<size_t>(u.params[e])];
    auto it = by_name.find(prefix + s.name);
    TENAX_CHECK_MSG(it != by_name.end(), (prefix + s.name).c_str());
    at::Tensor t = it->second;
    if (s.dim >= 0) t = t.narrow(s.dim, s.begin, s.end - s.begin);
    flat.push_back(t.reshape({-1}).to(at::kFloat));
  }
  at::Tensor all = flat.empty() ? at::zeros({0}, at::kFloat) : at::cat(flat);
  all = at::constant_pad_nd(all, {0, u.layout.padded - u.layout.total});
  const int64_t lo = sharded() ? u.comm->rank() * u.layout.shard_size : 0;
  return all.narrow(0, lo, sharded() ? u.layout.shard_size : u.layout.total).clone();
}

void Fsdp::LoadFull(const std::vector<model::NamedTensor>& full_params) {
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = *units_[k];
    at::Tensor flat = ShardOf(static_cast<int>(k), full_params);
    if (sharded()) {
      u.shard.copy_(flat);
      continue;
    }
    for (size_t e = 0; e < u.params.size(); ++e) {
      const auto& en = u.layout.entries[e];
      model_.params()[static_cast<size_t>(u.params[e])].tensor.copy_(
          flat.narrow(0, en.offset, en.numel).view(en.shape));
    }
  }
}

std::vector<Fsdp::Slice> Fsdp::Slices(int k, const at::Tensor& flat) const {
  const Unit& u = *units_.at(static_cast<size_t>(k));
  std::vector<Slice> out;
  const int64_t lo = sharded() ? u.comm->rank() * u.layout.shard_size : 0;
  const int64_t hi = sharded() ? lo + u.layout.shard_size : u.layout.total;
  for (size_t e = 0; e < u.params.size(); ++e) {
    const auto& en = u.layout.entries[e];
    const int64_t b = std::max(lo, en.offset), end = std::min(hi, en.offset + en.numel);
    if (b >= end) continue;
    out.push_back({u.params[e], b - en.offset, end - en.offset, flat.narrow(0, b - lo, end - b)});
  }
  return out;
}

int64_t Fsdp::ResidentStateBytes() const {
  int64_t elements = 0;
  for (const auto& u : units_) elements += sharded() ? u->layout.shard_size : u->layout.total;
  return 4 * elements * static_cast<int64_t>(sizeof(float));
}

}  // namespace tenax::parallel
