// Live recovery's part of the Trainer (resilience.mode = "live", docs/resilience.md): every rank
// is a data-parallel replica in a parallel::LiveGroup whose membership the launcher decides.
//   A member dies    the step's collectives throw on the others; they drop the step's partial
//                    gradients, form the launcher's next epoch without it and run the step again
//                    with its samples dealt among them (ForwardBackwardMicroBatches), so the
//                    global batch and the sample order stay those of an unfailed run.
//   A replacement    started by the launcher in the lost rank's place (ctx_.live_join), it sets up
//                    without reading a checkpoint, says it is ready, and waits to be listed as
//                    joining; the members take it in at their next step boundary (LiveQuorum)
//                    and the newest state travels to it from a live member, checksummed.
// Non-goals for now: sharded or model-parallel layouts (only the group of every rank is
// re-formed), NCCL, several nodes, a failure during an evaluation or a checkpoint save (the
// launcher then restarts every rank as in restart mode).
#include <fmt/format.h>
#include <signal.h>

#include "tenax/train/trainer_internal.h"

namespace tenax::train::trainer_internal {
namespace {

// A launcher that never publishes the next epoch (it decided to restart every rank instead, or
// is gone) ends the wait; it kills the ranks itself long before in the first case.
constexpr double kMembershipWaitS = 300;

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

Status Trainer::CheckLiveLayout(const parallel::GroupOptions& go) {
  std::vector<std::string> needs;
  if (!ctx_.supervised || ctx_.heartbeat_dir.empty()) {
    needs.push_back("ranks started by tenax launch (it decides who is in the group)");
  }
  if (!ctx_.agent_socket.empty()) needs.push_back("one node (several nodes are not supported yet)");
  if (mesh_->degree(parallel::Axis::kReplicate) != env_.world) {
    needs.push_back(fmt::format(
        "every rank a whole replica: data_parallel_replicate = {} (the world) and the other "
        "degrees 1, not {}",
        env_.world, mesh_->Describe()));
  }
  if (go.backend != parallel::Backend::kGloo) {
    needs.push_back("CPU ranks (Gloo): NCCL groups are not re-formed yet");
  }
  if (spec_.moe.enabled()) needs.push_back("a dense model (MoE is not supported yet)");
  if (config_.checkpoint.async) needs.push_back("checkpoint.async = false");
  if (needs.empty()) return Status::Ok();
  return InvalidArgument(fmt::format(
      "resilience.mode = \"live\" needs {}; change that or set resilience.mode = \"restart\"",
      fmt::join(needs, "; ")));
}

Status Trainer::SetupLiveWorld(const parallel::GroupOptions& go) {
  // Gloo writes to its peers' sockets without MSG_NOSIGNAL from its own threads: a write to a
  // rank that just died must fail (and be recovered from), not kill this one with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  parallel::LiveGroup::Options o;
  o.store_dir = ctx_.heartbeat_dir;
  o.name = fmt::format("live-g{}", ctx_.generation);
  o.slot = env_.rank;
  o.world = env_.world;
  o.group = go;
  o.on_wait = [this] {
    if (beats_) beats_->Refresh();  // waiting for the others is not a hang
  };
  o.on_received = [this](size_t i) {
    if (faults_ && i == 0) faults_->DuringHeal(protocol::HealPoint::kTransfer);
  };
  live_ = std::make_unique<parallel::LiveGroup>(o);
  if (config_.checkpoint.memory_replicas && env_.rank == 0) {
    log::Info(
        "resilience.mode = \"live\": the live replicas hold the state, so no memory replicas");
  }
  if (!ctx_.live_join) {
    // The generation's first epoch, written by the launcher before it started the ranks.
    TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> m,
                           protocol::ReadLiveMembership(ctx_.heartbeat_dir));
    if (!m || m->generation != ctx_.generation || !m->Has(env_.rank)) {
      return Unavailable(fmt::format(
          "resilience.mode = \"live\": no membership for generation {} listing rank {} in {} "
          "(is this tenax launch older than the trainer?)",
          ctx_.generation, env_.rank, protocol::LiveMembershipPath(ctx_.heartbeat_dir)));
    }
    TENAX_RETURN_IF_ERROR(live_->Form(*m));
  }
  parallel::LiveGroup* live = live_.get();
  groups_ =
      parallel::ProcessGroups::Adopt(env_, live->NewProxy(), [live] { return live->NewProxy(); });
  return Status::Ok();
}

Result<protocol::LiveMembership> Trainer::WaitForLiveRecord(
    int after, const std::function<bool(const protocol::LiveMembership&)>& wanted) {
  while (true) {
    TENAX_ASSIGN_OR_RETURN(
        protocol::LiveMembership m,
        parallel::WaitForEpochAfter(ctx_.heartbeat_dir, after, kMembershipWaitS, [this] {
          if (beats_) beats_->Refresh();  // waiting is not a hang
        }));
    if (m.generation == ctx_.generation && wanted(m)) return m;
    after = m.epoch;
  }
}

Status Trainer::LiveStep(int64_t step) {
  if (faults_ && faults_->AwaitJoinDue(step)) {
    // --inject await-join: every rank listed again (members or joining) before this step.
    TENAX_RETURN_IF_ERROR(WaitForLiveRecord(-1, [](const protocol::LiveMembership& m) {
                            return m.Missing().empty();
                          }).status());
  }
  while (true) {
    try {
      // A switch to a newer epoch is followed by another round in it, as after a recovery and
      // as a replacement's first step begins, so every member issues the same collectives.
      Result<bool> switched = LiveQuorum();
      if (!switched.ok() && !live_->formed()) {
        // The newer epoch did not form (a member of it died first): as after a failed
        // collective, the launcher's next epoch decides.
        TENAX_RETURN_IF_ERROR(LiveRecover(step, switched.status().message()));
        continue;
      }
      if (!switched.ok()) return switched.status();
      if (*switched) continue;
      if (progress_.step >= step) return Status::Ok();  // the newest state was past it already
      return StepOnce(step);
    } catch (const std::exception& e) {
      if (!protocol::IsPeerLostError(e.what())) throw;
      TENAX_RETURN_IF_ERROR(LiveRecover(step, e.what()));
    }
  }
}

// Once per step, before its first collective: a newer epoch seen by any member (a replacement
// joining) is taken by all of them here, at the same step boundary.
Result<bool> Trainer::LiveQuorum() {
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> seen,
                         protocol::ReadLiveMembership(ctx_.heartbeat_dir));
  if (seen && seen->generation != ctx_.generation) seen.reset();
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> next, live_->NewestEpoch(seen));
  if (!next) return false;
  TENAX_RETURN_IF_ERROR(LiveSync(*next, /*has_state=*/true));
  return true;
}

