#include "tenax/train/trainer.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <set>

#include "tenax/checkpoint/store.h"
#include "tenax/config/batch.h"
#include "tenax/config/config.h"
#include "tenax/config/resume_changes.h"
#include "tenax/core/format.h"
#include "tenax/core/fs.h"
#include "tenax/core/log.h"
#include "tenax/core/run_lock.h"
#include "tenax/data/hf_tokenizer_files.h"
#include "tenax/data/loader.h"
#include "tenax/data/source.h"
#include "tenax/model/llama.h"
#include "tenax/parallel/communicator.h"
#include "tenax/parallel/mesh.h"
#include "tenax/protocol/agent_channel.h"
#include "tenax/protocol/fault_injection.h"
#include "tenax/protocol/flight_recorder.h"
#include "tenax/protocol/heartbeat.h"
#include "tenax/train/adamw.h"
#include "tenax/train/checkpoint_interval.h"
#include "tenax/train/device.h"
#include "tenax/train/evaluate.h"
#include "tenax/train/loss_spike.h"
#include "tenax/train/lr_schedule.h"
#include "tenax/train/parallel_model.h"
#include "tenax/train/reporter.h"
#include "tenax/train/step_model.h"
#include "tenax/train/train_checkpoint.h"

namespace tenax::train {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::FailureKind;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string CheckpointFolder(const Config& c, const std::string& run_dir) {
  const std::string& f = c.checkpoint.folder;
  return (!f.empty() && f[0] == '/') ? f : JoinPath(run_dir, f);
}

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

// Bytes this rank moved through every group it belongs to (null entries: groups not in use).
parallel::CommStats TotalStats(const std::vector<const parallel::Communicator*>& groups) {
  parallel::CommStats t;
  for (const auto* g : groups) {
    if (g != nullptr) t += g->stats();
  }
  return t;
}

// A failure of the training step and what it was, for the exit report.
struct Failure {
  Status status;
  FailureKind kind = FailureKind::kCrash;
};

// What a failed save was: this rank's write (I/O), a consequence of another rank's failure, or a
// crash inside the checkpoint code.
FailureKind SaveFailureKind(const Status& st) {
  if (st.code() == StatusCode::kPeerLost) return FailureKind::kPeerLost;
  if (st.code() == StatusCode::kIoError) return FailureKind::kCheckpointWrite;
  return FailureKind::kCrashInCheckpoint;
}

// What the loop does with a step whose loss is a spike (training.on_loss_spike).
enum class SpikeAction { kNone, kWarn, kSkip, kRestart, kStop };

}  // namespace

