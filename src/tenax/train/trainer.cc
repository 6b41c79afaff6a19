#include "tenax/train/trainer.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <set>

#include "tenax/checkpoint/store.h"
#include "tenax/config/config.h"
#include "tenax/core/fault_injection.h"
#include "tenax/core/fs.h"
#include "tenax/core/heartbeat.h"
#include "tenax/core/log.h"
#include "tenax/data/loader.h"
#include "tenax/data/source.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/dist_env.h"
#include "tenax/parallel/flight_recorder.h"
#include "tenax/parallel/gradients.h"
#include "tenax/parallel/mesh.h"
#include "tenax/train/adamw.h"
#include "tenax/train/device.h"
#include "tenax/train/evaluate.h"
#include "tenax/train/loss_spike.h"
#include "tenax/train/lr_schedule.h"
#include "tenax/train/parallel_model.h"
#include "tenax/train/reporter.h"
#include "tenax/train/checkpoint_interval.h"
#include "tenax/train/train_checkpoint.h"

namespace tenax::train {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string CheckpointFolder(const Config& c, const std::string& run_dir) {
  const std::string& f = c.checkpoint.folder;
  return (!f.empty() && f[0] == '/') ? f : JoinPath(run_dir, f);
}

// Decides where training starts: fresh, the newest good checkpoint, or a given path.
Result<TrainProgress> Resume(const Config& c, ckpt::CheckpointStore& store,
                             TrainTarget& target) {
  const std::string& resume = c.checkpoint.resume;
  if (resume == "none") {
    TENAX_ASSIGN_OR_RETURN(std::vector<int64_t> steps, store.ListCommitted());
    if (!steps.empty()) {
      return InvalidArgument(fmt::format(
          "{} already holds checkpoints (newest: step {}) and checkpoint.resume = \"none\"; set "
          "checkpoint.resume = \"latest\" to continue that run, or choose another job.name or "
          "checkpoint.folder (tenax never overwrites checkpoints)",
          store.folder(), steps.back()));
    }
    return TrainProgress{};
  }
  if (resume == "latest") {
    auto latest = store.LatestGood();
    if (!latest.ok()) {
      if (latest.status().code() == StatusCode::kNotFound) return TrainProgress{};
      return latest.status();
    }
    log::Info("resuming from {}", store.StepDir(*latest));
    return RestoreTrainCheckpoint(store, *latest, target);
  }
  TENAX_ASSIGN_OR_RETURN(auto where, ckpt::ResolveCheckpointPath(LocalFs(), resume));
  ckpt::CheckpointStore other(LocalFs(), where.first);
  log::Info("resuming from {}", other.StepDir(where.second));
  return RestoreTrainCheckpoint(other, where.second, target);
}

// Bytes this rank moved through every group it belongs to (null entries: groups not in use).
parallel::CommStats TotalStats(const std::vector<const parallel::Communicator*>& groups) {
  parallel::CommStats t;
  for (const auto* g : groups) {
    if (g != nullptr) t += g->stats();
  }
  return t;
}

// Validation loss over this rank's share of the validation windows, combined over all ranks.
// `copies`: how many ranks evaluate each data-parallel slice (the TP and PP ranks of a group).
EvalResult DistributedEval(const LossFn& loss, data::EvalLoader& loader, const at::Device& device,
                           parallel::Communicator& world, int copies) {
  EvalResult local = EvaluateLoss(loss, loader, device);
  at::Tensor t = at::tensor({local.loss * static_cast<double>(local.tokens),
                             static_cast<double>(local.tokens)},
                            at::kDouble);
  world.AllReduceSum(t);
  const double tokens = t[1].item<double>();
  return EvalResult{tokens > 0 ? t[0].item<double>() / tokens : 0.0,
                    static_cast<int64_t>(tokens) / copies};
}

}  // namespace