Status Trainer::LiveRecover(int64_t step, const std::string& what) {
  const auto t0 = Clock::now();
  const int epoch = live_->membership().epoch;
  log::Warn(
      "step {}: a collective of live epoch {} failed ({}); waiting for the launcher's next "
      "membership",
      step, epoch, FirstLine(what));
  step_model_->AbandonStep();
  live_->Leave();
  if (beats_) {
    beats_->SetLiveEpoch(-1);
    beats_->Refresh();
  }
  // The next epoch of this generation; again if it does not form or its state transfer fails
  // (another member died meanwhile): the launcher publishes one more without that member.
  protocol::LiveMembership m;
  int after = epoch;
  while (true) {
    TENAX_ASSIGN_OR_RETURN(
        m, WaitForLiveRecord(after, [](const protocol::LiveMembership&) { return true; }));
    after = m.epoch;
    if (!m.Has(env_.rank)) {
      return Fail(FailureKind::kPeerLost,
                  PeerLost(fmt::format("live epoch {} leaves this rank out (the launcher judged "
                                       "it failed)",
                                       m.epoch)),
                  /*secondary=*/true);
    }
    Status st;
    try {
      st = LiveSync(m, /*has_state=*/true);
    } catch (const std::exception& e) {
      if (!protocol::IsPeerLostError(e.what())) throw;
      st = PeerLost(e.what());
    }
    if (st.ok()) break;
    if (live_->formed() && st.code() != StatusCode::kPeerLost) return st;
    log::Warn("live epoch {} did not form or sync ({}); waiting for the next one", m.epoch,
              FirstLine(st.message()));
    live_->Leave();
  }
  log::Info(
      "step {}: live epoch {} formed by ranks {} {:.3f}s after the failure; rank(s) {} "
      "missing, their samples run by the others",
      step, m.epoch, fmt::join(m.members, ","), Seconds(Clock::now() - t0),
      fmt::join(m.Missing(), ","));
  return Status::Ok();
}