// One rank's training run. Setup builds, in this order (each needs the previous): data (debug
// presets take their vocabulary from it), the layout and process groups, the model under the
// layout and its optimizer, checkpointing and the resume, the loaders at the resumed position.
// Then Run: Step, Evaluate and Save per step, Finish. Every rank calls the same methods in the
// same order (collectives inside). Not thread-safe; owns every thread it starts.
class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> Create(const Config& config,
                                                 const protocol::RankContext& context,
                                                 const parallel::DistEnv& env,
                                                 const protocol::ExitReporter& reporter);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  ~Trainer();

  Result<TrainSummary> Run();
  // What the failure that Setup or Run returned was (kCrash unless a site said more).
  FailureKind failure_kind() const { return failure_kind_; }
  bool failure_secondary() const { return failure_secondary_; }

 private:
  Trainer(const Config& config, const protocol::RankContext& context, const parallel::DistEnv& env,
          const protocol::ExitReporter& reporter)
      : config_(config), ctx_(context), env_(env), reporter_(reporter), t_(config_.training) {}

  Status Setup();
  Status SetupData();
  Status SetupRunFolder();
  Status SetupGroups();
  Status SetupModel();
  Status SetupCheckpoints();
  Status ReconcileResume();
  Status SetupLoaders();

  Status Step(int64_t step);
  Status Evaluate(int64_t step);
  Status Save(int64_t step);
  Status Finish();
  // Decides about a spike at `step` (logs it, records it); kNone when the loss is no spike.
  Result<SpikeAction> CheckSpike(int64_t step, double loss);
  Status Fail(FailureKind kind, Status st, bool secondary = false) {
    failure_kind_ = kind;
    failure_secondary_ = secondary;
    return st;
  }
  // When every rank fails on the same mean loss (NaN, spike), which rank's own loss caused it:
  // with `nonfinite`, the first whose local loss is not finite (-1: none, e.g. only the gradient
  // norm overflowed); otherwise the largest. Collective; -1 for a single process.
  int OriginOf(double local_loss, bool nonfinite);

  // Constant after construction.
  const Config config_;
  const protocol::RankContext ctx_;
  const parallel::DistEnv env_;
  const protocol::ExitReporter& reporter_;
  const TrainingOptions& t_;
  const Clock::time_point t_start_ = Clock::now();

  // Set up once, in Setup's order. Destroyed in reverse: the process groups outlive everything
  // that issues collectives, the run lock outlives everything that writes the run folder.
  std::optional<RunLock> run_lock_;
  DeviceInfo device_;
  data::DataSplits data_;
  ModelSpec spec_;
  std::optional<parallel::Mesh> mesh_;
  BatchShape batch_;  // the step's batch; a resume may re-derive its accumulation
  FlopsPerToken flops_;
  std::string run_dir_, ckpt_dir_, config_toml_;
  std::unique_ptr<parallel::ProcessGroups> groups_;
  std::unique_ptr<parallel::Communicator> shard_group_, replicate_group_, tp_group_, pp_group_;
  std::unique_ptr<parallel::Communicator> ep_group_, ep_shard_group_;  // expert_parallel > 1
  std::vector<const parallel::Communicator*> all_groups_;
  std::unique_ptr<protocol::FlightRecorder> flight_;
  std::unique_ptr<protocol::FlightRecorderWatchdog> watchdog_;
  std::unique_ptr<protocol::FaultInjector> faults_;
  std::unique_ptr<model::Llama> model_;  // the full model, or the shape reference (distributed)
  std::unique_ptr<ParallelModel> parallel_model_;
  std::unique_ptr<SingleProcessModel> single_model_;
  StepModel* step_model_ = nullptr;  // one of the two above
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<TrainTarget> target_;
  std::unique_ptr<ckpt::CheckpointStore> store_;
  std::unique_ptr<TrainCheckpointer> checkpointer_;
  std::optional<data::BatchLoader> loader_;
  std::optional<data::EvalLoader> val_loader_;
  std::unique_ptr<Reporter> reporter_out_;  // the lead rank's terminal, metrics and TensorBoard
  std::unique_ptr<protocol::HeartbeatWriter> beats_;

  // Training state.
  TrainProgress progress_;
  int set_aside_ = 0;
  int64_t last_step_ = 0;
  int64_t tokens_per_step_ = 0;
  std::optional<LossSpikeDetector> spikes_;
  std::set<int64_t> rolled_back_;  // steps that made an earlier run roll back (loss spikes)
  double train_seconds_ = 0;
  int64_t steps_timed_ = 0;
  parallel::CommStats step_comm_;  // collectives issued inside training steps only
  FailureKind failure_kind_ = FailureKind::kSetup;
  bool failure_secondary_ = false;
  double local_loss_ = 0;  // this rank's loss of the current step, before the mean over ranks
  TrainSummary summary_;
};

Result<std::unique_ptr<Trainer>> Trainer::Create(const Config& config,
                                                 const protocol::RankContext& context,
                                                 const parallel::DistEnv& env,
                                                 const protocol::ExitReporter& reporter) {
  std::unique_ptr<Trainer> t(new Trainer(config, context, env, reporter));
  Status st = t->Setup();
  if (!st.ok()) {
    // Said before the teardown (which makes the peers fail too).
    reporter.Report(protocol::ToInt(protocol::FromStatus(st)), t->failure_kind_, st.message());
    return st;
  }
  return t;
}

Trainer::~Trainer() = default;

Status Trainer::Setup() {
  at::manual_seed(config_.job.seed);
  TENAX_ASSIGN_OR_RETURN(device_, ResolveDevice(t_));
  {  // Threads follow the device and precision (device.h: ChooseThreads), said once at start.
    const CpuFacts cpu = ReadCpuFacts();
    const ThreadChoice threads = ChooseThreads(device_, t_.threads, cpu, env_.local_world);
    at::set_num_threads(threads.intra_op_threads);
    log::Info("{}", DescribeCompute(device_, threads, cpu));
  }
  TENAX_RETURN_IF_ERROR(SetupData());
  TENAX_RETURN_IF_ERROR(SetupRunFolder());
  TENAX_RETURN_IF_ERROR(SetupGroups());
  TENAX_RETURN_IF_ERROR(SetupModel());
  TENAX_RETURN_IF_ERROR(SetupCheckpoints());
  TENAX_RETURN_IF_ERROR(SetupLoaders());
  failure_kind_ = FailureKind::kCrash;
  return Status::Ok();
}

