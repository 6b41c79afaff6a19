// Trainer::Setup and its parts, in the order Setup runs them: data, the run folder, the layout
// and its process groups, the model and optimizer, checkpoints and the resume (with what changed
// since the checkpoint), and the loaders at the resumed position (trainer_internal.h).
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <filesystem>
#include <tuple>

#include "tenax/core/crc32.h"
#include "tenax/model/fused_cross_entropy.h"
#include "tenax/train/trainer_internal.h"

namespace tenax::train::trainer_internal {
namespace {

// Decides where training starts: fresh, the newest good checkpoint, or a given path.
Result<TrainProgress> Resume(const CheckpointOptions& c, ckpt::CheckpointStore& store,
                             TrainTarget& target) {
  if (c.resume == "none") {
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
  if (c.resume == "latest") {
    auto latest = store.LatestGood();
    if (!latest.ok()) {
      if (latest.status().code() == StatusCode::kNotFound) return TrainProgress{};
      return latest.status();
    }
    log::Info("resuming from {}", store.StepDir(*latest));
    return RestoreTrainCheckpoint(store, *latest, target);
  }
  TENAX_ASSIGN_OR_RETURN(auto where, ckpt::ResolveCheckpointPath(LocalFs(), c.resume));
  ckpt::CheckpointStore other(LocalFs(), where.first);
  log::Info("resuming from {}", other.StepDir(where.second));
  return RestoreTrainCheckpoint(other, where.second, target);
}

}  // namespace

Status Trainer::Setup() {
  // The device first: on GPUs it becomes the current one (cuda:LOCAL_RANK) before anything,
  // seeding included, touches CUDA.
  TENAX_ASSIGN_OR_RETURN(device_, ResolveDevice(t_, env_.local_rank));
  at::manual_seed(config_.job.seed);
  {  // Threads follow the device and precision (device.h: ChooseThreads), said once at start.
    const CpuFacts cpu = ReadCpuFacts();
    const ThreadChoice threads = ChooseThreads(device_, t_.threads, cpu, env_.local_world);
    ApplyThreads(threads);
    log::Info("{}", DescribeCompute(device_, threads, cpu));
  }
  if (!device_.device.is_cuda()) log::Info("memory: {}", SetUpCpuAllocator().reason);
  model::EnableGpuWideGemms(t_.fused_kernels);
  if (device_.device.is_cuda() && !t_.fused_kernels) {
    log::Info("training.fused_kernels = false: the plain libtorch composition throughout");
  }
  // Each part's seconds, said by a live replacement (its start-up is what the others train
  // short-handed through).
  std::vector<std::string> parts;
  Clock::time_point mark = Clock::now();
  auto timed = [&](const char* what) {
    const Clock::time_point now = Clock::now();
    parts.push_back(fmt::format("{} {:.2f}s", what, Seconds(now - mark)));
    mark = now;
  };
  parts.push_back(fmt::format("compute {:.2f}s", Seconds(mark - t_start_)));
  TENAX_RETURN_IF_ERROR(SetupData());
  timed("data");
  TENAX_RETURN_IF_ERROR(SetupRunFolder());
  TENAX_ASSIGN_OR_RETURN(faults_, protocol::FaultInjector::Create(ctx_, env_.rank, &reporter_));
  // --inject crash:...:step=0, before this rank joins its groups (the others wait for it there);
  // a live replacement's setup is not the one it names.
  if (faults_ && !ctx_.live_join) faults_->OnSetup();
  TENAX_RETURN_IF_ERROR(SetupGroups());
  timed("groups");
  TENAX_RETURN_IF_ERROR(SetupModel());
  timed("model");
  TENAX_RETURN_IF_ERROR(SetupCheckpoints());
  TENAX_RETURN_IF_ERROR(SetupLoaders());
  timed("checkpoints and loaders");
  failure_kind_ = FailureKind::kCrash;
  if (ctx_.live_join) {
    log::Info("live replacement: set up in {:.2f}s ({}); ready to join",
              Seconds(Clock::now() - t_start_), fmt::join(parts, ", "));
  }
  return Status::Ok();
}

Status Trainer::SetupData() {
  if (prepared_ && prepared_->config_toml == ConfigToToml(config_)) {
    data_ = std::move(prepared_->data);
    log::Info("data: opened while this process waited as a standby");
  } else {
    TENAX_ASSIGN_OR_RETURN(data_, data::OpenDataSource(config_.data));
  }
  prepared_.reset();
  log::Info("data: {}", data_.description);
  if (data_.entropy_rate_nats) {
    log::Info("data: exact entropy rate {:.4f} nats/token (the best achievable loss)",
              *data_.entropy_rate_nats);
  }
  TENAX_ASSIGN_OR_RETURN(spec_, ResolveModelSpec(config_.model, data_.vocab_size));
  if (t_.seq_len > spec_.max_seq_len) {
    return InvalidArgument(fmt::format(
        "training.seq_len ({}) exceeds the model's max_seq_len ({}); lower training.seq_len or "
        "raise model.max_seq_len",
        t_.seq_len, spec_.max_seq_len));
  }
  TENAX_RETURN_IF_ERROR(CheckFp8Shapes(device_, spec_, t_.seq_len,
                                       config_.parallelism.tensor_parallel,
                                       config_.parallelism.context_parallel));
  TENAX_ASSIGN_OR_RETURN(mesh_, parallel::Mesh::Create(config_.parallelism, env_.world, spec_, t_));
  TENAX_ASSIGN_OR_RETURN(batch_, ResolveBatch(t_, mesh_->dp()));
  flops_ = TrainingFlopsPerToken(spec_, t_.seq_len);
  summary_.model_name = spec_.name;
  summary_.n_params = CountParams(spec_).total;
  summary_.entropy_rate_nats = data_.entropy_rate_nats;
  return Status::Ok();
}

Status Trainer::SetupRunFolder() {
  run_dir_ = RunPathsOf(config_).root();
  summary_.run_dir = run_dir_;
  // One owner per run folder: a launcher passes its lock on (and holds it across restarts);
  // otherwise rank 0 takes it before writing anything.
  if (ctx_.run_lock_fd >= 0) {
    TENAX_RETURN_IF_ERROR(RunLock::VerifyInherited(ctx_.run_lock_fd, run_dir_));
  } else if (env_.rank == 0 && ctx_.agent_socket.empty()) {
    // (On several nodes the job id in etcd owns the run and commits are fenced by generation;
    // a stopped rank of an old generation may still hold a lock on shared storage.)
    TENAX_ASSIGN_OR_RETURN(run_lock_, RunLock::Acquire(run_dir_, "tenax train"));
  } else {
    TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(run_dir_));
  }
  config_toml_ = ConfigToToml(config_);
  if (env_.rank == 0) {
    TENAX_RETURN_IF_ERROR(LocalFs().WriteFileAtomic(RunPathsOf(config_).config(), config_toml_));
  }
  return Status::Ok();
}

Status Trainer::SetupGroups() {
  const parallel::Mesh& mesh = *mesh_;
  // The world, then this rank's group along each axis (size-1 groups are local no-ops).
  parallel::GroupOptions go;
  TENAX_ASSIGN_OR_RETURN(go.backend,
                         parallel::ResolveBackend(config_.parallelism.backend, device_.device));
  go.device = go.backend == parallel::Backend::kNccl ? device_.device : at::Device(at::kCPU);
  go.timeout = std::chrono::seconds(120);
  // c10d's NCCL watchdog after tenax's own (parallelism.collective_timeout_s), which names the
  // collective and the rank waited for; with tenax's off, c10d's default half hour.
  go.nccl_timeout = std::chrono::milliseconds(
      config_.parallelism.collective_timeout_s > 0
          ? static_cast<int64_t>((config_.parallelism.collective_timeout_s + 60) * 1000)
          : int64_t{30} * 60 * 1000);
  TENAX_RETURN_IF_ERROR(CheckSdcLayout(go));
  if (config_.resilience.mode == "live" && env_.distributed()) {
    TENAX_RETURN_IF_ERROR(CheckLiveLayout(go));
    TENAX_RETURN_IF_ERROR(SetupLiveWorld(go));
  } else {
    TENAX_ASSIGN_OR_RETURN(groups_, parallel::ProcessGroups::Connect(env_, go));
  }
  auto group = [&](const char* name, parallel::Axis axis,
                   std::unique_ptr<parallel::Communicator>* out) -> Status {
    TENAX_ASSIGN_OR_RETURN(*out, groups_->NewGroup(name, mesh.GroupOf(env_.rank, axis)));
    return Status::Ok();
  };
  // FSDP's shard group spans the context axis too (mesh.h); without context parallelism it is
  // the shard axis's group.
  TENAX_ASSIGN_OR_RETURN(shard_group_, groups_->NewGroup("dp_shard", mesh.ShardGroupOf(env_.rank)));
  TENAX_RETURN_IF_ERROR(group("dp_replicate", parallel::Axis::kReplicate, &replicate_group_));
  TENAX_RETURN_IF_ERROR(group("tp", parallel::Axis::kTensor, &tp_group_));
  TENAX_RETURN_IF_ERROR(group("pp", parallel::Axis::kPipeline, &pp_group_));
  TENAX_RETURN_IF_ERROR(group("cp", parallel::Axis::kContext, &cp_group_));
  if (mesh.ep() > 1) {  // expert parallelism within dp_shard (parallel/mesh.h)
    TENAX_ASSIGN_OR_RETURN(ep_group_, groups_->NewGroup("ep", mesh.ExpertGroupOf(env_.rank)));
    TENAX_ASSIGN_OR_RETURN(ep_shard_group_,
                           groups_->NewGroup("ep_shard", mesh.ExpertShardGroupOf(env_.rank)));
  }
  all_groups_ = {&groups_->world(), shard_group_.get(),   replicate_group_.get(),
                 tp_group_.get(),   pp_group_.get(),      cp_group_.get(),
                 ep_group_.get(),   ep_shard_group_.get()};
  if (!env_.distributed()) return Status::Ok();
  // Named after what started it: the environment variables alone look like torchrun's.
  log::Info("rank {} of {} (started by {}), layout {}, {} on {}", env_.rank, env_.world,
            ctx_.supervised ? "tenax launch" : env_.source, mesh.Describe(),
            parallel::BackendName(go.backend), go.device.str());
  // Flight recorder: this rank's last collectives in every group, dumped when the launcher
  // signals a hang (SIGUSR1) or when one runs past parallelism.collective_timeout_s
  // (docs/flight_recorder.md), into the launcher's heartbeat folder if there is one.
  flight_ = std::make_unique<protocol::FlightRecorder>(env_.rank);
  const std::string dump_dir =
      ctx_.heartbeat_dir.empty() ? RunPathsOf(config_).flight() : ctx_.heartbeat_dir;
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(dump_dir));
  protocol::WatchdogOptions wo;
  wo.dump_path = protocol::FlightRecordPath(dump_dir, env_.rank);
  wo.collective_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(config_.parallelism.collective_timeout_s * 1000));
  // This rank waited for a collective that another rank never joined: it reports itself as
  // secondary (the flight records name the rank it waited for), then exits as the watchdog
  // does by default (other threads are stuck inside the collective).
  wo.on_timeout = [this, path = wo.dump_path](const protocol::CollectiveRecord& c) {
    const std::string what = fmt::format(
        "collective timeout: {} on group {} (seq {}, issued in step {} {}) did not complete "
        "within parallelism.collective_timeout_s = {} s; flight record in {}",
        c.op, c.group, c.seq, c.step, c.phase, config_.parallelism.collective_timeout_s, path);
    log::Error("{}", what);
    reporter_.Report(protocol::ToInt(protocol::ExitCode::kCollectiveTimeout), FailureKind::kHang,
                     what, /*secondary=*/true);
    // NCCL: the stuck kernels end and the peers' collectives fail at once instead of at their
    // own timeouts (Gloo: nothing to abort).
    groups_->AbortAll();
    std::_Exit(protocol::ToInt(protocol::ExitCode::kCollectiveTimeout));
  };
  watchdog_ = std::make_unique<protocol::FlightRecorderWatchdog>(*flight_, LocalFs(), wo);
  const std::tuple<parallel::Communicator*, const char*, std::vector<int>> recorded[] = {
      {shard_group_.get(), "dp_shard", mesh.ShardGroupOf(env_.rank)},
      {replicate_group_.get(), "dp_replicate", mesh.GroupOf(env_.rank, parallel::Axis::kReplicate)},
      {tp_group_.get(), "tp", mesh.GroupOf(env_.rank, parallel::Axis::kTensor)},
      {pp_group_.get(), "pp", mesh.GroupOf(env_.rank, parallel::Axis::kPipeline)},
      {cp_group_.get(), "cp", mesh.GroupOf(env_.rank, parallel::Axis::kContext)}};
  groups_->world().SetFlightRecorder(flight_.get(), "world");
  for (const auto& [comm, name, ranks] : recorded) {
    comm->SetFlightRecorder(flight_.get(), name);
    flight_->RegisterGroup(name, ranks);
  }
  if (ep_group_) {
    ep_group_->SetFlightRecorder(flight_.get(), "ep");
    flight_->RegisterGroup("ep", mesh.ExpertGroupOf(env_.rank));
    ep_shard_group_->SetFlightRecorder(flight_.get(), "ep_shard");
    flight_->RegisterGroup("ep_shard", mesh.ExpertShardGroupOf(env_.rank));
  }
  return Status::Ok();
}

