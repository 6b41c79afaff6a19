#include "tenax/train/train_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>
#include <memory>

#include "tenax/config/config.h"
#include "tenax/config/model_spec_json.h"
#include "tenax/core/check.h"
#include "tenax/core/log.h"
#include "tenax/model/host_copies.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/tensor_io.h"
#include "tenax/train/moe_metrics.h"

namespace tenax::train {
namespace {

std::string ToHex(const at::Tensor& bytes) {
  static const char* digits = "0123456789abcdef";
  at::Tensor b = bytes.contiguous();
  const uint8_t* p = b.data_ptr<uint8_t>();
  std::string out;
  for (int64_t i = 0; i < b.numel(); ++i) {
    out.push_back(digits[p[i] >> 4]);
    out.push_back(digits[p[i] & 15]);
  }
  return out;
}

Result<at::Tensor> FromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return DataError("RNG state has odd length");
  at::Tensor t = at::empty({static_cast<int64_t>(hex.size() / 2)}, at::kByte);
  uint8_t* p = t.data_ptr<uint8_t>();
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return DataError("RNG state is not hexadecimal");
    p[i / 2] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return t;
}

}  // namespace

namespace {

// One data file of a snapshot before serialization: slices (several ranks) or whole tensors.
struct TensorFile {
  std::string name;
  bool sliced = false;
  std::vector<model::TensorSlice> slices;
  std::vector<model::NamedTensor> whole;
};

std::string SerializeFile(const TensorFile& f) {
  return f.sliced ? model::SerializeSlices(f.slices)
                  : model::SerializeTensors(f.whole, {{"format", "tenax"}});
}

// Puts `data` into `snap`: serialized at once when every tensor is on the CPU (as before GPUs
// came in: same bytes, same time). GPU state is copied to pinned host memory on a side stream
// instead (model/host_copies.h), and the snapshot serializes it when written (materialize),
// so an asynchronous save blocks training only for the time to queue the copies.
void StageDataFiles(std::vector<TensorFile> data, ckpt::CheckpointSnapshot& snap) {
  std::vector<at::Tensor*> slots;
  bool device = false;
  for (TensorFile& f : data) {
    for (auto& s : f.slices) slots.push_back(&s.values);
    for (auto& t : f.whole) slots.push_back(&t.tensor);
  }
  for (at::Tensor* t : slots) device = device || (t->defined() && !t->is_cpu());
  if (!device) {
    for (const TensorFile& f : data) snap.files.push_back({f.name, SerializeFile(f)});
    return;
  }
  std::vector<at::Tensor> sources;
  for (at::Tensor* t : slots) sources.push_back(*t);
  auto copies = std::make_shared<model::HostCopies>(sources);
  for (size_t i = 0; i < slots.size(); ++i) *slots[i] = copies->host()[i];
  snap.before_update = [copies] { copies->OrderBeforeCurrentStream(); };
  snap.materialize = [copies, data = std::move(data)](ckpt::CheckpointSnapshot& s) {
    copies->Wait();
    std::vector<std::pair<std::string, std::string>> files;
    for (const TensorFile& f : data) files.push_back({f.name, SerializeFile(f)});
    // Data files first, as a CPU snapshot has them.
    s.files.insert(s.files.begin(), std::make_move_iterator(files.begin()),
                   std::make_move_iterator(files.end()));
    return Status::Ok();
  };
}

}  // namespace