Status Trainer::SetupData() {
  TENAX_ASSIGN_OR_RETURN(data_, data::OpenDataSource(config_.data));
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
  TENAX_ASSIGN_OR_RETURN(mesh_, parallel::Mesh::Create(config_.parallelism, env_.world, spec_, t_));
  TENAX_ASSIGN_OR_RETURN(batch_, ResolveBatch(t_, mesh_->dp()));
  flops_ = TrainingFlopsPerToken(spec_, t_.seq_len);
  summary_.model_name = spec_.name;
  summary_.n_params = CountParams(spec_).total;
  summary_.entropy_rate_nats = data_.entropy_rate_nats;
  return Status::Ok();
}

Status Trainer::SetupRunFolder() {
  run_dir_ = JoinPath(config_.job.dump_folder, config_.job.name);
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
    TENAX_RETURN_IF_ERROR(
        LocalFs().WriteFileAtomic(JoinPath(run_dir_, "config.toml"), config_toml_));
  }
  return Status::Ok();
}

Status Trainer::SetupGroups() {
  const parallel::Mesh& mesh = *mesh_;
  // The world, then this rank's group along each axis (size-1 groups are local no-ops).
  TENAX_ASSIGN_OR_RETURN(groups_,
                         parallel::ProcessGroups::Connect(env_, std::chrono::seconds(120)));
  auto group = [&](const char* name, parallel::Axis axis,
                   std::unique_ptr<parallel::Communicator>* out) -> Status {
    TENAX_ASSIGN_OR_RETURN(*out, groups_->NewGroup(name, mesh.GroupOf(env_.rank, axis)));
    return Status::Ok();
  };
  TENAX_RETURN_IF_ERROR(group("dp_shard", parallel::Axis::kShard, &shard_group_));
  TENAX_RETURN_IF_ERROR(group("dp_replicate", parallel::Axis::kReplicate, &replicate_group_));
  TENAX_RETURN_IF_ERROR(group("tp", parallel::Axis::kTensor, &tp_group_));
  TENAX_RETURN_IF_ERROR(group("pp", parallel::Axis::kPipeline, &pp_group_));
  if (mesh.ep() > 1) {  // expert parallelism within dp_shard (parallel/mesh.h)
    TENAX_ASSIGN_OR_RETURN(ep_group_, groups_->NewGroup("ep", mesh.ExpertGroupOf(env_.rank)));
    TENAX_ASSIGN_OR_RETURN(ep_shard_group_,
                           groups_->NewGroup("ep_shard", mesh.ExpertShardGroupOf(env_.rank)));
  }
  all_groups_ = {&groups_->world(), shard_group_.get(), replicate_group_.get(), tp_group_.get(),
                 pp_group_.get(),   ep_group_.get(),    ep_shard_group_.get()};
  if (!env_.distributed()) return Status::Ok();
  // Named after what started it: the environment variables alone look like torchrun's.
  log::Info("rank {} of {} (started by {}), layout {}", env_.rank, env_.world,
            ctx_.supervised ? "tenax launch" : env_.source, mesh.Describe());
  // Flight recorder: this rank's last collectives in every group, dumped when the launcher
  // signals a hang (SIGUSR1) or when one runs past parallelism.collective_timeout_s
  // (docs/flight_recorder.md), into the launcher's heartbeat folder if there is one.
  flight_ = std::make_unique<protocol::FlightRecorder>(env_.rank);
  const std::string dump_dir =
      ctx_.heartbeat_dir.empty() ? JoinPath(run_dir_, "flight") : ctx_.heartbeat_dir;
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
    std::_Exit(protocol::ToInt(protocol::ExitCode::kCollectiveTimeout));
  };
  watchdog_ = std::make_unique<protocol::FlightRecorderWatchdog>(*flight_, LocalFs(), wo);
  const std::pair<parallel::Communicator*, parallel::Axis> recorded[] = {
      {shard_group_.get(), parallel::Axis::kShard},
      {replicate_group_.get(), parallel::Axis::kReplicate},
      {tp_group_.get(), parallel::Axis::kTensor},
      {pp_group_.get(), parallel::Axis::kPipeline}};
  const char* names[] = {"dp_shard", "dp_replicate", "tp", "pp"};
  groups_->world().SetFlightRecorder(flight_.get(), "world");
  for (size_t i = 0; i < 4; ++i) {
    recorded[i].first->SetFlightRecorder(flight_.get(), names[i]);
    flight_->RegisterGroup(names[i], mesh.GroupOf(env_.rank, recorded[i].second));
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
  // Same seed on every rank: identical initial weights, no broadcast needed.
  model_ = std::make_unique<model::Llama>(spec_, config_.job.seed, device_.device);
  model_->SetActivationCheckpoint(config_.parallelism.activation_checkpoint);
  const parallel::Mesh& mesh = *mesh_;
  if (env_.distributed()) {
    // This rank's part of the model under the layout (train/parallel_model.h); the full model
    // then only serves as the shape reference (its tensors are released).
    ParallelGroups pg{&groups_->world(),    replicate_group_.get(), shard_group_.get(),
                      pp_group_.get(),      tp_group_.get(),        ep_group_.get(),
                      ep_shard_group_.get()};
    TENAX_ASSIGN_OR_RETURN(parallel_model_,
                           ParallelModel::Create(spec_, model_->params(), pg, config_.parallelism,
                                                 device_.device, device_.compute_dtype));
    model_->ReleaseParams();
    step_model_ = parallel_model_.get();
  } else {
    single_model_ = std::make_unique<SingleProcessModel>(*model_, device_.compute_dtype);
    step_model_ = single_model_.get();
  }
  optimizer_ = std::make_unique<AdamW>(config_.optimizer, step_model_->optimizer_params(),
                                       step_model_->decay_masks());
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
                       {"expert_parallel", mesh.ep()},
                       {"sharding", parallel_model_ ? "rank-pieces" : "none"}}});
  if (!data_.tokenizer.empty()) {  // for export-hf and generate (train_checkpoint.h)
    auto id = [](std::optional<uint32_t> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
    target_->tokenizer = {{"spec", data::AbsoluteTokenizerSpec(data_.tokenizer)},
                          {"bos_id", id(data_.bos)},
                          {"eos_id", id(data_.eos)}};
  }
  target_->moe = step_model_->moe_state();  // the sigmoid router's biases travel with it
  target_->moe_copies = step_model_->moe_layer_copies();
  log::Info("model: {} with {} parameters{}, {} training FLOP/token at seq_len {}; device {} ({})",
            spec_.name, FormatParams(static_cast<double>(summary_.n_params)),
            spec_.moe.enabled()
                ? fmt::format(" ({} active: {} of {} experts per token)",
                              FormatParams(static_cast<double>(CountParams(spec_).active)),
                              spec_.moe.top_k, spec_.moe.n_experts)
                : "",
            FormatCount(flops_.total()), t_.seq_len, device_.name,
            device_.compute_dtype == at::kBFloat16 ? "bf16 compute, fp32 master weights" : "fp32");
  log::Info("parameters + gradients + optimizer state per rank: {} ({} bytes)",
            FormatGiB(static_cast<double>(step_model_->ResidentStateBytes())),
            step_model_->ResidentStateBytes());
  TENAX_ASSIGN_OR_RETURN(faults_, protocol::FaultInjector::Create(ctx_, env_.rank, &reporter_));
  return Status::Ok();
}

