#include "tenax/train/train_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

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

Status SaveTrainCheckpoint(ckpt::CheckpointStore& store, const TrainProgress& progress,
                           const model::Llama& model, const AdamW& optimizer,
                           const std::string& config_toml) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  nlohmann::json state = {
      {"step", progress.step},
      {"optimizer_step", optimizer.step_count()},
      {"data", {{"position", progress.data_position}}},
      {"tokens_seen", progress.tokens_seen},
      {"rng", {{"torch_cpu", ToHex(gen.get_state())}}},
      {"model", ModelSpecToJson(model.spec())},
      {"config", config_toml},
  };
  std::string model_bytes = model::SerializeTensors(model.params(), {{"format", "tenax"}});
  std::string optim_bytes = model::SerializeTensors(optimizer.StateTensors(), {{"format", "tenax"}});
  return store.Save(progress.step,
                    {{model::kModelFile, std::move(model_bytes)},
                     {model::kOptimizerFile, std::move(optim_bytes)},
                     {model::kTrainStateFile, state.dump(2)}},
                    {{"world_size", 1}, {"sharding", "none"}}, {{"kind", "training"}});
}

Result<TrainProgress> RestoreTrainCheckpoint(ckpt::CheckpointStore& store, int64_t step,
                                             model::Llama& model, AdamW& optimizer) {
  TENAX_ASSIGN_OR_RETURN(model::ModelCheckpoint ckpt,
                         model::LoadModelCheckpoint(store.StepDir(step)));
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
  TENAX_RETURN_IF_ERROR(model.LoadParams(ckpt.params).WithContext(ckpt.dir));
  TrainProgress p;
  auto optim_it = ckpt.files.find(model::kOptimizerFile);
  if (optim_it == ckpt.files.end()) {
    log::Info("{} holds weights only: starting the optimizer and data at step 0", ckpt.dir);
    return p;
  }
  TENAX_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file,
                         ckpt::SafetensorsFile::FromBytes(optim_it->second,
                                                          ckpt.dir + "/" + model::kOptimizerFile));
  TENAX_ASSIGN_OR_RETURN(std::vector<model::NamedTensor> state, model::ReadTensors(file));
  const nlohmann::json& s = ckpt.train_state;
  try {
    p.step = s.at("step").get<int64_t>();
    p.data_position = s.at("data").at("position").get<int64_t>();
    p.tokens_seen = s.at("tokens_seen").get<int64_t>();
    TENAX_RETURN_IF_ERROR(
        optimizer.LoadState(state, s.at("optimizer_step").get<int64_t>()).WithContext(ckpt.dir));
    TENAX_ASSIGN_OR_RETURN(at::Tensor rng, FromHex(s.at("rng").at("torch_cpu").get<std::string>()));
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default state
    gen.set_state(rng);
  } catch (const nlohmann::json::exception& e) {
    return DataError(ckpt.dir + "/train_state.json is incomplete: " + e.what());
  }
  return p;
}

}  // namespace tenax::train
