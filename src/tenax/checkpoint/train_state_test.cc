// train_state.json as a typed record: every field survives a write and a read; checkpoints from
// before the batch and tokenizer records derive them from their config and layout; a weights-only
// record has no training fields; a missing or mistyped field names the file and the key.
#include "tenax/checkpoint/train_state.h"

#include <gtest/gtest.h>

#include "tenax/config/config.h"
#include "tenax/config/model_spec.h"

namespace tenax {
namespace {

ModelSpec Tiny() {
  ModelOptions o;
  o.preset = "debug-tiny";
  o.vocab_size = 256;
  Result<ModelSpec> s = ResolveModelSpec(o, 0);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

TEST(TrainState, EveryFieldSurvivesAWriteAndARead) {
  TrainState s;
  s.step = 40;
  s.model = Tiny();
  s.training = true;
  s.optimizer_step = 39;
  s.data_position = 1280;
  s.batch = BatchShape{2, 3, 4, 24};
  s.tokens_seen = 81920;
  s.rng_torch_cpu = "00ff10";
  s.config_toml = "[training]\nsteps = 50\n";
  s.layout = {{"world_size", 4}, {"data_parallel_shard", 4}};
  s.loss_history = {2.5, 0.1 + 0.2};  // not a short decimal: must round-trip exactly
  s.tokenizer = TokenizerRecord{"tiktoken:/abs/tokenizer.model", 128000, std::nullopt};
  s.moe_expert_bias = {{0.25, -1e-8}, {3, 4}};
  s.imported_from = "/hf/x";
  Result<TrainState> r = TrainState::Parse(s.ToJson(), "ckpt/step_00000040");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step, 40);
  EXPECT_EQ(r->model.name, s.model.name);
  EXPECT_EQ(r->model.dim, s.model.dim);
  EXPECT_TRUE(r->training);
  EXPECT_EQ(r->optimizer_step, 39);
  EXPECT_EQ(r->data_position, 1280);
  EXPECT_EQ(r->batch.local, 2);
  EXPECT_EQ(r->batch.accum, 3);
  EXPECT_EQ(r->batch.data_parallel, 4);
  EXPECT_EQ(r->batch.global, 24);
  EXPECT_EQ(r->tokens_seen, 81920);
  EXPECT_EQ(r->rng_torch_cpu, "00ff10");
  EXPECT_EQ(r->config_toml, s.config_toml);
  EXPECT_EQ(r->layout, s.layout);
  EXPECT_EQ(r->loss_history, s.loss_history);
  ASSERT_TRUE(r->tokenizer.has_value());
  EXPECT_EQ(r->tokenizer->spec, "tiktoken:/abs/tokenizer.model");
  EXPECT_EQ(r->tokenizer->bos_id, 128000);
  EXPECT_FALSE(r->tokenizer->eos_id.has_value());
  EXPECT_EQ(r->moe_expert_bias, s.moe_expert_bias);
  EXPECT_EQ(r->imported_from, "/hf/x");
  EXPECT_EQ(r->TokenizerSpec(), "tiktoken:/abs/tokenizer.model");
  Result<Config> c = r->SavedConfig();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->training.steps, 50);
}

TEST(TrainState, AWeightsOnlyRecordHasNoTrainingFields) {
  TrainState s;
  s.model = Tiny();
  const nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_FALSE(j.contains("optimizer_step"));
  EXPECT_FALSE(j.contains("data"));
  Result<TrainState> r = TrainState::Parse(s.ToJson(), "w");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->training);
  EXPECT_FALSE(r->tokenizer.has_value());
  EXPECT_FALSE(r->SavedConfig().ok());
  EXPECT_EQ(r->TokenizerSpec(), "");
}

// Written before "data" recorded the batch and before "tokenizer" existed: the batch comes from
// the config (local x accumulation) and the layout (data-parallel degree), a Brown corpus run's
// tokenizer from its config.
TEST(TrainState, OlderCheckpointsDeriveBatchAndTokenizerFromTheirConfig) {
  TrainState s;
  s.model = Tiny();
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  j["optimizer_step"] = 3;
  j["data"] = {{"position", 12}};
  j["tokens_seen"] = 96;
  j["rng"] = {{"torch_cpu", "00"}};
  j["config"] =
      "[training]\nlocal_batch_size = 3\ngrad_accum_steps = 2\n[data]\nsource = \"brown\"\n";
  j["layout"] = {{"data_parallel_replicate", 2}, {"data_parallel_shard", 2}};
  Result<TrainState> r = TrainState::Parse(j.dump(), "old");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->batch.local, 3);
  EXPECT_EQ(r->batch.accum, 2);
  EXPECT_EQ(r->batch.data_parallel, 4);
  EXPECT_EQ(r->batch.global, 24);
  Result<Config> c = r->SavedConfig();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(r->TokenizerSpec(), c->data.tokenizer);
  EXPECT_FALSE(r->TokenizerSpec().empty());
}

TEST(TrainState, AMissingOrMistypedFieldNamesTheFileAndTheKey) {
  TrainState s;
  s.model = Tiny();
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  j["optimizer_step"] = 3;  // a training record without its data position
  Result<TrainState> r = TrainState::Parse(j.dump(), "runs/x/checkpoints/step_00000003");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataError);
  EXPECT_NE(r.status().message().find("runs/x/checkpoints/step_00000003/train_state.json"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("data"), std::string::npos) << r.status().message();

  j = nlohmann::json::parse(s.ToJson());
  j["step"] = "forty";
  r = TrainState::Parse(j.dump(), "d");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("d/train_state.json is incomplete"), std::string::npos);

  j = nlohmann::json::parse(s.ToJson());
  j.erase("model");
  r = TrainState::Parse(j.dump(), "d");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has no \"model\""), std::string::npos);

  EXPECT_FALSE(TrainState::Parse("{not json", "d").ok());
}

}  // namespace
}  // namespace tenax