Status Trainer::SetupCheckpoints() {
  parallel::Communicator& world = groups_->world();
  ckpt_dir_ = CheckpointFolder(config_, run_dir_);
  TENAX_RETURN_IF_ERROR(LocalFs().CreateDirs(ckpt_dir_));
  store_ = std::make_unique<ckpt::CheckpointStore>(LocalFs(), ckpt_dir_);
  // Saves (sync or async), the interval (fixed or "auto"), memory replicas and pruning.
  TrainCheckpointer::Setup cs;
  cs.options = config_.checkpoint;
  cs.total_steps = t_.steps;
  cs.folder = ckpt_dir_;
  if (config_.checkpoint.memory_replicas && env_.distributed()) {
    cs.replica_root = "/dev/shm/tenax-" + config_.job.name;
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
  TENAX_ASSIGN_OR_RETURN(
      val_loader_,
      data::EvalLoader::Create(data_.val, t_.seq_len, t_.local_batch_size,
                               config_.metrics.eval_tokens, mesh.dp_index(env_.rank), mesh.dp()));
  if (env_.rank == 0) {
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
  beats_->Ready(progress_.step, set_aside_, run_dir_);
  return Status::Ok();
}

Result<TrainSummary> Trainer::Run() {
  if (progress_.step >= last_step_) {
    // Nothing to do is not an error: a scheduler that requeues a finished job must see success.
    log::Info(
        "already complete: the newest checkpoint is at step {} and the run ends at step {} "
        "({}); raise training.steps{} to train further",
        progress_.step, last_step_, last_step_ < t_.steps ? "training.stop_at" : "training.steps",
        last_step_ < t_.steps ? " or training.stop_at" : "");
    summary_.already_complete = true;
    summary_.first_step = summary_.last_step = progress_.step;
    if (reporter_out_) reporter_out_->Finish();
    return summary_;
  }
  summary_.first_step = progress_.step + 1;
  log::Info("training steps {}..{} of {}: global batch {} x {} tokens = {} tokens/step",
            summary_.first_step, last_step_, t_.steps, DescribeBatch(batch_), t_.seq_len,
            tokens_per_step_);
  log::Info("setup took {:.2f}s", Seconds(Clock::now() - t_start_));
  for (int64_t step = progress_.step + 1; step <= last_step_; ++step) {
    TENAX_RETURN_IF_ERROR(Step(step));
    const bool last = step == last_step_;
    if ((config_.metrics.eval_interval > 0 && step % config_.metrics.eval_interval == 0) || last) {
      TENAX_RETURN_IF_ERROR(Evaluate(step));
    }
    if (checkpointer_->Due(step, last)) TENAX_RETURN_IF_ERROR(Save(step));
  }
  TENAX_RETURN_IF_ERROR(Finish());
  return summary_;
}

Status Trainer::Step(int64_t step) {
  if (faults_) {  // tests of recovery (tenax launch --inject)
    if (faults_->CrashDue(step) && checkpointer_->in_flight()) {
      // An injected crash is a crash, not one in a checkpoint: let a background save finish
      // first (its error, if any, stays for the next save).
      (void)checkpointer_->Finish();
      beats_->SetWritingCheckpoint(-1);
      beats_->Refresh();
    }
    faults_->OnStepBegin(step);
  }
  parallel::Communicator& world = groups_->world();
  const auto t0 = Clock::now();
  const parallel::CommStats comm0 = TotalStats(all_groups_);
  const double lr = LearningRate(config_.lr_scheduler, config_.optimizer.lr, step, t_.steps);
  double loss_sum = 0;
  if (flight_) flight_->SetPhase(step, "forward_backward");
  step_model_->BeginStep();
  for (int64_t micro = 0; micro < batch_.accum; ++micro) {
    data::Batch b = loader_->Next();
    const at::Tensor x = BatchTensor(b.inputs, b.batch, b.seq_len, device_.device);
    const at::Tensor y = BatchTensor(b.targets, b.batch, b.seq_len, device_.device);
    TENAX_ASSIGN_OR_RETURN(double l,
                           step_model_->ForwardBackward(x, y, static_cast<int>(batch_.accum)));
    loss_sum += l;
  }
  if (faults_) {  // --inject slow / hang: before the gradient collectives, with the compute so far
    faults_->BeforeGradientReduce(
        step, Seconds(Clock::now() - t0) - (TotalStats(all_groups_) - comm0).wait_s);
  }
  double loss = loss_sum / static_cast<double>(batch_.accum);
  if (flight_) flight_->SetPhase(step, "gradient_reduction");
  step_model_->FinishStep();  // every gradient reduction of the layout
  const double grad_norm = step_model_->ClipGradNorm(t_.max_norm);
  if (faults_) {
    if (faults_->PoisonLoss(step)) loss = std::nan("");  // --inject nan
    loss *= faults_->LossFactor(step);                   // --inject spike
  }
  local_loss_ = loss;
  if (env_.distributed()) {  // the step's loss: mean over ranks (TP/PP ranks agree already)
    at::Tensor l = at::full({1}, loss, at::kDouble);
    world.AllReduceSum(l);
    loss = l.item<double>() / env_.world;
  }
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    if (reporter_out_) reporter_out_->Finish();
    beats_->NonFinite(step);
    const int origin = OriginOf(local_loss_, /*nonfinite=*/true);
    const std::string whose =
        origin >= 0
            ? fmt::format(" (rank {}'s own loss was {})", origin,
                          origin == env_.rank ? fmt::format("{}", local_loss_) : "not finite")
            : "";
    // Without an origin (every local loss finite: the gradient norm overflowed) no rank is to
    // blame, so every rank says it is not the cause.
    const bool secondary = env_.distributed() && origin != env_.rank;
    if (t_.on_nonfinite == "restart") {
      return Fail(FailureKind::kNonFinite,
                  Unavailable(fmt::format(
                      "step {}: loss = {}, gradient norm = {}{}; training.on_nonfinite = "
                      "\"restart\": exiting so that the launcher restarts from the last good "
                      "checkpoint",
                      step, loss, grad_norm, whose)),
                  secondary);
    }
    return Fail(
        FailureKind::kNonFinite,
        Numerical(fmt::format("step {}: loss = {}, gradient norm = {}{}; training diverged. Lower "
                              "optimizer.lr (now {}), raise lr_scheduler.warmup_steps or lower "
                              "training.max_norm, then resume from the last good checkpoint in {}",
                              step, loss, grad_norm, whose, config_.optimizer.lr, ckpt_dir_)),
        secondary);
  }
  std::optional<MoeMetrics> moe_metrics;
  if (model::MoeState* moe = step_model_->moe_state()) {  // collective: every rank, every step
    moe_metrics = CollectMoeMetrics(*moe, env_.distributed() ? &world : nullptr,
                                    step_model_->moe_layer_copies());
  }
  TENAX_ASSIGN_OR_RETURN(const SpikeAction spike, CheckSpike(step, loss));
  if (spike != SpikeAction::kSkip) optimizer_->Step(lr);
  // The sigmoid router's biases move with the step's loads (not when its update was skipped).
  if (model::MoeState* moe = step_model_->moe_state()) moe->EndStep(spike != SpikeAction::kSkip);
  if (spike == SpikeAction::kNone) spikes_->Add(loss);
  step_model_->ZeroGrad();
  progress_.step = step;
  progress_.data_position = loader_->position();
  progress_.tokens_seen += tokens_per_step_;
  progress_.loss_history.assign(spikes_->history().begin(), spikes_->history().end());

  const double dt = Seconds(Clock::now() - t0);
  const parallel::CommStats step_delta = TotalStats(all_groups_) - comm0;
  step_comm_ += step_delta;
  train_seconds_ += dt;
  checkpointer_->RecordStepTime(dt);
  ++steps_timed_;
  beats_->SetWritingCheckpoint(checkpointer_->in_flight().value_or(-1));
  beats_->StepDone(step, dt, dt - step_delta.wait_s, static_cast<double>(tokens_per_step_) / dt);
  summary_.final_loss = loss;
  StepMetrics m;
  m.step = step;
  m.total_steps = t_.steps;
  m.loss = loss;
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_time_s = dt;
  m.tokens_per_s = static_cast<double>(tokens_per_step_) / dt;
  m.flops_per_s = m.tokens_per_s * flops_.total();
  if (device_.peak_flops) m.mfu = m.flops_per_s / *device_.peak_flops;
  m.mem_peak_bytes = PeakMemoryBytes(device_);
  m.tokens_seen = progress_.tokens_seen;
  m.eta_s =
      train_seconds_ / static_cast<double>(steps_timed_) * static_cast<double>(last_step_ - step);
  m.moe = std::move(moe_metrics);
  if (reporter_out_ && (step % config_.metrics.log_interval == 0 || step == last_step_)) {
    TENAX_RETURN_IF_ERROR(reporter_out_->LogStep(m));
  }
  return Status::Ok();
}

Result<SpikeAction> Trainer::CheckSpike(int64_t step, double loss) {
  const std::optional<double> median = spikes_->Check(loss);
  if (!median) return SpikeAction::kNone;
  std::string action = t_.on_loss_spike;
  // Back at a step that already made the run roll back: the spike is the data's, not a
  // transient fault's, so this time the step is skipped.
  if (action == "restart" && rolled_back_.count(step) > 0) action = "skip";
  if (env_.rank == 0) {  // every rank decides the same (the loss is the mean over ranks)
    log::Warn(
        "step {}: loss spike: {:.4g} is {:.1f}x the median {:.4g} of the last {} steps "
        "(training.loss_spike_factor = {}); {}",
        step, loss, loss / *median, *median, spikes_->history().size(), t_.loss_spike_factor,
        action == "warn"      ? "applying the update anyway (on_loss_spike = \"warn\")"
        : action == "skip"    ? "skipping this step's update"
        : action == "restart" ? "rolling back to the newest checkpoint"
                              : "stopping (on_loss_spike = \"stop\")");
    TENAX_RETURN_IF_ERROR(
        AppendLossSpike(run_dir_, {step, loss, *median, action, ctx_.generation}));
  }
  groups_->world().Barrier();  // the record is written before anyone exits
  if (action == "warn") return SpikeAction::kWarn;
  if (action == "skip") return SpikeAction::kSkip;
  if (reporter_out_) reporter_out_->Finish();
  beats_->LossSpike(step);
  const int origin = OriginOf(local_loss_, /*nonfinite=*/false);  // whose own loss spiked most
  const bool secondary = origin >= 0 && origin != env_.rank;
  if (action == "restart") {
    return Fail(FailureKind::kLossSpike,
                Unavailable(fmt::format(
                    "step {}: loss spike ({:.4g} against a median of {:.4g}); "
                    "training.on_loss_spike = \"restart\": exiting so that the launcher restarts "
                    "from the newest checkpoint (if the step spikes again, its update is "
                    "skipped); the largest loss was rank {}'s",
                    step, loss, *median, origin)),
                secondary);
  }
  return Fail(FailureKind::kLossSpike,
              Numerical(fmt::format(
                  "step {}: loss spike ({:.4g} against a median of {:.4g}); "
                  "training.on_loss_spike = \"stop\". Resume from the last good checkpoint in {} "
                  "with a lower optimizer.lr, or set on_loss_spike = \"skip\" to drop such steps",
                  step, loss, *median, ckpt_dir_)),
              secondary);
}

int Trainer::OriginOf(double local_loss, bool nonfinite) {
  if (!env_.distributed()) return -1;
  const at::Tensor all =
      groups_->world().AllGather(at::full({1}, local_loss, at::kDouble)).contiguous();
  const double* v = all.data_ptr<double>();
  int largest = 0;
  for (int r = 0; r < env_.world; ++r) {
    if (!std::isfinite(v[r])) return r;
    if (v[r] > v[largest]) largest = r;
  }
  return nonfinite ? -1 : largest;
}

Status Trainer::Evaluate(int64_t step) {
  if (flight_) flight_->SetPhase(step, "eval");
  auto loss_of = [&](const at::Tensor& x, const at::Tensor& y) {
    Result<double> l = step_model_->EvalLoss(x, y);
    if (!l.ok()) log::Error("evaluation: {}", l.status().ToString());
    beats_->EvalProgress(step);  // a long evaluation is progress, not a hang
    return at::full({}, l.ok() ? *l : std::nan(""), at::kDouble);
  };
  // This rank's share of the validation windows, combined over all ranks. `copies`: how many
  // ranks evaluate each data-parallel slice (the TP and PP ranks of a group).
  const EvalResult local = EvaluateLoss(loss_of, *val_loader_, device_.device);
  at::Tensor t = at::tensor(
      {local.loss * static_cast<double>(local.tokens), static_cast<double>(local.tokens)},
      at::kDouble);
  groups_->world().AllReduceSum(t);
  const double tokens = t[1].item<double>();
  const int copies = env_.world / mesh_->dp();
  const EvalResult ev{tokens > 0 ? t[0].item<double>() / tokens : 0.0,
                      static_cast<int64_t>(tokens) / copies};
  step_model_->EndEval();
  summary_.final_val_loss = ev.loss;
  if (reporter_out_) TENAX_RETURN_IF_ERROR(reporter_out_->LogEval(step, ev.loss, ev.tokens));
  return Status::Ok();
}

Status Trainer::Save(int64_t step) {
  const auto c0 = Clock::now();
  beats_->CheckpointBegin(step);
  if (flight_) flight_->SetPhase(step, "checkpoint");
  Result<std::vector<std::string>> lines =
      checkpointer_->Save(progress_, *target_, config_toml_, Seconds(Clock::now() - t_start_));
  if (!lines.ok()) return Fail(SaveFailureKind(lines.status()), lines.status());
  for (const auto& l : *lines) {
    if (reporter_out_) reporter_out_->Message(l);
  }
  beats_->SetWritingCheckpoint(checkpointer_->in_flight().value_or(-1));
  beats_->CheckpointDone(step, Seconds(Clock::now() - c0));  // the blocking part
  return Status::Ok();
}

Status Trainer::Finish() {
  {
    // An asynchronous save still in flight must be committed before the run counts as done (and
    // the error of one that failed surfaces here, in the checkpoint phase).
    const bool async = config_.checkpoint.enable && config_.checkpoint.async;
    const auto c0 = Clock::now();
    if (async) beats_->CheckpointBegin(progress_.step);
    Result<std::vector<std::string>> lines = checkpointer_->Finish();
    if (!lines.ok()) return Fail(SaveFailureKind(lines.status()), lines.status());
    beats_->SetWritingCheckpoint(-1);
    if (async) beats_->CheckpointDone(progress_.step, Seconds(Clock::now() - c0));
    for (const auto& l : *lines) {
      if (reporter_out_) reporter_out_->Message(l);
    }
  }
  checkpointer_->DropReplicas();  // the run is complete: storage holds its checkpoints
  if (checkpointer_->last_committed()) {
    summary_.checkpoint_dir = store_->StepDir(*checkpointer_->last_committed());
  }
  if (reporter_out_) reporter_out_->Finish();
  if (env_.distributed() && steps_timed_ > 0) {
    const double n = static_cast<double>(steps_timed_);
    log::Info(
        "communication per step on this rank: all-reduce {:.0f} B, all-gather {:.0f} B "
        "received, reduce-scatter {:.0f} B sent, p2p {:.0f} B, all-to-all {:.1f} B sent; "
        "{:.4f} s/step",
        step_comm_.all_reduce_bytes / n, step_comm_.all_gather_bytes / n,
        step_comm_.reduce_scatter_bytes / n, step_comm_.p2p_bytes / n,
        step_comm_.all_to_all_bytes / n, train_seconds_ / n);
  }
  summary_.last_step = last_step_;
  if (last_step_ < t_.steps) {
    log::Info("stopped at step {} of {} (training.stop_at); run again to continue", last_step_,
              t_.steps);
  }
  const double tokens_run = static_cast<double>(tokens_per_step_ * steps_timed_);
  summary_.tokens_per_s = train_seconds_ > 0 ? tokens_run / train_seconds_ : 0;
  summary_.flops_per_s = summary_.tokens_per_s * flops_.total();
  if (device_.peak_flops) summary_.mfu = summary_.flops_per_s / *device_.peak_flops;
  return Status::Ok();
}

Result<TrainSummary> Train(const Config& config, const protocol::RankContext& context,
                           const parallel::DistEnv& env, const protocol::ExitReporter& reporter) {
  if (env.distributed()) log::SetRank(env.rank);
  std::unique_ptr<Trainer> trainer;
  // libtorch and c10d throw; a collective whose partner died throws on this thread (or on a
  // Gloo thread, where the terminate handler takes over). Converted here, while the process
  // groups still exist, so the exit report is written before this rank tears them down.
  Status failed;
  FailureKind kind = FailureKind::kSetup;
  bool secondary = false;
  try {
    Result<std::unique_ptr<Trainer>> created = Trainer::Create(config, context, env, reporter);
    if (!created.ok()) return created.status();  // Create reported it
    trainer = std::move(*created);
    kind = FailureKind::kCrash;
    Result<TrainSummary> summary = trainer->Run();
    if (summary.ok()) return summary;
    failed = summary.status();
    kind = trainer->failure_kind();
    secondary = trainer->failure_secondary();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    failed = protocol::IsPeerLostError(what)
                 ? PeerLost("a collective lost its partner (another rank failed first): " + what)
                 : Internal("libtorch: " + what);
    if (failed.code() == StatusCode::kPeerLost) kind = FailureKind::kPeerLost;
  }
  reporter.Report(protocol::ToInt(protocol::FromStatus(failed)), kind, failed.message(), secondary);
  return failed;
}

Result<TrainSummary> Train(const Config& config) {
  TENAX_ASSIGN_OR_RETURN(parallel::DistEnv env, parallel::ReadDistEnv());
  return Train(config, protocol::RankContext{}, env, protocol::ExitReporter{});
}

}  // namespace tenax::train