Status Trainer::SetupModel() {
  // Same seed on every rank: identical initial weights, no broadcast needed. A live replacement
  // draws none: its weights come from a live rank (LiveJoin), and its start-up is time the
  // others train short-handed.
  model_ = std::make_unique<model::Llama>(
      spec_, config_.job.seed, device_.device,
      ctx_.live_join ? model::Llama::Init::kOverwritten : model::Llama::Init::kRandom);
  model_->SetActivationCheckpoint(config_.parallelism.activation_checkpoint);
  const parallel::Mesh& mesh = *mesh_;
  if (env_.distributed()) {
    // This rank's part of the model under the layout (train/parallel_model.h); the full model
    // then only serves as the shape reference (its tensors are released).
    ParallelGroups pg{&groups_->world(), replicate_group_.get(), shard_group_.get(),
                      pp_group_.get(),   tp_group_.get(),        cp_group_.get(),
                      ep_group_.get(),   ep_shard_group_.get()};
    TENAX_ASSIGN_OR_RETURN(parallel_model_,
                           ParallelModel::Create(spec_, model_->params(), pg, config_.parallelism,
                                                 device_.device, device_.compute_dtype, live(),
                                                 config_.resilience.sdc_check_interval > 0));
    model_->ReleaseParams();
    if (device_.fp8_matmuls) parallel_model_->SetBlockMatmul(model::BlockMatmul::kFp8);
    step_model_ = parallel_model_.get();
  } else {
    if (device_.fp8_matmuls) model_->SetBlockMatmul(model::BlockMatmul::kFp8);
    single_model_ = std::make_unique<SingleProcessModel>(*model_, device_.compute_dtype);
    step_model_ = single_model_.get();
  }
  optimizer_ = std::make_unique<AdamW>(config_.optimizer, step_model_->optimizer_params(),
                                       step_model_->decay_masks());
  // AdamW::UpdateMode::kFused (PyTorch's fused kernel) is not chosen here yet: it waits for its
  // GPU test (Gpu.FusedAdamWMatchesTheFlatUpdate) and a measurement on a lent GPU.
  target_ = std::unique_ptr<TrainTarget>(
      new TrainTarget{*model_,
                      *optimizer_,
                      parallel_model_.get(),
                      env_.distributed() ? &groups_->world() : nullptr,
                      {{"world_size", env_.world},
                       {"data_parallel_replicate", mesh.degree(parallel::Axis::kReplicate)},
                       {"data_parallel_shard", mesh.degree(parallel::Axis::kShard)},
                       {"tensor_parallel", mesh.degree(parallel::Axis::kTensor)},
                       {"pipeline_parallel", mesh.degree(parallel::Axis::kPipeline)},
                       {"context_parallel", mesh.degree(parallel::Axis::kContext)},
                       {"expert_parallel", mesh.ep()},
                       {"sharding", parallel_model_ ? "rank-pieces" : "none"}},
                      /*tokenizer=*/std::nullopt,
                      /*moe=*/nullptr});
  if (!data_.tokenizer.empty()) {  // for export-hf and generate (train_checkpoint.h)
    auto id = [](std::optional<uint32_t> v) {
      return v ? std::optional<int64_t>(*v) : std::optional<int64_t>();
    };
    target_->tokenizer =
        TokenizerRecord{data::AbsoluteTokenizerSpec(data_.tokenizer), id(data_.bos), id(data_.eos)};
  }
  target_->moe = step_model_->moe_state();  // the sigmoid router's biases travel with it
  log::Info("model: {} with {} parameters{}, {} training FLOP/token at seq_len {}; device {} ({})",
            spec_.name, FormatParams(static_cast<double>(summary_.n_params)),
            spec_.moe.enabled()
                ? fmt::format(" ({} active: {} of {} experts per token)",
                              FormatParams(static_cast<double>(CountParams(spec_).active)),
                              spec_.moe.top_k, spec_.moe.n_experts)
                : "",
            FormatCount(flops_.total()), t_.seq_len, device_.name,
            device_.fp8_matmuls ? "bf16 compute, float8 block matmuls, fp32 master weights"
            : device_.compute_dtype == at::kBFloat16 ? "bf16 compute, fp32 master weights"
                                                     : "fp32");
  log::Info("parameters + gradients + optimizer state per rank: {} ({} bytes)",
            FormatGiB(static_cast<double>(step_model_->ResidentStateBytes())),
            step_model_->ResidentStateBytes());
  if (parallel_model_ && (config_.resilience.sdc_check_interval > 0 || faults_)) {
    // Checks, or a fault to play; with a tolerance the monitor also keeps the statistics.
    sdc_ = std::make_unique<SdcMonitor>(faults_.get(), config_.resilience.sdc_tolerance > 0);
    parallel_model_->SetComputeObserver(sdc_.get());
  }
  return Status::Ok();
}