Result<TrainSummary> Train(const Config& config) {
  const auto t_start = Clock::now();
  const TrainingOptions& t = config.training;
  if (t.threads > 0) at::set_num_threads(static_cast<int>(t.threads));
  at::manual_seed(config.job.seed);
  TENAX_ASSIGN_OR_RETURN(DeviceInfo device, ResolveDevice(t));
  TENAX_ASSIGN_OR_RETURN(parallel::DistEnv env, parallel::ReadDistEnv());
  if (env.distributed()) log::SetRank(env.rank);
  const bool lead = env.rank == 0;  // writes the run folder, reports, commits checkpoints

  // Data first: debug presets take their vocabulary from it.
  TENAX_ASSIGN_OR_RETURN(data::DataSplits data, data::OpenDataSource(config.data));
  log::Info("data: {}", data.description);
  if (data.entropy_rate_nats) {
    log::Info("data: exact entropy rate {:.4f} nats/token (the best achievable loss)",
              *data.entropy_rate_nats);
  }
  TENAX_ASSIGN_OR_RETURN(ModelSpec spec, ResolveModelSpec(config.model, data.vocab_size));
  if (t.seq_len > spec.max_seq_len) {
    return InvalidArgument(fmt::format(
        "training.seq_len ({}) exceeds the model's max_seq_len ({}); lower training.seq_len or "
        "raise model.max_seq_len",
        t.seq_len, spec.max_seq_len));
  }
  TENAX_ASSIGN_OR_RETURN(parallel::Mesh mesh,
                         parallel::Mesh::Create(config.parallelism, env.world, spec, t));
  const int tp_degree = mesh.degree(parallel::Axis::kTensor);
  const int pp_degree = mesh.degree(parallel::Axis::kPipeline);
  const ParamCounts counts = CountParams(spec);
  const FlopsPerToken flops = TrainingFlopsPerToken(spec, t.seq_len);

  TrainSummary summary;
  summary.model_name = spec.name;
  summary.n_params = counts.total;
  summary.entropy_rate_nats = data.entropy_rate_nats;
  summary.run_dir = JoinPath(config.job.dump_folder, config.job.name);
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(summary.run_dir));
  const std::string config_toml = ConfigToToml(config);
  if (lead) {
    TENAX_RETURN_IF_ERROR(
        LocalFs().WriteFileAtomic(JoinPath(summary.run_dir, "config.toml"), config_toml));
  }

  // Process groups: the world, then this rank's group along each data axis.
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ProcessGroups> groups,
                         parallel::ProcessGroups::Connect(env, std::chrono::seconds(120)));
  parallel::Communicator& world = groups->world();
  TENAX_ASSIGN_OR_RETURN(
      std::unique_ptr<parallel::Communicator> shard_group,
      groups->NewGroup("dp_shard", mesh.GroupOf(env.rank, parallel::Axis::kShard)));
  TENAX_ASSIGN_OR_RETURN(
      std::unique_ptr<parallel::Communicator> replicate_group,
      groups->NewGroup("dp_replicate", mesh.GroupOf(env.rank, parallel::Axis::kReplicate)));
  if (env.distributed()) {
    log::Info("rank {} of {} ({}), layout {}", env.rank, env.world, env.source, mesh.Describe());
  }
  // Flight recorder: this rank's last collectives in every group, dumped when the launcher
  // signals a hang (SIGUSR1) or when one runs past parallelism.collective_timeout_s
  // (docs/flight_recorder.md). Dumps go to the launcher's folder for this generation if any.
  std::unique_ptr<parallel::FlightRecorder> flight;
  std::unique_ptr<parallel::FlightRecorderWatchdog> watchdog;
  auto record = [&](parallel::Communicator* c, const char* name, parallel::Axis axis) {
    if (c == nullptr || flight == nullptr) return;
    c->SetFlightRecorder(flight.get(), name);
    flight->RegisterGroup(name, mesh.GroupOf(env.rank, axis));
  };
  if (env.distributed()) {
    flight = std::make_unique<parallel::FlightRecorder>(env.rank);
    const char* beat_dir = std::getenv("TENAX_HEARTBEAT_DIR");
    const std::string dump_dir =
        beat_dir != nullptr ? std::string(beat_dir) : JoinPath(summary.run_dir, "flight");
    TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(dump_dir));
    parallel::WatchdogOptions wo;
    wo.dump_path = parallel::FlightRecordPath(dump_dir, env.rank);
    wo.collective_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(config.parallelism.collective_timeout_s * 1000));
    watchdog = std::make_unique<parallel::FlightRecorderWatchdog>(*flight, LocalFs(), wo);
    world.SetFlightRecorder(flight.get(), "world");
    record(shard_group.get(), "dp_shard", parallel::Axis::kShard);
    record(replicate_group.get(), "dp_replicate", parallel::Axis::kReplicate);
  }

  // Same seed on every rank: identical initial weights, no broadcast needed.
  model::Llama model(spec, config.job.seed, device.device);
  model.SetActivationCheckpoint(config.parallelism.activation_checkpoint);
  // Distributed: this rank's part of the model under the layout (train/parallel_model.h). The
  // full model then only serves as the shape reference (its tensors are released).
  std::unique_ptr<parallel::Communicator> tp_group, pp_group;
  std::unique_ptr<ParallelModel> pm;
  if (env.distributed()) {
    TENAX_ASSIGN_OR_RETURN(tp_group,
                           groups->NewGroup("tp", mesh.GroupOf(env.rank, parallel::Axis::kTensor)));
    TENAX_ASSIGN_OR_RETURN(
        pp_group, groups->NewGroup("pp", mesh.GroupOf(env.rank, parallel::Axis::kPipeline)));
    record(tp_group.get(), "tp", parallel::Axis::kTensor);
    record(pp_group.get(), "pp", parallel::Axis::kPipeline);
    ParallelGroups pg{&world, replicate_group.get(), shard_group.get(), pp_group.get(),
                      tp_group.get()};
    TENAX_ASSIGN_OR_RETURN(pm, ParallelModel::Create(spec, model.params(), pg, config.parallelism,
                                                     device.device, device.compute_dtype));
    model.ReleaseParams();
  }
  std::vector<model::NamedTensor>& trained = pm ? pm->optimizer_params() : model.params();
  AdamW optimizer(config.optimizer, trained, pm ? pm->decay_masks() : std::vector<at::Tensor>{});
  TrainTarget target{model, optimizer, pm.get(), env.distributed() ? &world : nullptr,
                     {{"world_size", env.world},
                      {"data_parallel_replicate", mesh.degree(parallel::Axis::kReplicate)},
                      {"data_parallel_shard", mesh.degree(parallel::Axis::kShard)},
                      {"tensor_parallel", tp_degree},
                      {"pipeline_parallel", pp_degree},
                      {"sharding", pm ? "rank-pieces" : "none"}}};
  auto loss_of = [&](const at::Tensor& x, const at::Tensor& y) {
    if (!pm) return model.Loss(x, y, device.compute_dtype);
    auto l = pm->EvalLoss(x, y);
    if (!l.ok()) log::Error("evaluation: {}", l.status().ToString());
    return at::full({}, l.ok() ? *l : std::nan(""), at::kFloat);
  };
  log::Info("model: {} with {} parameters, {} training FLOP/token at seq_len {}; device {} ({})",
            spec.name, FormatParams(static_cast<double>(counts.total)),
            FormatCount(flops.total()), t.seq_len, device.name,
            device.compute_dtype == at::kBFloat16 ? "bf16 compute, fp32 master weights" : "fp32");

  int64_t local_numel = 0;
  for (const auto& p : trained) local_numel += p.tensor.numel();
  log::Info("parameters + gradients + optimizer state per rank: {} bytes",
            pm ? pm->ResidentStateBytes() : 4 * local_numel * static_cast<int64_t>(sizeof(float)));
  const std::string ckpt_dir = CheckpointFolder(config, summary.run_dir);
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(ckpt_dir));
  ckpt::CheckpointStore store(LocalFs(), ckpt_dir);
  // Saves (sync or async), the interval (fixed or "auto"), memory replicas and pruning.
  TrainCheckpointer::Setup cs;
  cs.options = config.checkpoint;
  cs.total_steps = t.steps;
  cs.folder = ckpt_dir;
  if (config.checkpoint.memory_replicas && env.distributed()) {
    cs.replica_root = "/dev/shm/tenax-" + config.job.name;
  }
  cs.rank = env.rank;
  cs.world_size = env.world;
  const char* attempt = std::getenv("TENAX_RESTART_COUNT");
  cs.attempt = attempt != nullptr ? attempt : "0";
  cs.observed = ReadObservedFailuresFromEnv();
  TrainCheckpointer checkpointer(cs, store, env.distributed() ? &world : nullptr);
  // With memory replicas the newest checkpoint comes out of RAM when every rank has copies of
  // every file; otherwise storage, repaired from the copies where they can.
  std::optional<TrainProgress> from_memory;
  if (config.checkpoint.enable && config.checkpoint.resume == "latest" &&
      !cs.replica_root.empty()) {
    TENAX_ASSIGN_OR_RETURN(from_memory, checkpointer.RestoreFromMemory(target));
  }
  TrainProgress progress;
  if (from_memory) {
    progress = std::move(*from_memory);
  } else {
    if (config.checkpoint.enable) checkpointer.RepairFromReplicas();
    TENAX_ASSIGN_OR_RETURN(progress, Resume(config, store, target));
  }
  if (env.distributed()) world.Barrier();  // every rank has read before anyone moves folders
  int set_aside = 0;  // checkpoints skipped by the resume (reported to the launcher)
  if (config.checkpoint.enable && lead) {
    // Checkpoints newer than where training restarts (damaged ones that resume skipped, or a
    // deliberate resume from an older path) would collide with the steps about to be saved.
    TENAX_ASSIGN_OR_RETURN(std::vector<std::string> moved, store.SetAsideNewerThan(progress.step));
    set_aside = static_cast<int>(moved.size());
    for (const auto& m : moved) {
      log::Warn("moved {} aside: training restarts at step {}", m, progress.step);
    }
  }

  TENAX_RETURN_IF_ERROR(checkpointer.Start(progress.step));
  if (env.distributed()) world.Barrier();
  // Each data-parallel rank reads its own block of every global batch (data/loader.h).
  TENAX_ASSIGN_OR_RETURN(data::BatchLoader loader,
                         data::BatchLoader::Create(data.train, t.seq_len, t.local_batch_size,
                                                   config.job.seed, mesh.dp_index(env.rank),
                                                   mesh.dp()));
  loader.Seek(progress.data_position);
  // Validation windows split over data-parallel ranks; the ranks of a TP group evaluate the
  // same windows together (their collectives must see the same batch).
  TENAX_ASSIGN_OR_RETURN(data::EvalLoader val_loader,
                         data::EvalLoader::Create(data.val, t.seq_len, t.local_batch_size,
                                                  config.metrics.eval_tokens,
                                                  mesh.dp_index(env.rank), mesh.dp()));
  std::unique_ptr<Reporter> reporter;
  if (lead) {
    TENAX_ASSIGN_OR_RETURN(reporter,
                           Reporter::Open(summary.run_dir, config.metrics, progress.step));
    summary.metrics_path = reporter->metrics_path();
    summary.tensorboard_dir = reporter->tensorboard_dir();
  }
  if (progress.step >= t.steps) {
    return InvalidArgument(fmt::format(
        "the checkpoint is at step {} and training.steps = {}: nothing to do; raise "
        "training.steps to train further",
        progress.step, t.steps));
  }

  const int64_t tokens_per_step =
      t.local_batch_size * t.seq_len * t.grad_accum_steps * mesh.dp();  // global
  const int64_t last_step = t.stop_at > 0 ? std::min(t.stop_at, t.steps) : t.steps;
  if (progress.step >= last_step) {
    return InvalidArgument(fmt::format(
        "the checkpoint is at step {} and training.stop_at = {}: nothing to do; raise "
        "training.stop_at (or set it to 0) to train further",
        progress.step, t.stop_at));
  }
  summary.first_step = progress.step + 1;
  log::Info("training steps {}..{} of {}: {} sequences x {} tokens x {} accumulation = {} "
            "tokens/step",
            summary.first_step, last_step, t.steps, t.local_batch_size, t.seq_len, t.grad_accum_steps,
            tokens_per_step);
  log::Info("setup took {:.2f}s", Seconds(Clock::now() - t_start));

  // Loss spikes (training.loss_spike_factor): the window continues from the checkpoint; the
  // steps that already made a run roll back ("restart") are skipped if they spike again.
  LossSpikeDetector spikes(t.loss_spike_factor, t.loss_spike_window);
  spikes.Restore(progress.loss_history);
  std::set<int64_t> rolled_back;
  if (spikes.enabled()) {
    TENAX_ASSIGN_OR_RETURN(std::vector<LossSpikeRecord> seen, ReadLossSpikes(summary.run_dir));
    for (const auto& r : seen) {
      if (r.action == "restart") rolled_back.insert(r.step);
    }
  }
  const int generation = static_cast<int>(cs.observed.restarts);  // TENAX_RESTART_COUNT

  HeartbeatWriter beats(env.rank);  // progress, timings and phase for `tenax launch`
  beats.Ready(progress.step, set_aside, summary.run_dir);  // set up: the launcher's clock for this rank starts
  double train_seconds = 0;
  int64_t steps_timed = 0;
  parallel::CommStats step_comm;  // collectives issued inside training steps only
  const std::vector<const parallel::Communicator*> all_groups = {
      &world, shard_group.get(), replicate_group.get(), tp_group.get(), pp_group.get()};
  for (int64_t step = progress.step + 1; step <= last_step; ++step) {
    if (CrashDue(env.rank, step) && checkpointer.in_flight()) {
      // An injected crash is a crash, not one in a checkpoint: let a background save finish
      // first (its error, if any, stays for the next save).
      (void)checkpointer.Finish();
      beats.SetWritingCheckpoint(-1);
      beats.Refresh();
    }
    MaybeInjectFault(env.rank, step);  // tests of recovery (tenax launch --inject)
    const auto t0 = Clock::now();
    const parallel::CommStats comm0 = TotalStats(all_groups);
    const double lr = LearningRate(config.lr_scheduler, config.optimizer.lr, step, t.steps);
    double loss_sum = 0;
    if (flight) flight->SetPhase(step, "forward_backward");
    if (pm) pm->BeginStep();
    for (int64_t micro = 0; micro < t.grad_accum_steps; ++micro) {
      data::Batch b = loader.Next();
      const at::Tensor x = BatchTensor(b.inputs, b.batch, b.seq_len, device.device);
      const at::Tensor y = BatchTensor(b.targets, b.batch, b.seq_len, device.device);
      if (pm) {
        TENAX_ASSIGN_OR_RETURN(double l,
                               pm->ForwardBackward(x, y, static_cast<int>(t.grad_accum_steps)));
        loss_sum += l;
        continue;
      }
      at::Tensor l = model.Loss(x, y, device.compute_dtype);
      // Each micro-batch holds the same number of tokens, so the mean of means is the mean.
      (l / static_cast<double>(t.grad_accum_steps)).backward();
      loss_sum += l.item<double>();
    }
    // --inject slow / hang: before the gradient collectives, with this step's compute so far.
    BeforeGradientReduce(env.rank, step,
                         Seconds(Clock::now() - t0) - (TotalStats(all_groups) - comm0).wait_s);
    double loss = loss_sum / static_cast<double>(t.grad_accum_steps);
    double grad_norm;
    if (flight) flight->SetPhase(step, "gradient_reduction");
    if (pm) {
      pm->FinishStep();  // every gradient reduction of the layout
      grad_norm = pm->ClipGradNorm(t.max_norm);
    } else {
      grad_norm = ClipGradNorm(model.params(), t.max_norm);
    }
    if (PoisonLoss(env.rank, step)) loss = std::nan("");  // --inject nan
    loss *= LossFactor(env.rank, step);                    // --inject spike
    if (env.distributed()) {  // the step's loss: mean over ranks (TP/PP ranks agree already)
      at::Tensor l = at::full({1}, loss, at::kDouble);
      world.AllReduceSum(l);
      loss = l.item<double>() / env.world;
    }
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      if (reporter) reporter->Finish();
      beats.NonFinite(step);
      if (t.on_nonfinite == "restart") {
        return Unavailable(fmt::format(
            "step {}: loss = {}, gradient norm = {}; training.on_nonfinite = \"restart\": exiting "
            "so that the launcher restarts from the last good checkpoint",
            step, loss, grad_norm));
      }
      return Numerical(fmt::format(
          "step {}: loss = {}, gradient norm = {}; training diverged. Lower optimizer.lr (now "
          "{}), raise lr_scheduler.warmup_steps or lower training.max_norm, then resume from the "
          "last good checkpoint in {}",
          step, loss, grad_norm, config.optimizer.lr, ckpt_dir));
    }
    bool apply = true;
    if (const std::optional<double> median = spikes.Check(loss)) {
      std::string action = t.on_loss_spike;
      // Back at a step that already made the run roll back: the spike is the data's, not a
      // transient fault's, so this time the step is skipped.
      if (action == "restart" && rolled_back.count(step) > 0) action = "skip";
      if (lead) {  // every rank decides the same (the loss is the mean over ranks); one says it
        log::Warn("step {}: loss spike: {:.4g} is {:.1f}x the median {:.4g} of the last {} steps "
                  "(training.loss_spike_factor = {}); {}",
                  step, loss, loss / *median, *median, spikes.history().size(),
                  t.loss_spike_factor,
                  action == "warn"      ? "applying the update anyway (on_loss_spike = \"warn\")"
                  : action == "skip"    ? "skipping this step's update"
                  : action == "restart" ? "rolling back to the newest checkpoint"
                                        : "stopping (on_loss_spike = \"stop\")");
        TENAX_RETURN_IF_ERROR(
            AppendLossSpike(summary.run_dir, {step, loss, *median, action, generation}));
      }
      if (env.distributed()) world.Barrier();  // the record is written before anyone exits
      if (action == "restart" || action == "stop") {
        if (reporter) reporter->Finish();
        beats.LossSpike(step);
        if (action == "restart") {
          return Unavailable(fmt::format(
              "step {}: loss spike ({:.4g} against a median of {:.4g}); "
              "training.on_loss_spike = \"restart\": exiting so that the launcher restarts from "
              "the newest checkpoint (if the step spikes again, its update is skipped)",
              step, loss, *median));
        }
        return Numerical(fmt::format(
            "step {}: loss spike ({:.4g} against a median of {:.4g}); training.on_loss_spike = "
            "\"stop\". Resume from the last good checkpoint in {} with a lower optimizer.lr, or "
            "set on_loss_spike = \"skip\" to drop such steps",
            step, loss, *median, ckpt_dir));
      }
      apply = action != "skip";
    } else {
      spikes.Add(loss);
    }
    if (apply) optimizer.Step(lr);
    if (pm) pm->ZeroGrad();
    for (auto& p : trained) p.tensor.mutable_grad() = at::Tensor();
    progress.step = step;
    progress.data_position = loader.position();
    progress.tokens_seen += tokens_per_step;
    progress.loss_history.assign(spikes.history().begin(), spikes.history().end());

    const double dt = Seconds(Clock::now() - t0);
    const parallel::CommStats step_delta = TotalStats(all_groups) - comm0;
    step_comm += step_delta;
    train_seconds += dt;
    checkpointer.RecordStepTime(dt);
    ++steps_timed;
    beats.SetWritingCheckpoint(checkpointer.in_flight().value_or(-1));
    beats.StepDone(step, dt, dt - step_delta.wait_s, static_cast<double>(tokens_per_step) / dt);
    summary.final_loss = loss;
    StepMetrics m;
    m.step = step;
    m.total_steps = t.steps;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_time_s = dt;
    m.tokens_per_s = static_cast<double>(tokens_per_step) / dt;
    m.flops_per_s = m.tokens_per_s * flops.total();
    if (device.peak_flops) m.mfu = m.flops_per_s / *device.peak_flops;
    m.mem_peak_bytes = PeakMemoryBytes(device);
    m.tokens_seen = progress.tokens_seen;
    m.eta_s = train_seconds / static_cast<double>(steps_timed) *
              static_cast<double>(last_step - step);
    const bool last = step == last_step;
    if (reporter && (step % config.metrics.log_interval == 0 || last)) {
      TENAX_RETURN_IF_ERROR(reporter->LogStep(m));
    }
    if ((config.metrics.eval_interval > 0 && step % config.metrics.eval_interval == 0) || last) {
      if (flight) flight->SetPhase(step, "eval");
      EvalResult ev =
          DistributedEval(loss_of, val_loader, device.device, world, env.world / mesh.dp());
      if (pm) pm->EndEval();
      summary.final_val_loss = ev.loss;
      if (reporter) TENAX_RETURN_IF_ERROR(reporter->LogEval(step, ev.loss, ev.tokens));
    }
    if (checkpointer.Due(step, last)) {
      const auto c0 = Clock::now();
      beats.CheckpointBegin(step);
      if (flight) flight->SetPhase(step, "checkpoint");
      Result<std::vector<std::string>> lines =
          checkpointer.Save(progress, target, config_toml, Seconds(Clock::now() - t_start));
      if (!lines.ok()) {
        // Said before the teardown, which makes the peers fail too: the launcher blames this rank.
        beats.Exiting(static_cast<int>(lines.status().code()));
        return lines.status();
      }
      for (const auto& l : *lines) {
        if (reporter) reporter->Message(l);
      }
      beats.SetWritingCheckpoint(checkpointer.in_flight().value_or(-1));
      beats.CheckpointDone(step, Seconds(Clock::now() - c0));  // the blocking part
    }
  }
  {
    // An asynchronous save still in flight must be committed before the run counts as done (and
    // the error of one that failed surfaces here, in the checkpoint phase).
    const bool async = config.checkpoint.enable && config.checkpoint.async;
    const auto c0 = Clock::now();
    if (async) beats.CheckpointBegin(progress.step);
    Result<std::vector<std::string>> lines = checkpointer.Finish();
    if (!lines.ok()) {
      beats.Exiting(static_cast<int>(lines.status().code()));
      return lines.status();
    }
    beats.SetWritingCheckpoint(-1);
    if (async) beats.CheckpointDone(progress.step, Seconds(Clock::now() - c0));
    for (const auto& l : *lines) {
      if (reporter) reporter->Message(l);
    }
  }
  checkpointer.DropReplicas();  // the run is complete: storage holds its checkpoints
  if (checkpointer.last_committed()) summary.checkpoint_dir = store.StepDir(*checkpointer.last_committed());
  if (reporter) reporter->Finish();
  if (env.distributed() && steps_timed > 0) {
    const double n = static_cast<double>(steps_timed);
    log::Info("communication per step on this rank: all-reduce {:.0f} B, all-gather {:.0f} B "
              "received, reduce-scatter {:.0f} B sent, p2p {:.0f} B; {:.4f} s/step",
              step_comm.all_reduce_bytes / n, step_comm.all_gather_bytes / n,
              step_comm.reduce_scatter_bytes / n, step_comm.p2p_bytes / n, train_seconds / n);
  }
  summary.last_step = last_step;
  if (last_step < t.steps) {
    log::Info("stopped at step {} of {} (training.stop_at); run again to continue", last_step,
              t.steps);
  }
  const double tokens_run = static_cast<double>(tokens_per_step * steps_timed);
  summary.tokens_per_s = train_seconds > 0 ? tokens_run / train_seconds : 0;
  summary.flops_per_s = summary.tokens_per_s * flops.total();
  if (device.peak_flops) summary.mfu = summary.flops_per_s / *device.peak_flops;
  return summary;
}

}  // namespace tenax::train