Result<ckpt::CheckpointSnapshot> SnapshotTrainCheckpoint(const TrainProgress& progress,
                                                         TrainTarget& target,
                                                         const std::string& config_toml,
                                                         const std::string& attempt) {
  ckpt::CheckpointSnapshot snap;
  snap.step = progress.step;
  snap.rank = target.world ? target.world->rank() : 0;
  snap.world_size = target.world ? target.world->size() : 1;
  snap.layout = target.layout;
  snap.extra = {{"kind", "training"}};
  snap.attempt = attempt;
  const int rank = snap.rank;
  auto& files = snap.files;
  auto& expected = snap.expected_files;
  // This rank's data files, as tensors until serialized: now for CPU state, or once their
  // device-to-host copies have landed for GPU state (StageDataFiles).
  std::vector<TensorFile> data;
  if (target.parallel != nullptr) {
    // Ranks of the first replica each write their pieces (replicate is the outermost mesh axis,
    // so they are ranks 0 .. writers - 1).
    const int writers = snap.world_size / target.parallel->replicas();
    for (int r = 0; r < writers; ++r) {
      expected.push_back(model::RankFileName("model", r, snap.world_size));
      expected.push_back(model::RankFileName("optimizer", r, snap.world_size));
    }
    if (rank < writers) {
      data.push_back({model::RankFileName("model", rank, snap.world_size),
                      true,
                      target.parallel->ParamPieces(),
                      {}});
      data.push_back({model::RankFileName("optimizer", rank, snap.world_size),
                      true,
                      target.parallel->StatePieces(target.optimizer.StateTensors()),
                      {}});
    }
  } else {
    expected = {model::kModelFile, model::kOptimizerFile};
    data.push_back({model::kModelFile, false, {}, target.model.params()});
    data.push_back({model::kOptimizerFile, false, {}, target.optimizer.StateTensors()});
  }
  StageDataFiles(std::move(data), snap);
  expected.push_back(kTrainStateFile);
  at::Tensor expert_bias;  // collective when distributed: every rank takes part
  if (target.moe != nullptr && target.moe->has_bias()) {
    expert_bias = GatherExpertBias(*target.moe, target.world);
  }
  if (rank == 0) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    TrainState state;
    state.step = progress.step;
    state.model = target.model.spec();
    state.training = true;
    state.optimizer_step = target.optimizer.step_count();
    state.data_position = progress.data_position;
    state.batch = progress.batch;
    state.tokens_seen = progress.tokens_seen;
    state.rng_torch_cpu = ToHex(gen.get_state());
    state.config_toml = config_toml;
    state.layout = target.layout;
    state.loss_history = progress.loss_history;
    state.tokenizer = target.tokenizer;
    for (int64_t i = 0; expert_bias.defined() && i < expert_bias.size(0); ++i) {
      const at::Tensor r = expert_bias[i].contiguous();
      state.moe_expert_bias.emplace_back(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
    }
    files.push_back({kTrainStateFile, state.ToJson()});
  }
  return snap;
}

namespace {

// Every rank's string, in rank order (collective). Lengths first, then the bytes padded to the
// longest: the communicator gathers equal-sized pieces.
std::vector<std::string> AllGatherStrings(parallel::Communicator& world, const std::string& mine) {
  const at::Tensor lengths =
      world.AllGather(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong)).contiguous();
  const int64_t* len = lengths.data_ptr<int64_t>();
  int64_t longest = 1;
  for (int r = 0; r < world.size(); ++r) longest = std::max(longest, len[r]);
  at::Tensor bytes = at::zeros({longest}, at::kByte);
  std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), mine.size());
  const at::Tensor all = world.AllGather(bytes).contiguous();
  std::vector<std::string> out;
  const char* base = reinterpret_cast<const char*>(all.data_ptr<uint8_t>());
  for (int r = 0; r < world.size(); ++r) {
    out.emplace_back(base + r * longest, static_cast<size_t>(len[r]));
  }
  return out;
}

