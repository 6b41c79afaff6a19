// The synchronous and the asynchronous save share SnapshotTrainCheckpoint: a checkpoint written
// in the background holds byte-identical data files, verifies, and restores the same state.
#include "tenax/train/train_checkpoint.h"

#include <gtest/gtest.h>

#include "tenax/checkpoint/async_writer.h"
#include "tenax/config/model_spec.h"
#include "tenax/core/temp_dir.h"

namespace tenax::train {
namespace {

ModelSpec TinySpec() {
  ModelOptions o;
  o.preset = "debug-tiny";
  o.vocab_size = 32;
  Result<ModelSpec> spec = ResolveModelSpec(o, 32);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  return *spec;
}

// A single-process target: the optional members keep their defaults (named here once, so the
// test does not depend on which optional members TrainTarget has).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
TrainTarget SingleProcess(model::Llama& model, AdamW& opt) { return TrainTarget{model, opt}; }
#pragma GCC diagnostic pop

// One AdamW step with a made-up gradient, so the optimizer state is not all zeros.
void TakeOneStep(model::Llama& model, AdamW& opt) {
  for (auto& p : model.params()) p.tensor.mutable_grad() = at::ones_like(p.tensor) * 0.01;
  opt.Step(1e-3);
  for (auto& p : model.params()) p.tensor.mutable_grad() = at::Tensor();
}

TEST(TrainCheckpointTest, AsyncSaveWritesTheSameFilesAsTheSyncSave) {
  testing::TempDir tmp;
  model::Llama model(TinySpec(), /*seed=*/7, at::kCPU);
  AdamW opt(OptimizerOptions{}, model.params());
  TakeOneStep(model, opt);
  TrainTarget target = SingleProcess(model, opt);
  target.layout = {{"world_size", 1}};
  TrainProgress progress;
  progress.step = 5;
  progress.data_position = 40;
  progress.tokens_seen = 1280;
  progress.batch = BatchShape{/*local=*/2, /*accum=*/3, /*data_parallel=*/4, /*global=*/24};
  target.tokenizer = TokenizerRecord{"byte", std::nullopt, 256};

  ckpt::CheckpointStore sync_store(LocalFs(), tmp / "sync");
  ASSERT_TRUE(SaveTrainCheckpoint(sync_store, progress, target, "# config").ok());

  Result<ckpt::CheckpointSnapshot> snap = SnapshotTrainCheckpoint(progress, target, "# config");
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_EQ(snap->step, 5);
  EXPECT_EQ(snap->world_size, 1);
  EXPECT_EQ(snap->files.size(), 3u);  // model, optimizer, train_state
  {
    ckpt::AsyncCheckpointWriter writer(LocalFs(), tmp / "async");
    ASSERT_TRUE(writer.Submit(std::move(*snap)).ok());
    ASSERT_TRUE(writer.Wait().ok());
    EXPECT_EQ(writer.last_committed().value_or(-1), 5);
  }

  ckpt::CheckpointStore async_store(LocalFs(), tmp / "async");
  Result<ckpt::LoadedCheckpoint> a = sync_store.Load(5);
  Result<ckpt::LoadedCheckpoint> b = async_store.Load(5);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(a->files.size(), b->files.size());
  for (const auto& [name, bytes] : a->files) {
    EXPECT_EQ(bytes, b->files.at(name)) << name << " differs";
  }
  EXPECT_EQ(a->manifest.layout, b->manifest.layout);
  EXPECT_EQ(a->manifest.extra, b->manifest.extra);

  // Restoring the asynchronous checkpoint into a fresh model gives back the saved state.
  model::Llama fresh(TinySpec(), /*seed=*/99, at::kCPU);
  AdamW fresh_opt(OptimizerOptions{}, fresh.params());
  TrainTarget fresh_target = SingleProcess(fresh, fresh_opt);
  Result<TrainProgress> restored = RestoreTrainCheckpoint(async_store, 5, fresh_target);
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  EXPECT_EQ(restored->step, 5);
  EXPECT_EQ(restored->data_position, 40);
  // The batch the steps were made with comes back (a resume on other ranks keeps it), and so does
  // the config the checkpoint was written with (to name deliberate changes).
  EXPECT_EQ(restored->batch.global, 24);
  EXPECT_EQ(restored->batch.local, 2);
  EXPECT_EQ(restored->batch.accum, 3);
  EXPECT_EQ(restored->batch.data_parallel, 4);
  EXPECT_EQ(restored->saved_config, "# config");
  const nlohmann::json state = nlohmann::json::parse(a->files.at("train_state.json"));
  EXPECT_EQ(state["tokenizer"]["eos_id"], 256);
  EXPECT_EQ(restored->tokens_seen, 1280);
  EXPECT_EQ(fresh_opt.step_count(), 1);
  for (size_t i = 0; i < model.params().size(); ++i) {
    EXPECT_TRUE(at::equal(model.params()[i].tensor, fresh.params()[i].tensor))
        << model.params()[i].name;
  }
}

// A checkpoint written before the batch was recorded: its batch is derived from its config
// (local_batch_size x grad_accum_steps) and layout (data-parallel degree), so that resuming it on
// another number of ranks still keeps its global batch.
TEST(TrainCheckpoint, OlderCheckpointsDeriveTheirBatchFromConfigAndLayout) {
  testing::TempDir tmp;
  model::Llama model(TinySpec(), /*seed=*/7, at::kCPU);
  AdamW opt(OptimizerOptions{}, model.params());
  TakeOneStep(model, opt);
  TrainTarget target = SingleProcess(model, opt);
  TrainProgress progress;
  progress.step = 3;
  Result<ckpt::CheckpointSnapshot> snap =
      SnapshotTrainCheckpoint(progress, target,
                              "[training]\nlocal_batch_size = 3\n"
                              "grad_accum_steps = 2\n");
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  for (auto& [name, bytes] : snap->files) {
    if (name != "train_state.json") continue;
    nlohmann::json state = nlohmann::json::parse(bytes);
    state["data"] = {{"position", 12}};  // as written before the batch fields existed
    state["layout"] = {
        {"world_size", 4}, {"data_parallel_replicate", 2}, {"data_parallel_shard", 2}};
    bytes = state.dump();
  }
  ckpt::CheckpointStore store(LocalFs(), tmp / "ckpt");
  ASSERT_TRUE(store.Save(3, snap->files, {{"world_size", 1}}, {}).ok());
  model::Llama fresh(TinySpec(), /*seed=*/8, at::kCPU);
  AdamW fresh_opt(OptimizerOptions{}, fresh.params());
  TrainTarget fresh_target = SingleProcess(fresh, fresh_opt);
  Result<TrainProgress> restored = RestoreTrainCheckpoint(store, 3, fresh_target);
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  EXPECT_EQ(restored->data_position, 12);
  EXPECT_EQ(restored->batch.local, 3);
  EXPECT_EQ(restored->batch.accum, 2);
  EXPECT_EQ(restored->batch.data_parallel, 4);
  EXPECT_EQ(restored->batch.global, 24);
}

// The trainer's glue in both modes: saves at the interval and the final step, prunes, keeps
// memory replicas, and reports completed saves.
void RunCheckpointer(bool async) {
  SCOPED_TRACE(async ? "async" : "sync");
  testing::TempDir tmp;
  model::Llama model(TinySpec(), /*seed=*/7, at::kCPU);
  AdamW opt(OptimizerOptions{}, model.params());
  TrainTarget target = SingleProcess(model, opt);
  ckpt::CheckpointStore store(LocalFs(), tmp / "ckpt");
  TrainCheckpointer::Setup setup;
  setup.options.interval = 3;
  setup.options.keep_latest = 2;
  setup.options.async = async;
  setup.total_steps = 10;
  setup.folder = tmp / "ckpt";
  setup.replica_root = tmp / "shm";
  setup.attempt = "0";
  TrainCheckpointer ckpt(setup, store, /*world=*/nullptr);
  ckpt.RepairFromReplicas();  // nothing to repair in a fresh run
  ASSERT_TRUE(ckpt.Start(/*resume_step=*/0).ok());
  std::vector<int64_t> saved;
  int reported = 0;
  for (int64_t step = 1; step <= 10; ++step) {
    TakeOneStep(model, opt);
    ckpt.RecordStepTime(0.01);
    if (!ckpt.Due(step, step == 10)) continue;
    Result<std::vector<std::string>> lines =
        ckpt.Save(TrainProgress{step, step * 4, step * 128, {}, {}, {}}, target, "# config", 1.0);
    ASSERT_TRUE(lines.ok()) << lines.status().message();
    reported += static_cast<int>(lines->size());
    saved.push_back(step);
  }
  Result<std::vector<std::string>> rest = ckpt.Finish();
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  reported += static_cast<int>(rest->size());
  EXPECT_EQ(saved, (std::vector<int64_t>{3, 6, 9, 10}));
  EXPECT_EQ(reported, 4);  // one "saved checkpoint" line per save
  EXPECT_EQ(ckpt.last_committed().value_or(-1), 10);
  EXPECT_EQ(*store.ListCommitted(), (std::vector<int64_t>{9, 10}));  // keep_latest = 2
  EXPECT_TRUE(store.Verify(10).ok());
  // The replica of the newest save matches the committed checkpoint.
  Result<ckpt::Manifest> m = ckpt::ReadCommittedManifest(LocalFs(), store, 10);
  ASSERT_TRUE(m.ok());
  ckpt::MemoryReplica replica(LocalFs(), tmp / "shm", 0, 1);
  Result<ckpt::NamedFiles> files = replica.Get(10, *m);
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(files->size(), 3u);
}

TEST(TrainCheckpointTest, CheckpointerSync) { RunCheckpointer(/*async=*/false); }
TEST(TrainCheckpointTest, CheckpointerAsync) { RunCheckpointer(/*async=*/true); }

}  // namespace
}  // namespace tenax::train