Status Trainer::SetupCheckpoints() {
  parallel::Communicator& world = groups_->world();
  ckpt_dir_ = RunPathsOf(config_).checkpoints();
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(ckpt_dir_));
  store_ = std::make_unique<ckpt::CheckpointStore>(LocalFs(), ckpt_dir_);
  // Saves (sync or async), the interval (fixed or "auto"), memory replicas and pruning.
  TrainCheckpointer::Setup cs;
  cs.options = config_.checkpoint;
  cs.total_steps = t_.steps;
  cs.folder = ckpt_dir_;
  if (config_.checkpoint.memory_replicas && env_.distributed() && !live()) {
    // Started by tenax launch: the launcher's RAM folder, which lives as long as it does. Else
    // (torchrun, srun) one per run, kept: the job's name for whoever looks at /dev/shm, and the
    // CRC-32 of the checkpoint folder's absolute path so two runs of one job name on a host (two
    // users, two CI checkouts) never share one, while a restart of the same run finds its own.
    cs.replica_root =
        !ctx_.ram_folder.empty()
            ? ctx_.ram_folder
            : fmt::format("/dev/shm/tenax-{}-{:08x}", config_.job.name,
                          Crc32(std::filesystem::absolute(ckpt_dir_).lexically_normal().string()));
  }
  cs.rank = env_.rank;
  cs.world_size = env_.world;
  // Unique per launch and generation: an async marker of an earlier launch never matches.
  cs.attempt =
      ctx_.supervised ? fmt::format("{:.0f}.{}", ctx_.launch_time_unix, ctx_.generation) : "0";
  cs.observed = ObservedFailures{ctx_.generation, ctx_.run_elapsed_s};
  cs.faults = faults_.get();
  if (!ctx_.agent_socket.empty()) {
    // Several nodes: rank 0 commits only with its node agent's consent (the generation must still
    // be current: a rank of a fenced or replaced node never commits).
    if (config_.checkpoint.async) {
      return InvalidArgument(
          "checkpoint.async = true is not supported across several nodes yet (each node's ranks "
          "commit through their node agent); set checkpoint.async = false");
    }
    cs.fence = [socket = ctx_.agent_socket, gen = ctx_.generation](int64_t step,
                                                                   const nlohmann::json& manifest) {
      return protocol::RequestCommit(socket, gen, step, manifest, /*timeout_s=*/60);
    };
  }
  checkpointer_ =
      std::make_unique<TrainCheckpointer>(cs, *store_, env_.distributed() ? &world : nullptr);
  // A replacement joining a live job takes its state from a live rank (LiveJoin), not from a
  // checkpoint, and takes part in none of the resume's collectives.
  if (ctx_.live_join) return Status::Ok();

  // With memory replicas the newest checkpoint comes out of RAM when every rank has copies of
  // every file; otherwise storage, repaired from the copies where they can.
  const bool resume_latest = config_.checkpoint.enable && config_.checkpoint.resume == "latest";
  std::optional<TrainProgress> from_memory;
  if (resume_latest && !cs.replica_root.empty()) {
    TENAX_ASSIGN_OR_RETURN(from_memory, checkpointer_->RestoreFromMemory(*target_));
  }
  if (from_memory) {
    progress_ = std::move(*from_memory);
  } else {
    if (config_.checkpoint.enable) checkpointer_->RepairFromReplicas();
    TENAX_ASSIGN_OR_RETURN(progress_, Resume(config_.checkpoint, *store_, *target_));
  }
  world.Barrier();  // every rank has read before anyone moves folders
  if (config_.checkpoint.enable && env_.rank == 0) {
    // Checkpoints newer than where training restarts (damaged ones that resume skipped, or a
    // deliberate resume from an older path) would collide with the steps about to be saved.
    TENAX_ASSIGN_OR_RETURN(std::vector<std::string> moved,
                           store_->SetAsideNewerThan(progress_.step));
    set_aside_ = static_cast<int>(moved.size());
    for (const auto& m : moved) {
      log::Warn("moved {} aside: training restarts at step {}", m, progress_.step);
    }
  }
  TENAX_RETURN_IF_ERROR(ReconcileResume());
  TENAX_RETURN_IF_ERROR(checkpointer_->Start(progress_.step));
  world.Barrier();
  return Status::Ok();
}