// The commit when every node may have its own folder (several nodes; `fence` set): each rank
// reads back its own files for their sizes and CRCs, rank 0 gathers them into the manifest, asks
// the fence (the node agent: is this generation still current? then etcd records the commit),
// and only then writes manifest.json and COMMITTED into its folder.
Status CommitFenced(ckpt::CheckpointStore& store, const ckpt::CheckpointSnapshot& snap,
                    parallel::Communicator& world, const CommitFence& fence,
                    protocol::FaultInjector* faults) {
  std::vector<std::string> names;
  for (const auto& [name, bytes] : snap.files) names.push_back(name);
  Result<std::map<std::string, ckpt::FileEntry>> mine = store.ReadEntries(snap.step, names);
  nlohmann::json entries = nlohmann::json::object();
  if (mine.ok()) {
    for (const auto& [name, e] : *mine) entries[name] = {{"bytes", e.bytes}, {"crc32", e.crc32}};
  }
  const std::vector<std::string> all = AllGatherStrings(world, mine.ok() ? entries.dump() : "");
  if (!mine.ok()) return mine.status();
  if (snap.rank != 0) return Status::Ok();
  ckpt::Manifest m;
  m.step = snap.step;
  m.created_unix = static_cast<int64_t>(std::time(nullptr));
  m.world_size = snap.world_size;
  m.layout = snap.layout.is_object() ? snap.layout : nlohmann::json::object();
  m.extra = snap.extra.is_object() ? snap.extra : nlohmann::json::object();
  for (size_t r = 0; r < all.size(); ++r) {
    const auto j = nlohmann::json::parse(all[r], nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      return PeerLost(
          fmt::format("rank {} could not read back its files of checkpoint step {}", r, snap.step));
    }
    for (const auto& [name, e] : j.items()) {
      m.files[name] = ckpt::FileEntry{e.value("bytes", uint64_t{0}), e.value("crc32", 0u)};
    }
  }
  for (const std::string& name : snap.expected_files) {
    if (m.files.count(name) == 0) {
      return Internal(fmt::format("checkpoint step {}: no rank wrote {}", snap.step, name));
    }
  }
  TENAX_RETURN_IF_ERROR(fence(snap.step, m.ToJson()));
  if (faults != nullptr) {  // --inject kill-in-ckpt:at=fenced
    TENAX_RETURN_IF_ERROR(faults->CheckpointHook(snap.step, protocol::CheckpointPhase::kFenced,
                                                 store.StepDir(snap.step)));
  }
  return store.CommitManifest(m);
}

}  // namespace

Status WriteTrainCheckpoint(ckpt::CheckpointStore& store, const ckpt::CheckpointSnapshot& snap,
                            parallel::Communicator* world, protocol::FaultInjector* faults,
                            const CommitFence& fence) {
  const int64_t step = snap.step;
  auto barrier = [&] {
    if (world) world->Barrier();
  };
  // Rank 0 clears leftovers of an interrupted save of this step before anyone writes.
  Status prepared = snap.rank == 0 ? store.Prepare(step) : Status::Ok();
  barrier();
  TENAX_RETURN_IF_ERROR(prepared);
  Status wrote = snap.files.empty() ? Status::Ok() : store.WriteFiles(step, snap.files);
  if (wrote.ok() && faults != nullptr) {  // --inject ckpt-fail / kill-in-ckpt
    wrote = faults->CheckpointHook(step, protocol::CheckpointPhase::kWritten, store.StepDir(step));
  }
  // Every rank learns whether every rank wrote before rank 0 commits.
  at::Tensor failed = at::full({1}, wrote.ok() ? 0.0f : 1.0f, at::kFloat);
  if (world) world->AllReduceSum(failed);
  TENAX_RETURN_IF_ERROR(wrote);
  if (failed.item<float>() > 0) {
    // Secondary: the rank that failed to write reports the cause (protocol/exit_report.h).
    return PeerLost("another rank failed to write its part of checkpoint step " +
                    std::to_string(step) + "; the checkpoint was not committed");
  }
  Status committed = Status::Ok();
  if (fence && world != nullptr) {
    committed = CommitFenced(store, snap, *world, fence, faults);
    if (snap.rank == 0 && committed.ok() && faults != nullptr) {  // --inject ckpt-corrupt
      committed =
          faults->CheckpointHook(step, protocol::CheckpointPhase::kCommitted, store.StepDir(step));
    }
  } else if (snap.rank == 0) {
    committed = store.Commit(step, snap.layout, snap.extra, snap.expected_files, snap.world_size);
    if (committed.ok() && faults != nullptr) {  // --inject ckpt-corrupt
      committed =
          faults->CheckpointHook(step, protocol::CheckpointPhase::kCommitted, store.StepDir(step));
    }
  }
  barrier();
  return committed;
}