// Forms `next` (this rank a member) and brings every member to the newest state: the progress
// counters, the loss-spike window, the parameters and the optimizer's moments, in this order.
Status Trainer::LiveSync(const protocol::LiveMembership& next, bool has_state) {
  TENAX_RETURN_IF_ERROR(live_->Form(next));
  TENAX_RETURN_IF_ERROR(LiveSyncState(next, has_state));
  if (beats_) beats_->SetLiveEpoch(next.epoch);  // the launcher announces joiners only then
  // The group's first member writes metrics.jsonl and TensorBoard (rank 0 unless it is lost): a
  // new lead opens them at the step the group holds, a former one lets go (nothing is pending
  // between steps).
  const bool lead = groups_->world().rank() == 0;
  if (!lead) reporter_out_.reset();
  if (lead && !reporter_out_) {
    TENAX_ASSIGN_OR_RETURN(reporter_out_,
                           Reporter::Open(run_dir_, config_.metrics, progress_.step));
    summary_.metrics_path = reporter_out_->metrics_path();
    summary_.tensorboard_dir = reporter_out_->tensorboard_dir();
  }
  return Status::Ok();
}

Status Trainer::LiveSyncState(const protocol::LiveMembership& next, bool has_state) {
  const std::deque<double>& history = spikes_->history();
  at::Tensor meta = at::tensor({progress_.step, progress_.data_position, progress_.tokens_seen,
                                optimizer_->step_count(), static_cast<int64_t>(history.size())},
                               at::kLong);
  at::Tensor window = at::zeros({std::max<int64_t>(1, t_.loss_spike_window)}, at::kDouble);
  for (size_t i = 0; i < history.size() && static_cast<int64_t>(i) < window.numel(); ++i) {
    window[static_cast<int64_t>(i)] = history[i];
  }
  std::vector<at::Tensor> state = {meta, window};
  for (auto& p : step_model_->optimizer_params()) state.push_back(p.tensor.detach());
  for (auto& s : optimizer_->StateTensors()) state.push_back(s.tensor.detach());
  TENAX_ASSIGN_OR_RETURN(parallel::LiveSyncReport r, live_->Sync(state, progress_.step, has_state));
  if (!r.transferred) return Status::Ok();
  const int64_t* v = meta.data_ptr<int64_t>();
  progress_.step = v[0];
  progress_.data_position = v[1];
  progress_.tokens_seen = v[2];
  TENAX_RETURN_IF_ERROR(optimizer_->LoadState(optimizer_->StateTensors(), v[3]));
  std::vector<double> losses(static_cast<size_t>(v[4]));
  for (size_t i = 0; i < losses.size(); ++i)
    losses[i] = window[static_cast<int64_t>(i)].item<double>();
  spikes_->Restore(losses);
  progress_.loss_history = losses;
  loader_->Seek(progress_.data_position);
  const bool received =
      std::find(r.receivers.begin(), r.receivers.end(), env_.rank) != r.receivers.end();
  if (received && beats_) beats_->SetHealed(r.source_slot, r.bytes, r.seconds);
  if (received || env_.rank == r.source_slot) {
    log::Info(
        "live epoch {}: rank(s) {} received step {}'s state from rank {}: {} bytes in "
        "{:.3f}s, crc32 checked",
        next.epoch, fmt::join(r.receivers, ","), r.step, r.source_slot, r.bytes, r.seconds);
  }
  return Status::Ok();
}

Status Trainer::LiveJoin() {
  // Listed as joining once the launcher has seen this process ready (its Ready beat).
  TENAX_ASSIGN_OR_RETURN(const protocol::LiveMembership m,
                         WaitForLiveRecord(-1, [this](const protocol::LiveMembership& r) {
                           return r.Joining(env_.rank);
                         }));
  if (faults_) faults_->DuringHeal(protocol::HealPoint::kForm);
  TENAX_RETURN_IF_ERROR(LiveSync(m, /*has_state=*/false));
  progress_.batch = batch_;
  TENAX_RETURN_IF_ERROR(checkpointer_->Start(progress_.step));
  beats_->Ready(progress_.step, 0, run_dir_);  // the launcher's record of the healing closes
  return Status::Ok();
}

}  // namespace tenax::train::trainer_internal