// A resumed run keeps the checkpoint's global batch unless told otherwise (config/batch.h), and
// says which trajectory settings it changes (config/resume_changes.h). Every rank restored the same
// checkpoint, so every rank decides the same; rank 0 speaks.
Status Trainer::ReconcileResume() {
  // A finished run launched again (maybe on another number of ranks) trains nothing: Run() says
  // it is already complete and exits 0, whatever batch this layout could or could not keep.
  const int64_t end = t_.stop_at > 0 ? std::min(t_.stop_at, t_.steps) : t_.steps;
  if (progress_.step >= end) return Status::Ok();
  std::vector<std::string> notes;
  if (progress_.step > 0) {
    TENAX_ASSIGN_OR_RETURN(batch_, ResolveResumedBatch(t_, mesh_->dp(), progress_.batch, &notes));
  }
  progress_.batch = batch_;
  if (env_.rank != 0) return Status::Ok();
  for (const auto& n : notes) log::Warn("resume: {}", n);
  if (progress_.saved_config.empty()) return Status::Ok();
  Result<std::vector<std::string>> changes = TrajectoryChanges(progress_.saved_config, config_);
  if (!changes.ok()) {
    log::Warn("resume: cannot compare with the checkpoint's config: {}",
              changes.status().message());
    return Status::Ok();
  }
  for (const auto& c : *changes) {
    log::Warn("resume: deliberate change since the checkpoint at step {}: {}", progress_.step, c);
  }
  return Status::Ok();
}