Status SaveTrainCheckpoint(ckpt::CheckpointStore& store, const TrainProgress& progress,
                           TrainTarget& target, const std::string& config_toml) {
  TENAX_ASSIGN_OR_RETURN(ckpt::CheckpointSnapshot snap,
                         SnapshotTrainCheckpoint(progress, target, config_toml));
  TENAX_RETURN_IF_ERROR(ckpt::Materialize(snap));
  return WriteTrainCheckpoint(store, snap, target.world);
}

Result<TrainProgress> RestoreTrainCheckpoint(ckpt::CheckpointStore& store, int64_t step,
                                             TrainTarget& target) {
  TENAX_ASSIGN_OR_RETURN(model::ModelCheckpoint ckpt,
                         model::LoadModelCheckpoint(store.StepDir(step)));
  return RestoreTrainCheckpoint(ckpt, target);
}

Result<TrainProgress> RestoreTrainCheckpoint(const model::ModelCheckpoint& ckpt,
                                             TrainTarget& target) {
  model::Llama& model = target.model;
  const ModelSpec& want = model.spec();
  const ModelSpec& have = ckpt.spec;
  // The dense SwiGLU width is no shape of a model whose every layer is MoE (Mixtral imports set
  // it to the experts' width).
  const bool ffn_used = want.n_moe_layers() < want.n_layers;
  if (have.dim != want.dim || have.n_layers != want.n_layers || have.n_heads != want.n_heads ||
      have.n_kv_heads != want.n_kv_heads ||
      (ffn_used && have.ffn_hidden_dim != want.ffn_hidden_dim) ||
      have.vocab_size != want.vocab_size || have.tie_embeddings != want.tie_embeddings ||
      have.moe.n_experts != want.moe.n_experts || have.moe.top_k != want.moe.top_k ||
      have.moe.ffn_hidden_dim != want.moe.ffn_hidden_dim ||
      have.moe.n_shared != want.moe.n_shared) {
    return InvalidArgument(fmt::format(
        "checkpoint {} holds a different model ({}: dim {}, {} layers, vocab {}) than the config "
        "asks for ({}: dim {}, {} layers, vocab {}); fix [model] or point checkpoint.resume "
        "elsewhere",
        ckpt.dir, have.name, have.dim, have.n_layers, have.vocab_size, want.name, want.dim,
        want.n_layers, want.vocab_size));
  }
  // Names and shapes are checked against the full model's before anything is loaded.
  TENAX_RETURN_IF_ERROR(model.CheckParams(ckpt.params).WithContext(ckpt.dir));
  if (target.parallel != nullptr) {
    target.parallel->LoadFull(ckpt.params);
  } else {
    TENAX_RETURN_IF_ERROR(model.LoadParams(ckpt.params).WithContext(ckpt.dir));
  }
  TrainProgress p;
  TENAX_ASSIGN_OR_RETURN(std::vector<model::NamedTensor> state,
                         model::AssembleFromFiles(ckpt.files, "optimizer", ckpt.dir));
  if (state.empty()) {
    log::Info("{} holds weights only: starting the optimizer and data at step 0", ckpt.dir);
    return p;
  }
  const TrainState& s = ckpt.train_state;
  if (!s.training) {
    return DataError(
        fmt::format("{}/{} is incomplete: it has optimizer state but no "
                    "optimizer_step, data position or RNG state",
                    ckpt.dir, kTrainStateFile));
  }
  {
    p.step = s.step;
    p.data_position = s.data_position;
    p.batch = s.batch;
    p.saved_config = s.config_toml;
    p.tokens_seen = s.tokens_seen;
    p.loss_history = s.loss_history;
    const int64_t opt_step = s.optimizer_step;
    if (target.parallel != nullptr) {
      std::vector<std::string> prefixes = {"exp_avg.", "exp_avg_sq."};
      std::vector<model::NamedTensor> as_params;  // validated like parameters, per prefix
      for (const auto& prefix : prefixes) {
        as_params.clear();
        for (const auto& t : state) {
          if (t.name.rfind(prefix, 0) == 0)
            as_params.push_back({t.name.substr(prefix.size()), t.tensor});
        }
        TENAX_RETURN_IF_ERROR(model.CheckParams(as_params).WithContext(
            ckpt.dir + ": optimizer state " + prefix + "*"));
      }
      TENAX_RETURN_IF_ERROR(
          target.optimizer.LoadState(target.parallel->ShardState(state, prefixes), opt_step)
              .WithContext(ckpt.dir));
    } else {
      TENAX_RETURN_IF_ERROR(target.optimizer.LoadState(state, opt_step).WithContext(ckpt.dir));
    }
    if (target.moe != nullptr && target.moe->has_bias() && !s.moe_expert_bias.empty()) {
      const auto& rows = s.moe_expert_bias;
      at::Tensor table = at::zeros({want.n_layers, want.moe.n_experts}, at::kDouble);
      if (static_cast<int64_t>(rows.size()) != want.n_layers) {
        return DataError(ckpt.dir + "/train_state.json: moe_expert_bias has " +
                         std::to_string(rows.size()) + " rows for " +
                         std::to_string(want.n_layers) + " layers");
      }
      for (int64_t i = 0; i < want.n_layers; ++i) {
        const auto& r = rows[static_cast<size_t>(i)];
        if (static_cast<int64_t>(r.size()) != want.moe.n_experts) {
          return DataError(ckpt.dir + "/train_state.json: moe_expert_bias row " +
                           std::to_string(i) + " does not have one value per expert");
        }
        table[i].copy_(at::tensor(r, at::kDouble));
      }
      target.moe->SetBiasTable(table);
    }
    TENAX_ASSIGN_OR_RETURN(at::Tensor rng, FromHex(s.rng_torch_cpu));
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default state
    gen.set_state(rng);
  }
  return p;
}

