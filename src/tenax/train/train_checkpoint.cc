#include "tenax/train/train_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cstring>

#include "tenax/config/model_spec_json.h"
#include "tenax/core/log.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/tensor_io.h"

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

// Renames the optimizer's flat-shard state ("exp_avg.flat_shard") into per-parameter slices
// ("exp_avg.<param>") so the file reads like the unsharded layout.
std::vector<model::TensorSlice> StateSlices(const parallel::DataParallel& dp,
                                            const std::vector<model::NamedTensor>& state) {
  std::vector<model::TensorSlice> out;
  const auto& entries = dp.layout().entries;
  for (const auto& s : state) {
    const std::string prefix = s.name.substr(0, s.name.find('.') + 1);  // "exp_avg."
    for (auto& sl : dp.Slices(s.tensor)) {
      std::vector<int64_t> shape;
      for (const auto& e : entries) {
        if (e.name == sl.name) shape = e.shape;
      }
      out.push_back({prefix + sl.name, shape, sl.begin, sl.end, sl.values});
    }
  }
  return out;
}

std::vector<model::TensorSlice> ParamSlices(const parallel::DataParallel& dp,
                                            const at::Tensor& shard) {
  std::vector<model::TensorSlice> out;
  for (auto& sl : dp.Slices(shard)) {
    std::vector<int64_t> shape;
    for (const auto& e : dp.layout().entries) {
      if (e.name == sl.name) shape = e.shape;
    }
    out.push_back({sl.name, shape, sl.begin, sl.end, sl.values});
  }
  return out;
}

}  // namespace

Status SaveTrainCheckpoint(ckpt::CheckpointStore& store, const TrainProgress& progress,
                           TrainTarget& target, const std::string& config_toml) {
  const int rank = target.world ? target.world->rank() : 0;
  const int world = target.world ? target.world->size() : 1;
  const bool sharded = target.dp != nullptr && target.dp->sharded();
  if (target.before_save) target.before_save();
  auto barrier = [&] {
    if (target.world) target.world->Barrier();
  };
  // Rank 0 clears leftovers of an interrupted save of this step before anyone writes.
  Status prepared = rank == 0 ? store.Prepare(progress.step) : Status::Ok();
  barrier();
  TENAX_RETURN_IF_ERROR(prepared);

  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> expected;
  if (sharded) {
    const int n = target.dp->shard_count();
    for (int s = 0; s < n; ++s) {
      expected.push_back(model::RankFileName("model", s, n));
      expected.push_back(model::RankFileName("optimizer", s, n));
    }
    // Replicas hold identical shards: the first replica writes them.
    if (target.dp->replica_index() == 0) {
      const int s = target.dp->shard_rank();
      files.push_back({model::RankFileName("model", s, n),
                       model::SerializeSlices(ParamSlices(
                           *target.dp, target.dp->optimizer_params()[0].tensor.detach()))});
      files.push_back({model::RankFileName("optimizer", s, n),
                       model::SerializeSlices(
                           StateSlices(*target.dp, target.optimizer.StateTensors()))});
    }
  } else if (target.tp != nullptr) {
    expected = {model::kModelFile, model::kOptimizerFile};
    // Collective over each TP group (every replica gathers; rank 0 writes).
    auto params = target.tp->FullParams();
    auto state = target.tp->FullState(target.optimizer.StateTensors());
    if (rank == 0) {
      files.push_back({model::kModelFile, model::SerializeTensors(params, {{"format", "tenax"}})});
      files.push_back(
          {model::kOptimizerFile, model::SerializeTensors(state, {{"format", "tenax"}})});
    }
  } else {
    expected = {model::kModelFile, model::kOptimizerFile};
    if (rank == 0) {
      files.push_back({model::kModelFile,
                       model::SerializeTensors(target.model.params(), {{"format", "tenax"}})});
      files.push_back({model::kOptimizerFile,
                       model::SerializeTensors(target.optimizer.StateTensors(),
                                               {{"format", "tenax"}})});
    }
  }
  expected.push_back(model::kTrainStateFile);
  if (rank == 0) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    nlohmann::json state = {
        {"step", progress.step},
        {"optimizer_step", target.optimizer.step_count()},
        {"data", {{"position", progress.data_position}}},
        {"tokens_seen", progress.tokens_seen},
        {"rng", {{"torch_cpu", ToHex(gen.get_state())}}},
        {"model", ModelSpecToJson(target.model.spec())},
        {"config", config_toml},
        {"layout", target.layout},
    };
    files.push_back({model::kTrainStateFile, state.dump(2)});
  }
  Status wrote = files.empty() ? Status::Ok() : store.WriteFiles(progress.step, files);
  // Every rank learns whether every rank wrote before rank 0 commits.
  at::Tensor failed = at::full({1}, wrote.ok() ? 0.0f : 1.0f, at::kFloat);
  if (target.world) target.world->AllReduceSum(failed);
  TENAX_RETURN_IF_ERROR(wrote);
  if (failed.item<float>() > 0) {
    return IoError("another rank failed to write its part of checkpoint step " +
                   std::to_string(progress.step) + "; the checkpoint was not committed");
  }
  Status committed = Status::Ok();
  if (rank == 0) {
    committed = store.Commit(progress.step, target.layout, {{"kind", "training"}}, expected, world);
  }
  barrier();
  return committed;
}

