#include "tenax/checkpoint/train_state.h"

#include <fmt/format.h>

#include "tenax/config/config.h"
#include "tenax/config/model_spec_json.h"

namespace tenax {
namespace {

using nlohmann::json;

json OptionalId(const std::optional<int64_t>& id) { return id ? json(*id) : json(); }

std::optional<int64_t> IdOf(const json& j, const char* key) {
  if (j.contains(key) && j[key].is_number_integer()) return j[key].get<int64_t>();
  return std::nullopt;
}

// The batch of a checkpoint written before "data" recorded it: local_batch_size x
// grad_accum_steps from its config, the data-parallel degree from its layout.
BatchShape DerivedBatch(const TrainState& s) {
  BatchShape b{0, 0, 0, 0};
  if (s.config_toml.empty() || !s.layout.contains("data_parallel_replicate")) return b;
  Result<Config> config = s.SavedConfig();
  if (!config.ok()) return b;
  b.local = config->training.local_batch_size;
  b.accum = config->training.grad_accum_steps;
  b.data_parallel = s.layout.at("data_parallel_replicate").get<int64_t>() *
                    s.layout.value("data_parallel_shard", int64_t{1});
  b.global = b.local * b.accum * b.data_parallel;
  return b;
}

}  // namespace

std::string TrainState::ToJson() const {
  json j = {{"step", step}, {"model", ModelSpecToJson(model)}};
  if (training) {
    j["optimizer_step"] = optimizer_step;
    j["data"] = {{"position", data_position},
                 {"global_batch_size", batch.global},
                 {"local_batch_size", batch.local},
                 {"grad_accum_steps", batch.accum},
                 {"data_parallel", batch.data_parallel}};
    j["tokens_seen"] = tokens_seen;
    j["rng"] = {{"torch_cpu", rng_torch_cpu}};
    j["config"] = config_toml;
    j["layout"] = layout;
  }
  if (!loss_history.empty()) j["loss_history"] = loss_history;
  if (tokenizer) {
    j["tokenizer"] = {{"spec", tokenizer->spec},
                      {"bos_id", OptionalId(tokenizer->bos_id)},
                      {"eos_id", OptionalId(tokenizer->eos_id)}};
  }
  if (!moe_expert_bias.empty()) j["moe_expert_bias"] = moe_expert_bias;  // fp32 as doubles: exact
  if (!imported_from.empty()) j["imported_from"] = imported_from;
  return j.dump(2);
}

Result<TrainState> TrainState::Parse(const std::string& text, const std::string& where) {
  const std::string file = where + "/" + kTrainStateFile;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return DataError(file + " is not a JSON object");
  TrainState s;
  try {
    s.step = j.at("step").get<int64_t>();
    if (!j.contains("model")) return DataError(file + " has no \"model\" description");
    TENAX_ASSIGN_OR_RETURN(s.model, ModelSpecFromJson(j["model"]));
    if (j.contains("config")) s.config_toml = j["config"].get<std::string>();
    if (j.contains("layout") && j["layout"].is_object()) s.layout = j["layout"];
    s.training = j.contains("optimizer_step");
    if (s.training) {
      s.optimizer_step = j.at("optimizer_step").get<int64_t>();
      const json& d = j.at("data");
      s.data_position = d.at("position").get<int64_t>();
      if (d.contains("global_batch_size")) {
        s.batch.global = d.at("global_batch_size").get<int64_t>();
        s.batch.local = d.at("local_batch_size").get<int64_t>();
        s.batch.accum = d.at("grad_accum_steps").get<int64_t>();
        s.batch.data_parallel = d.at("data_parallel").get<int64_t>();
      } else {
        s.batch = DerivedBatch(s);
      }
      s.tokens_seen = j.at("tokens_seen").get<int64_t>();
      s.rng_torch_cpu = j.at("rng").at("torch_cpu").get<std::string>();
    }
    if (j.contains("loss_history")) s.loss_history = j["loss_history"].get<std::vector<double>>();
    if (j.contains("tokenizer") && j["tokenizer"].is_object()) {
      const json& t = j["tokenizer"];
      s.tokenizer =
          TokenizerRecord{t.value("spec", std::string()), IdOf(t, "bos_id"), IdOf(t, "eos_id")};
    }
    if (j.contains("moe_expert_bias")) {
      s.moe_expert_bias = j["moe_expert_bias"].get<std::vector<std::vector<double>>>();
    }
    s.imported_from = j.value("imported_from", std::string());
  } catch (const json::exception& e) {
    return DataError(fmt::format("{} is incomplete: {}", file, e.what()));
  }
  return s;
}

Result<Config> TrainState::SavedConfig() const {
  if (config_toml.empty()) return NotFound(std::string(kTrainStateFile) + " records no config");
  return ParseConfig(config_toml, {}, std::string(kTrainStateFile) + "[config]");
}

std::string TrainState::TokenizerSpec() const {
  if (tokenizer) return tokenizer->spec;
  Result<Config> c = SavedConfig();  // checkpoints from before the record
  if (c.ok() && c->data.source == "brown") return c->data.tokenizer;
  return "";
}

}  // namespace tenax
