#include "tenax/train/trainer.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>

#include "tenax/core/run_paths.h"
#include "tenax/train/trainer_internal.h"

namespace tenax::train {
namespace trainer_internal {
namespace {

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

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(const Config& config,
                                                 const protocol::RankContext& context,
                                                 const parallel::DistEnv& env,
                                                 const protocol::ExitReporter& reporter,
                                                 std::shared_ptr<Prepared> prepared) {
  std::unique_ptr<Trainer> t(new Trainer(config, context, env, reporter, std::move(prepared)));
  Status st = t->Setup();
  if (!st.ok()) {
    // Said before the teardown (which makes the peers fail too).
    reporter.Report(protocol::ToInt(protocol::FromStatus(st)), t->failure_kind_, st.message());
    return st;
  }
  return t;
}

Trainer::~Trainer() = default;

Result<TrainSummary> Trainer::Run() {
  if (ctx_.live_join) TENAX_RETURN_IF_ERROR(LiveJoin());  // a replacement: state from a live rank
  // (A replacement that joined at the run's last round takes part in it below.)
  if (progress_.step >= last_step_ && !ctx_.live_join) {
    // Nothing to do is not an error: a scheduler that requeues a finished job must see success.
    log::Info(
        "already complete: the newest checkpoint is at step {} and the run ends at step {} "
        "({}); raise training.steps{} to train further",
        progress_.step, last_step_, last_step_ < t_.steps ? "training.stop_at" : "training.steps",
        last_step_ < t_.steps ? " or training.stop_at" : "");
    summary_.already_complete = true;
    summary_.first_step = summary_.last_step = progress_.step;
    if (reporter_out_) reporter_out_->Finish();
    Finished(progress_.step);
    return summary_;
  }
  summary_.first_step = progress_.step + 1;
  if (!ctx_.live_join) sdc_first_step_ = summary_.first_step;  // a replacement's: LiveSyncState
  if (summary_.first_step <= last_step_) {
    log::Info("training steps {}..{} of {}: global batch {} x {} tokens = {} tokens/step",
              summary_.first_step, last_step_, t_.steps, DescribeBatch(batch_), t_.seq_len,
              tokens_per_step_);
  }
  log::Info("setup took {:.2f}s", Seconds(Clock::now() - t_start_));
  for (int64_t step = progress_.step + 1; step <= last_step_; ++step) {
    ProfileBefore(step);
    TENAX_RETURN_IF_ERROR(Step(step));
    ProfileAfter(step);
    if (live_step_received_) continue;  // the others evaluated and saved it (LiveStep)
    TENAX_RETURN_IF_ERROR(live() ? LiveBetweenSteps(step) : BetweenSteps(step));
  }
  // Live: one more quorum round, where the members settle the last step's evaluation and save if
  // a member was lost in them.
  if (live()) TENAX_RETURN_IF_ERROR(LiveStep(last_step_ + 1));
  TENAX_RETURN_IF_ERROR(Finish());
  return summary_;
}

// One optimizer step, in order: forward and backward over the micro-batches, the gradient
// reductions and clipping, the step's loss agreed over ranks (a non-finite one ends the run
// here, before any update), the update, then the bookkeeping and the metrics line. Injected
// faults (tenax launch --inject) act at three named points, each a no-op without one.
// Live recovery runs it again after a lost member (LiveStep): nothing it changes before its last
// collective survives a retry (the data cursor moves with progress_, the gradients are dropped).
Status Trainer::Step(int64_t step) { return live() ? LiveStep(step) : StepOnce(step); }

Status Trainer::StepOnce(int64_t step) {
  InjectAtStepBegin(step);
  const auto t0 = Clock::now();
  const parallel::CommStats comm0 = TotalStats(all_groups_);
  const double lr = LearningRate(config_.lr_scheduler, config_.optimizer.lr, step, t_.steps);
  // A check replays another rank's step first, from the same weights (sdc_check.h).
  const bool check = SdcDue(step);
  ComputeDigest replayed;
  if (check) {
    TENAX_ASSIGN_OR_RETURN(replayed, SdcReplay(step, 1));
  }
  const auto t_own = Clock::now();
  if (sdc_) sdc_->BeginPass(step);
  if (check) sdc_->Arm();
  if (flight_) flight_->SetPhase(step, "forward_backward");
  step_model_->BeginStep();
  TENAX_ASSIGN_OR_RETURN(double loss, ForwardBackwardMicroBatches());
  InjectBeforeGradientReduce(step,
                             Seconds(Clock::now() - t0) - (TotalStats(all_groups_) - comm0).wait_s);
  if (flight_) flight_->SetPhase(step, "gradient_reduction");
  double own_s = 0, grad_norm = 0;
  model::MoeState* moe = step_model_->moe_state();
  std::optional<MoeMetrics> moe_metrics;
  // The step's collectives across data-parallel replicas (under HSDP, none before this point),
  // up to the last one before the update: live, a replica's ranks commit only together
  // (LiveAcrossReplicas, trainer_live.cc).
  auto reduce = [&]() -> Status {
    step_model_->FinishStep();  // every gradient reduction of the layout
    if (check) TENAX_RETURN_IF_ERROR(SdcVerify(step, sdc_->Disarm(loss), replayed));
    own_s = Seconds(Clock::now() - t_own);
    grad_norm = step_model_->ClipGradNorm(t_.max_norm);
    if (moe != nullptr) {  // the whole batch's routing, for the metrics and the biases
      moe_metrics = CollectMoeMetrics(*moe, env_.distributed() ? &groups_->world() : nullptr,
                                      step_model_->moe_count_copies());
    }
    local_loss_ = loss = InjectIntoLoss(step, loss);
    loss = MeanOverRanks(loss);
    return Status::Ok();
  };
  if (live()) {
    Status reduced;
    LiveAcrossReplicas([&] {
      reduced = reduce();
      return std::string();
    });
    TENAX_RETURN_IF_ERROR(reduced);
  } else {
    TENAX_RETURN_IF_ERROR(reduce());
  }
  if (!std::isfinite(loss) || !std::isfinite(grad_norm))
    return FailNonFinite(step, loss, grad_norm);
  TENAX_ASSIGN_OR_RETURN(const SpikeAction spike, CheckSpike(step, loss));
  // The last collective across replicas is done: no failure makes this step run again now.
  step_model_->ForgetKeptGradients();
  live_kept_.from_step = -1;
  checkpointer_->BeforeUpdate();  // a GPU snapshot's copies read the state first
  if (spike != SpikeAction::kSkip) optimizer_->Step(lr);
  // The sigmoid router's biases move with the step's loads (not when its update was skipped).
  if (moe != nullptr) moe->EndStep(spike != SpikeAction::kSkip, StepTotals(*moe_metrics, *moe));
  if (spike == SpikeAction::kNone) spikes_->Add(loss);
  step_model_->ZeroGrad();
  progress_.step = step;
  progress_.data_position = loader_->position();
  progress_.tokens_seen += tokens_per_step_;
  progress_.loss_history.assign(spikes_->history().begin(), spikes_->history().end());

  const double dt = Seconds(Clock::now() - t0);
  if (check && sdc_checks_ == 1) SdcLogCost(step, own_s);
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
  m.gpu_memory = ReadGpuMemory(device_);
  m.tokens_seen = progress_.tokens_seen;
  m.eta_s =
      train_seconds_ / static_cast<double>(steps_timed_) * static_cast<double>(last_step_ - step);
  m.moe = std::move(moe_metrics);
  if (reporter_out_ && LogsStep(step)) TENAX_RETURN_IF_ERROR(reporter_out_->LogStep(m));
  last_metrics_ = std::move(m);
  return Status::Ok();
}

void Trainer::InjectAtStepBegin(int64_t step) {
  if (!faults_) return;
  if (faults_->CrashDue(step) && checkpointer_->in_flight()) {
    // An injected crash is a crash, not one in a checkpoint: let a background save finish
    // first (its error, if any, stays for the next save).
    (void)checkpointer_->Finish();
    beats_->SetWritingCheckpoint(-1);
    beats_->Refresh();
  }
  faults_->OnStepBegin(step);
}

void Trainer::InjectBeforeGradientReduce(int64_t step, double compute_s) {
  if (faults_) faults_->BeforeGradientReduce(step, compute_s);  // --inject slow / hang
}

double Trainer::InjectIntoLoss(int64_t step, double loss) {
  if (!faults_) return loss;
  if (faults_->PoisonLoss(step)) loss = std::nan("");  // --inject nan
  return loss * faults_->LossFactor(step);             // --inject spike
}

Result<double> Trainer::ForwardBackwardMicroBatches() {
  // This rank's data-parallel share of the global batch; live, also its part of the missing
  // ranks' samples (protocol::PartsRunBy), each scaled as its own rank would have: the group's
  // sum divided by the nominal world (Fsdp) is the gradient of the whole global batch. The
  // cursor is read from progress_, which moves once the step is done, so a step run again after
  // a lost member reads the same samples.
  const std::vector<protocol::SlotPart> parts = DataParts();
  // Live, after a recovery: the samples this rank ran before the failure need not run again
  // (their gradients were kept: ReCoVer's way), only the lost ranks' dealt to it since.
  std::vector<protocol::SlotPart> run = parts;
  double kept_loss = 0;
  bool resumed = false;
  if (live()) {
    if (LiveResumesKept(parts)) {
      resumed = true;
      run = protocol::PartsMinus(parts, live_kept_.parts);
      kept_loss = live_kept_.loss_sum;
      step_model_->ResumeStep();
      log::Info("step {}: the gradients of {} kept through the failure: {}", progress_.step + 1,
                DescribeParts(live_kept_.parts),
                run.empty() ? std::string("nothing more to run")
                            : fmt::format("running only {}", DescribeParts(run)));
    }
  }
  // The step's routing statistics: the kept micro-batches' are in them already.
  if (model::MoeState* moe = step_model_->moe_state(); moe && !resumed) moe->ClearStats();
  TENAX_ASSIGN_OR_RETURN(const double run_loss, RunMicroBatches(run));
  const double loss_sum = kept_loss + run_loss;
  if (live()) live_kept_ = {progress_.step, parts, loss_sum, LiveReplicas().receives_begun()};
  const int64_t per_micro = t_.local_batch_size * mesh_->dp();
  loader_->Seek(progress_.data_position + batch_.accum * per_micro);
  live_share_ = SlotsIn(parts);
  return loss_sum / (static_cast<double>(batch_.accum) * live_share_);
}

std::vector<int> Trainer::DataSlots() {
  if (!live()) return {mesh_->dp_index(env_.rank)};
  // The replicas' shares: each is its rank at this position (HSDP, TP; the rank itself in DDP).
  std::vector<int> slots;
  for (int q : protocol::SlotsRunBy(LiveReplicaView(live_->membership()),
                                    env_.rank / live_replica_ranks_)) {
    slots.push_back(mesh_->dp_index(LiveRankOf(q)));
  }
  return slots;
}

std::vector<protocol::SlotPart> Trainer::DataPartsOf(int rank) {
  const int64_t b = t_.local_batch_size;
  if (!live()) return {{mesh_->dp_index(rank), 0, b}};
  // A lost replica's samples are spread over the others, a few rows each, unless a micro-batch
  // must stay whole: the pipeline's schedule cuts it into its own micro-batches and scales the
  // step's gradients as a whole, and MoE's balancing (its aux loss, the experts' capacity) is
  // counted over the micro-batch it sees.
  const bool split = mesh_->degree(parallel::Axis::kPipeline) == 1 && !spec_.moe.enabled();
  std::vector<protocol::SlotPart> parts;
  for (protocol::SlotPart p : protocol::PartsRunBy(LiveReplicaView(live_->membership()),
                                                   rank / live_replica_ranks_, b, split)) {
    p.slot = mesh_->dp_index(LiveRankOf(p.slot));
    parts.push_back(p);
  }
  std::sort(parts.begin(), parts.end());
  return parts;
}

double Trainer::SlotsIn(const std::vector<protocol::SlotPart>& parts) const {
  double slots = 0;
  for (const protocol::SlotPart& p : parts) {
    slots += static_cast<double>(p.size()) / static_cast<double>(t_.local_batch_size);
  }
  return slots;
}

std::string Trainer::DescribeParts(const std::vector<protocol::SlotPart>& parts) const {
  // "slot(s) 0,3 and slot 2's rows 0-1"
  std::vector<int> whole;
  std::vector<std::string> out;
  for (const protocol::SlotPart& p : parts) {
    if (p.size() == t_.local_batch_size) {
      whole.push_back(p.slot);
    } else if (p.size() == 1) {
      out.push_back(fmt::format("slot {}'s row {}", p.slot, p.begin));
    } else {
      out.push_back(fmt::format("slot {}'s rows {}-{}", p.slot, p.begin, p.end - 1));
    }
  }
  if (!whole.empty()) out.insert(out.begin(), fmt::format("slot(s) {}", fmt::join(whole, ",")));
  return fmt::format("{}", fmt::join(out, " and "));
}

Result<double> Trainer::RunMicroBatches(const std::vector<protocol::SlotPart>& parts) {
  const int64_t start = progress_.data_position;
  const int64_t per_micro = t_.local_batch_size * mesh_->dp();
  double loss_sum = 0;
  for (int64_t micro = 0; micro < batch_.accum; ++micro) {
    for (const protocol::SlotPart& part : parts) {
      data::Batch b = loader_->BatchOf(start + micro * per_micro, part.slot);
      at::Tensor x = BatchTensor(b.inputs, b.batch, b.seq_len, device_.device);
      at::Tensor y = BatchTensor(b.targets, b.batch, b.seq_len, device_.device);
      double share = 1.0;
      if (part.size() != b.batch) {
        x = x.narrow(0, part.begin, part.size());
        y = y.narrow(0, part.begin, part.size());
        share = static_cast<double>(part.size()) / static_cast<double>(b.batch);
      }
      TENAX_ASSIGN_OR_RETURN(
          double l, step_model_->ForwardBackward(x, y, static_cast<int>(batch_.accum), share));
      loss_sum += l * share;
    }
  }
  return loss_sum;
}

double Trainer::MeanOverRanks(double loss) {
  if (!env_.distributed()) return loss;
  // TP and PP ranks agree on the loss already; the mean is over every rank.
  // This rank's loss stands for the live_share_ ranks' worth of samples it ran (1 but when
  // live).
  at::Tensor l = at::full({1}, loss * live_share_, at::kDouble);
  groups_->world().AllReduceSum(l);
  return l.item<double>() / env_.world;
}

Status Trainer::FailNonFinite(int64_t step, double loss, double grad_norm) {
  if (reporter_out_) reporter_out_->Finish();
  beats_->NonFinite(step);
  const int origin = OriginOf(local_loss_, /*nonfinite=*/true);
  const std::string whose =
      origin >= 0 ? fmt::format(" (rank {}'s own loss was {})", origin,
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

Result<SpikeAction> Trainer::CheckSpike(int64_t step, double loss) {
  const std::optional<double> median = spikes_->Check(loss);
  if (!median) return SpikeAction::kNone;
  std::string action = t_.on_loss_spike;
  // Back at a step that already made the run roll back: the spike is the data's, not a
  // transient fault's, so this time the step is skipped.
  if (action == "restart" && rolled_back_.count(step) > 0) action = "skip";
  // Every rank decides the same (the loss is the mean over ranks); the group's first one says it
  // (rank 0, or the lead of a live group that lost rank 0).
  if (groups_->world().rank() == 0) {
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
  if (faults_) faults_->OnLossSpike(step);  // --inject crash:...:at=spike
  // The record is written before anyone exits. Live, this is a collective across replicas after
  // the step's vote (reduce, above): it is voted on too, so a failure in it takes a replica out
  // on all of its ranks or none, and the step runs again in the next epoch.
  if (live()) {
    LiveAcrossReplicas([&] {
      groups_->world().Barrier();
      return std::string();
    });
  } else {
    groups_->world().Barrier();
  }
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
  // Live: group ranks are the members' positions; name the rank (slot) itself.
  auto rank_of = [&](int r) { return live() ? live_->membership().members[r] : r; };
  const int n = groups_->world().size();
  int largest = 0;
  for (int r = 0; r < n; ++r) {
    if (!std::isfinite(v[r])) return rank_of(r);
    if (v[r] > v[largest]) largest = r;
  }
  return nonfinite ? -1 : rank_of(largest);
}

Status Trainer::BetweenSteps(int64_t step, bool again) {
  const bool last = step == last_step_;
  if ((config_.metrics.eval_interval > 0 && step % config_.metrics.eval_interval == 0) || last) {
    TENAX_RETURN_IF_ERROR(Evaluate(step, again));
  }
  if (checkpointer_->Due(step, last)) TENAX_RETURN_IF_ERROR(Save(step, again));
  return Status::Ok();
}

Status Trainer::Evaluate(int64_t step, bool again) {
  if (flight_) flight_->SetPhase(step, "eval");
  auto loss_of = [&](const at::Tensor& x, const at::Tensor& y) {
    Result<double> l = step_model_->EvalLoss(x, y);
    if (!l.ok()) log::Error("evaluation: {}", l.status().ToString());
    beats_->EvalProgress(step);  // a long evaluation is progress, not a hang
    return at::full({}, l.ok() ? *l : std::nan(""), at::kDouble);
  };
  // This rank's share of the validation windows (live, also the missing replicas' dealt to it,
  // so that a short-handed evaluation covers every window), combined over all ranks. `copies`:
  // how many ranks evaluate each data-parallel slice (the TP and PP ranks of a group).
  double loss_sum = 0, local_tokens = 0;
  for (int slot : DataSlots()) {
    auto it = val_loaders_.find(slot);
    if (it == val_loaders_.end()) {
      TENAX_ASSIGN_OR_RETURN(
          data::EvalLoader l,
          data::EvalLoader::Create(data_.val, t_.seq_len, t_.local_batch_size,
                                   config_.metrics.eval_tokens, slot, mesh_->dp()));
      it = val_loaders_.emplace(slot, std::move(l)).first;
    }
    const EvalResult r = EvaluateLoss(loss_of, it->second, device_.device);
    loss_sum += r.loss * static_cast<double>(r.tokens);
    local_tokens += static_cast<double>(r.tokens);
  }
  if (faults_) faults_->OnEvaluated(step);  // --inject crash:...:at=eval
  at::Tensor t = at::tensor({loss_sum, local_tokens}, at::kDouble);
  groups_->world().AllReduceSum(t);
  const double tokens = t[1].item<double>();
  const int copies = env_.world / mesh_->dp();
  const EvalResult ev{tokens > 0 ? t[0].item<double>() / tokens : 0.0,
                      static_cast<int64_t>(tokens) / copies};
  step_model_->EndEval();
  summary_.final_val_loss = ev.loss;
  if (reporter_out_) {
    // Again after a lost member: the lead's line may be there already (a former lead's too).
    bool logged = false;
    if (again) {
      Result<int64_t> last = LastStepWith(reporter_out_->metrics_path(), "val_loss");
      logged = last.ok() && *last >= step;
    }
    if (!logged) TENAX_RETURN_IF_ERROR(reporter_out_->LogEval(step, ev.loss, ev.tokens));
  }
  return Status::Ok();
}

Status Trainer::Save(int64_t step, bool again) {
  if (again) {
    // A live group's second attempt: the lead may have committed it before a member was lost in
    // the save's last collectives. It says, and then every member does the same.
    bool committed = false;
    if (groups_->world().rank() == 0) {
      Result<std::vector<int64_t>> steps = store_->ListCommitted();
      committed = steps.ok() && std::find(steps->begin(), steps->end(), step) != steps->end();
    }
    at::Tensor done = at::full({1}, committed ? int64_t{1} : int64_t{0}, at::kLong);
    groups_->world().Broadcast(done, 0);
    if (done.item<int64_t>() == 1) {
      log::Info("step {}: its checkpoint was committed before the member was lost", step);
      return Status::Ok();
    }
  }
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

void Trainer::ProfileBefore(int64_t step) {
  if (config_.metrics.profile_step <= 0 || step != config_.metrics.profile_step) return;
  profiler_ = std::make_unique<StepProfiler>(device_.device.is_cuda());
  if (Status s = profiler_->Start(); !s.ok()) {
    log::Warn("profiling: {}; training goes on unprofiled", s.message());
    profiler_.reset();
  }
}

void Trainer::ProfileAfter(int64_t step) {
  const MetricsOptions& m = config_.metrics;
  if (!profiler_ || (step < m.profile_step + m.profile_steps - 1 && step < last_step_)) return;
  const RunPaths paths(run_dir_);
  const int64_t first = m.profile_step;
  Result<ProfileSummary> s =
      LocalFs().CreateDirs(paths.profile()).ok()
          ? profiler_->Stop(paths.profile_trace(env_.rank, first, step), step - first + 1)
          : Result<ProfileSummary>(IoError("cannot create " + paths.profile()));
  profiler_.reset();
  const std::string table_path = paths.profile_table(env_.rank, first, step);
  Status written = s.ok() ? LocalFs().WriteFileAtomic(table_path, FormatProfile(*s)) : s.status();
  if (!written.ok()) {
    log::Warn("profiling steps {}..{}: {}", first, step, written.message());
    return;
  }
  std::string kinds;
  for (const ProfileRow& r : s->by_kind) {
    kinds += fmt::format("{}{} {:.1f} ms", kinds.empty() ? "" : ", ", r.kind,
                         r.total_ms / static_cast<double>(s->steps));
  }
  log::Info("profile of steps {}..{}: {:.1f} ms per step{}{}; {} and its trace beside it", first,
            step, s->wall_ms / static_cast<double>(s->steps),
            s->gpu ? fmt::format(", GPU busy {:.1f} ms: ",
                                 s->device_busy_ms / static_cast<double>(s->steps))
                   : "",
            kinds, table_path);
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
  if (env_.distributed()) {  // every rank's: context and pipeline ranks differ from rank 0's
    const int64_t peak = PeakMemoryBytes(device_);
    log::Info("peak memory of this rank: {} ({} bytes)", FormatGiB(static_cast<double>(peak)),
              peak);
  }
  const double tokens_run = static_cast<double>(tokens_per_step_ * steps_timed_);
  summary_.tokens_per_s = train_seconds_ > 0 ? tokens_run / train_seconds_ : 0;
  summary_.flops_per_s = summary_.tokens_per_s * flops_.total();
  if (device_.peak_flops) summary_.mfu = summary_.flops_per_s / *device_.peak_flops;
  Finished(last_step_);
  return Status::Ok();
}

void Trainer::Finished(int64_t step) {
  // Everything this rank had to do is durable now; what is left is its teardown (process groups,
  // threads), which the launcher watches on its own clock (--exit-timeout).
  beats_->Finished(step);
  if (faults_) faults_->AfterFinish(step);
}

}  // namespace trainer_internal

using protocol::FailureKind;
using trainer_internal::Trainer;

std::shared_ptr<Prepared> PrepareBeforeAssignment(const Config& config) {
  // Nothing here may end the process: it has no rank, and no exit report to write, yet.
  try {
    Result<data::DataSplits> data = data::OpenDataSource(config.data);
    if (!data.ok()) return nullptr;
    return std::make_shared<Prepared>(Prepared{ConfigToToml(config), std::move(*data)});
  } catch (const std::exception&) {
    return nullptr;
  }
}

Result<TrainSummary> Train(const Config& config, const protocol::RankContext& context,
                           const parallel::DistEnv& env, const protocol::ExitReporter& reporter,
                           std::shared_ptr<Prepared> prepared) {
  if (env.distributed()) log::SetRank(env.rank);
  std::unique_ptr<Trainer> trainer;
  // libtorch and c10d throw; a collective whose partner died throws on this thread (or on a
  // Gloo thread, where the terminate handler takes over). Converted here, while the process
  // groups still exist, so the exit report is written before this rank tears them down.
  Status failed;
  FailureKind kind = FailureKind::kSetup;
  bool secondary = false;
  try {
    Result<std::unique_ptr<Trainer>> created =
        Trainer::Create(config, context, env, reporter, std::move(prepared));
    if (!created.ok()) return created.status();  // Create reported it
    trainer = std::move(*created);
    kind = FailureKind::kCrash;
    Result<TrainSummary> summary = trainer->Run();
    if (summary.ok()) return summary;
    failed = summary.status();
    kind = trainer->failure_kind();
    secondary = trainer->failure_secondary();
    // A step's send or receive whose peer went away (a pipeline's), returned rather than thrown:
    // reported as the same failure thrown from a collective is (below).
    if (failed.code() == StatusCode::kPeerLost && kind == FailureKind::kCrash) {
      kind = FailureKind::kPeerLost;
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    failed = protocol::IsPeerLostError(what) ? protocol::PeerLostError(what)
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