Result<TrainProgress> RestoreTrainCheckpoint(ckpt::CheckpointStore& store, int64_t step,
                                             TrainTarget& target) {
  TENAX_ASSIGN_OR_RETURN(model::ModelCheckpoint ckpt,
                         model::LoadModelCheckpoint(store.StepDir(step)));
  model::Llama& model = target.model;
  const ModelSpec& want = model.spec();
  const ModelSpec& have = ckpt.spec;
  if (have.dim != want.dim || have.n_layers != want.n_layers || have.n_heads != want.n_heads ||
      have.n_kv_heads != want.n_kv_heads || have.ffn_hidden_dim != want.ffn_hidden_dim ||
      have.vocab_size != want.vocab_size || have.tie_embeddings != want.tie_embeddings) {
    return InvalidArgument(fmt::format(
        "checkpoint {} holds a different model ({}: dim {}, {} layers, vocab {}) than the config "
        "asks for ({}: dim {}, {} layers, vocab {}); fix [model] or point checkpoint.resume "
        "elsewhere",
        ckpt.dir, have.name, have.dim, have.n_layers, have.vocab_size, want.name, want.dim,
        want.n_layers, want.vocab_size));
  }
  const bool sharded = target.dp != nullptr && target.dp->sharded();
  if (target.tp != nullptr) {
    TENAX_RETURN_IF_ERROR(model.LoadParams(ckpt.params).WithContext(ckpt.dir));  // validates
    target.tp->LoadFull(ckpt.params);
  } else if (sharded) {
    // Validate names and shapes through the model first (it checks every tensor).
    target.dp->Gather();
    TENAX_RETURN_IF_ERROR(model.LoadParams(ckpt.params).WithContext(ckpt.dir));
    target.dp->Release();
    target.dp->LoadFull(ckpt.params);
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
  const nlohmann::json& s = ckpt.train_state;
  try {
    p.step = s.at("step").get<int64_t>();
    p.data_position = s.at("data").at("position").get<int64_t>();
    p.tokens_seen = s.at("tokens_seen").get<int64_t>();
    const int64_t opt_step = s.at("optimizer_step").get<int64_t>();
    if (sharded) {
      std::vector<model::NamedTensor> shards;
      for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
        std::vector<model::NamedTensor> by_param;
        for (const auto& t : state) {
          if (t.name.rfind(prefix, 0) == 0) by_param.push_back({t.name.substr(std::strlen(prefix)), t.tensor});
        }
        if (by_param.size() != model.params().size()) {
          return DataError(ckpt.dir + ": optimizer state is incomplete (" + prefix + "*)");
        }
        shards.push_back({std::string(prefix) + "flat_shard", target.dp->ShardOf(by_param)});
      }
      TENAX_RETURN_IF_ERROR(target.optimizer.LoadState(shards, opt_step).WithContext(ckpt.dir));
    } else if (target.tp != nullptr) {
      TENAX_RETURN_IF_ERROR(
          target.optimizer.LoadState(target.tp->Shard(state), opt_step).WithContext(ckpt.dir));
    } else {
      TENAX_RETURN_IF_ERROR(target.optimizer.LoadState(state, opt_step).WithContext(ckpt.dir));
    }
    TENAX_ASSIGN_OR_RETURN(at::Tensor rng, FromHex(s.at("rng").at("torch_cpu").get<std::string>()));
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default state
    gen.set_state(rng);
  } catch (const nlohmann::json::exception& e) {
    return DataError(ckpt.dir + "/train_state.json is incomplete: " + e.what());
  }
  return p;
}

}  // namespace tenax::train