TrainCheckpointer::TrainCheckpointer(Setup setup, ckpt::CheckpointStore& store,
                                     parallel::Communicator* world)
    : setup_(std::move(setup)), store_(store), world_(world) {
  if (!setup_.replica_root.empty()) {
    replica_ = std::make_unique<ckpt::MemoryReplica>(LocalFs(), setup_.replica_root, setup_.rank,
                                                     setup_.world_size);
  }
  if (setup_.options.async) {
    ckpt::AsyncWriterOptions o;
    o.keep_latest = setup_.options.keep_latest;  // only the committing rank prunes
    if (replica_) {
      // Copies into tmpfs happen on the writer thread, not in the training step.
      o.before_write = [r = replica_.get()](const ckpt::CheckpointSnapshot& s) {
        return r->Put(s.step, s.files);
      };
    }
    // --inject ckpt-fail / kill-in-ckpt / ckpt-corrupt fire at the same points as in sync saves.
    if (protocol::FaultInjector* f = setup_.faults) {
      o.after_files = [f](const ckpt::CheckpointSnapshot& s, const std::string& dir) {
        return f->CheckpointHook(s.step, protocol::CheckpointPhase::kWritten, dir);
      };
      o.after_commit = [f](const ckpt::CheckpointSnapshot& s, const std::string& dir) {
        return f->CheckpointHook(s.step, protocol::CheckpointPhase::kCommitted, dir);
      };
    }
    writer_ = std::make_unique<ckpt::AsyncCheckpointWriter>(LocalFs(), setup_.folder, o);
  }
}

TrainCheckpointer::~TrainCheckpointer() = default;