Status Trainer::SetupLoaders() {
  const parallel::Mesh& mesh = *mesh_;
  // Each data-parallel rank reads its own block of every global batch (data/loader.h).
  TENAX_ASSIGN_OR_RETURN(
      loader_, data::BatchLoader::Create(data_.train, t_.seq_len, t_.local_batch_size,
                                         config_.job.seed, mesh.dp_index(env_.rank), mesh.dp()));
  loader_->Seek(progress_.data_position);
  // Validation windows split over data-parallel ranks; the ranks of a TP group evaluate the
  // same windows together (their collectives must see the same batch).
  const int own = mesh.dp_index(env_.rank);
  TENAX_ASSIGN_OR_RETURN(data::EvalLoader val,
                         data::EvalLoader::Create(data_.val, t_.seq_len, t_.local_batch_size,
                                                  config_.metrics.eval_tokens, own, mesh.dp()));
  val_loaders_.emplace(own, std::move(val));
  if (env_.rank == 0 && !ctx_.live_join) {  // a replacement opens it once healed (LiveJoin)
    TENAX_ASSIGN_OR_RETURN(reporter_out_,
                           Reporter::Open(run_dir_, config_.metrics, progress_.step));
    summary_.metrics_path = reporter_out_->metrics_path();
    summary_.tensorboard_dir = reporter_out_->tensorboard_dir();
  }
  tokens_per_step_ = batch_.global * t_.seq_len;
  last_step_ = t_.stop_at > 0 ? std::min(t_.stop_at, t_.steps) : t_.steps;
  // Loss spikes (training.loss_spike_factor): the window continues from the checkpoint; the
  // steps that already made a run roll back ("restart") are skipped if they spike again.
  spikes_.emplace(t_.loss_spike_factor, t_.loss_spike_window);
  spikes_->Restore(progress_.loss_history);
  if (spikes_->enabled()) {
    TENAX_ASSIGN_OR_RETURN(std::vector<LossSpikeRecord> seen, ReadLossSpikes(run_dir_));
    for (const auto& r : seen) {
      if (r.action == "restart") rolled_back_.insert(r.step);
    }
  }
  // Set up: the launcher's clock for this rank's training starts with this beat.
  beats_ =
      std::make_unique<protocol::HeartbeatWriter>(ctx_.heartbeat_dir, env_.rank, ctx_.generation);
  if (live() && live_->formed()) beats_->SetLiveEpoch(live_->membership().epoch);
  beats_->Ready(progress_.step, set_aside_, run_dir_);
  return Status::Ok();
}

}  // namespace tenax::train::trainer_internal