Result<std::optional<TrainProgress>> TrainCheckpointer::RestoreFromMemory(TrainTarget& target) {
  // Every rank must take the same path: a rank that cannot gather the checkpoint from RAM makes
  // every rank use storage.
  std::optional<model::ModelCheckpoint> ckpt;
  std::string why = "memory replicas are off";
  bool fresh = false;  // nothing committed yet: nothing to restore, nothing to say
  if (replica_) {
    Result<std::vector<int64_t>> steps = store_.ListCommitted();
    if (!steps.ok() || steps->empty()) {
      fresh = true;
    } else {
      const int64_t step = steps->back();
      Result<ckpt::Manifest> manifest = ckpt::ReadCommittedManifest(LocalFs(), store_, step);
      Result<std::map<std::string, std::string>> files =
          manifest.ok() ? replica_->Gather(step, *manifest)
                        : Result<std::map<std::string, std::string>>(manifest.status());
      if (files.ok()) {
        ckpt::LoadedCheckpoint loaded;
        loaded.step = step;
        loaded.dir = store_.StepDir(step) + " (memory replicas)";
        loaded.manifest = *manifest;
        loaded.files = std::move(*files);
        Result<model::ModelCheckpoint> m = model::ModelCheckpointFromFiles(std::move(loaded));
        if (m.ok()) {
          ckpt = std::move(*m);
        } else {
          why = m.status().message();
        }
      } else {
        why = files.status().message();
      }
    }
  }
  at::Tensor missing = at::full({1}, ckpt ? 0.0f : 1.0f, at::kFloat);
  if (world_) world_->AllReduceSum(missing);
  if (missing.item<float>() > 0) {
    if (replica_ && setup_.rank == 0 && !fresh) {
      log::Info("not restoring from memory replicas ({}): reading the checkpoint from storage",
                ckpt ? "another rank has no usable copy" : why);
    }
    return std::optional<TrainProgress>();
  }
  TENAX_ASSIGN_OR_RETURN(TrainProgress p, RestoreTrainCheckpoint(*ckpt, target));
  log::Info(
      "resumed from step {} out of memory replicas in {}: no checkpoint data read from "
      "storage",
      ckpt->step, setup_.replica_root);
  return std::optional<TrainProgress>(std::move(p));
}

void TrainCheckpointer::RepairFromReplicas() {
  if (replica_) {
    Result<std::vector<int64_t>> steps = store_.ListCommitted();
    if (steps.ok() && !steps->empty()) {
      Result<std::vector<std::string>> repaired = replica_->RepairStorage(store_, steps->back());
      if (!repaired.ok()) {
        if (repaired.status().code() != StatusCode::kNotFound) {
          log::Warn("memory replica not used: {}", repaired.status().message());
        }
      } else if (!repaired->empty()) {
        log::Warn("restored {} file(s) of checkpoint step {} from the memory replica",
                  repaired->size(), steps->back());
      }
    }
  }
  // Nobody verifies the newest checkpoint before every rank has repaired its part.
  if (world_) world_->Barrier();
}

Status TrainCheckpointer::Start(int64_t resume_step) {
  IntervalPolicyOptions o;
  o.automatic = setup_.options.interval_auto;
  o.interval = setup_.options.interval;
  o.total_steps = setup_.total_steps;
  o.prior_rate_per_hour = setup_.options.failure_rate_per_hour;
  o.observed = setup_.observed;
  policy_.emplace(o, resume_step);
  if (!writer_) return Status::Ok();
  // Markers found by the async protocol must come from this run (async_writer.h).
  Status st = setup_.rank == 0 && setup_.options.enable
                  ? ckpt::RemoveUncommittedAfter(LocalFs(), setup_.folder, resume_step)
                  : Status::Ok();
  if (world_) world_->Barrier();
  return st;
}

void TrainCheckpointer::RecordStepTime(double seconds) {
  TENAX_CHECK(policy_.has_value());
  policy_->RecordStepTime(seconds);
}

bool TrainCheckpointer::Due(int64_t step, bool last) const {
  TENAX_CHECK(policy_.has_value());
  return setup_.options.enable && (last || policy_->ShouldSave(step));
}

Result<std::vector<std::string>> TrainCheckpointer::Save(const TrainProgress& progress,
                                                         TrainTarget& target,
                                                         const std::string& config_toml,
                                                         double process_elapsed_s) {
  TENAX_CHECK(policy_.has_value());
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<std::string> lines;
  TENAX_ASSIGN_OR_RETURN(ckpt::CheckpointSnapshot snap,
                         SnapshotTrainCheckpoint(progress, target, config_toml, setup_.attempt));
  // GPU state: the next optimizer update waits (on the device) for this snapshot's copies.
  before_update_ = std::move(snap.before_update);
  snap.before_update = nullptr;
  if (writer_) {
    // Blocks only while a previous save is still being written (one in flight).
    TENAX_RETURN_IF_ERROR(writer_->Submit(std::move(snap)));
    submitted_ = progress.step;
  } else {
    TENAX_RETURN_IF_ERROR(ckpt::Materialize(snap));
    TENAX_RETURN_IF_ERROR(WriteTrainCheckpoint(store_, snap, world_, setup_.faults, setup_.fence));
    if (replica_) TENAX_RETURN_IF_ERROR(replica_->Put(snap.step, snap.files));
    last_committed_ = progress.step;
    if (setup_.rank == 0) TENAX_RETURN_IF_ERROR(store_.Prune(setup_.options.keep_latest));
    lines.push_back(fmt::format("saved checkpoint {} in {:.2f}s", store_.StepDir(progress.step),
                                std::chrono::duration<double>(Clock::now() - t0).count()));
  }
  const double blocking_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t before = policy_->interval();
  policy_->RecordSave(progress.step, blocking_s, process_elapsed_s);
  if (setup_.options.interval_auto && world_ != nullptr) {
    // Saving is collective: every rank must use rank 0's interval.
    at::Tensor interval = at::full({1}, policy_->interval(), at::kLong);
    world_->Broadcast(interval, 0);
    policy_->AdoptInterval(interval.item<int64_t>());
  }
  if (policy_->interval() != before) {
    lines.push_back(fmt::format("checkpoint interval {} -> {} steps (Young/Daly optimum for {})",
                                before, policy_->interval(), policy_->Explain()));
  }
  for (auto& l : Drain()) lines.push_back(std::move(l));
  return lines;
}

void TrainCheckpointer::BeforeUpdate() {
  if (!before_update_) return;
  before_update_();
  before_update_ = nullptr;
}

Result<std::vector<std::string>> TrainCheckpointer::Finish() {
  if (!writer_) return std::vector<std::string>{};
  Status st = writer_->Wait();
  std::vector<std::string> lines = Drain();
  if (!st.ok()) return st;
  return lines;
}

void TrainCheckpointer::DropReplicas() {
  if (!replica_) return;
  if (world_) world_->Barrier();  // nobody still reads or writes a copy
  Status st = replica_->DropHeld();
  if (!st.ok()) log::Warn("could not free the memory replicas: {}", st.message());
}

std::optional<int64_t> TrainCheckpointer::in_flight() {
  if (!writer_ || submitted_ < 0 || !writer_->busy()) return std::nullopt;
  return submitted_;
}

std::vector<std::string> TrainCheckpointer::Drain() {
  std::vector<std::string> lines;
  if (!writer_) return lines;
  for (const ckpt::CompletedSave& done : writer_->TakeCompleted()) {
    if (!done.committed) continue;  // ranks other than 0 only wrote their part
    last_committed_ = done.step;
    lines.push_back(
        fmt::format("saved checkpoint {} in the background ({:.2f}s to write, commit "
                    "and verify)",
                    store_.StepDir(done.step), done.seconds));
  }
  return lines;
}

}  // namespace tenax::train
