// Live recovery's part of the Trainer (resilience.mode = "live", docs/resilience.md): every rank
// is a data-parallel replica in a parallel::LiveGroup whose membership the launcher decides.
//   A member dies    the step's collectives throw on the others; they drop what the reduction
//                    summed, keep their own gradients of the step, form the launcher's next
//                    epoch without it and finish the step, running only its samples dealt among
//                    them (ForwardBackwardMicroBatches, LiveResumesKept), so the global batch and
//                    the sample order stay those of an unfailed run.
//   A replacement    started by the launcher in the lost rank's place (ctx_.live_join), it sets up
//                    without reading a checkpoint, says it is ready, and waits to be listed as
//                    joining; the members take it in at their next step boundary (LiveQuorum)
//                    and the newest state travels to it from a live member, checksummed.
//   HSDP, TP, PP    a replica is several ranks (data_parallel_shard x tensor, pipeline and
//                   context parallelism; consecutive). Its ranks are dropped and replaced
//                   together (the launcher kills the others of a failed rank's replica), so the
//                   groups inside a replica that survives (its own, FSDP's shard group, the TP,
//                   pipeline and context groups) are never re-formed: only the world's group and
//                   each position's group across replicas are. Every collective across replicas
//                   of a step comes after its last collective inside the replica (the pipeline's
//                   sends and its tied-embedding sum run in ForwardBackward; Fsdp::FinishStep
//                   finishes the reduce-scatters and the TP sums first), and the replica's ranks
//                   vote through the replica's own group on each phase of them
//                   (LiveAcrossReplicas): a replica commits a step, or takes a new epoch, on all
//                   of its ranks or on none, so no rank of it is ever a step ahead of another. A
//                   rank that received state in a phase its replica then failed makes the whole
//                   replica stateless (live_has_state_ = false) until a later sync.
// Several nodes: the groups meet in etcd (ctx_.live_store, given by the node agents).
//   Between steps   an evaluation's and a save's collectives across replicas are a phase too
//                   (LiveBetweenSteps): a member lost in them leaves the others to recover, and
//                   every member of the next epoch does them again (LiveStep: live_owed_).
// MoE          routing is counted within each replica (model/moe.h), so a replica's samples give
//              the same gradients on another; the sigmoid router's biases move by the whole
//              batch's counts, summed across replicas with the step's other statistics
//              (CollectMoeMetrics, inside the phase across replicas) and sent with the state.
// Non-goals for now: NCCL.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "tenax/core/check.h"
#include "tenax/core/metrics_writer.h"
#include "tenax/train/trainer_internal.h"

namespace tenax::train::trainer_internal {
namespace {

// A launcher that never publishes the next epoch (it decided to restart every rank instead, or
// is gone) ends the wait; it kills the ranks itself long before in the first case.
constexpr double kMembershipWaitS = 300;

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// Thrown out of a step, or its quorum, that did not go through on every rank of this replica: the
// step is run again in the launcher's next epoch (LiveStep catches it).
struct LiveStepAbandoned : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a replica's ranks learn from their vote (Trainer::ReplicaAgrees).
struct ReplicaVote {
  bool all_ok = true;        // every rank of the replica got through
  bool any_touched = false;  // some rank of it began receiving state meanwhile
};

}  // namespace

Status Trainer::CheckLiveLayout(const parallel::GroupOptions& go) {
  std::vector<std::string> needs;
  if (!ctx_.supervised || ctx_.heartbeat_dir.empty()) {
    needs.push_back("ranks started by tenax launch (it decides who is in the group)");
  }
  if (!ctx_.agent_socket.empty() && ctx_.live_store.empty()) {
    needs.push_back(
        "on several nodes, a store the nodes share (TENAX_LIVE_STORE), which this tenax launch "
        "does not give its ranks");
  }
  if (mesh_->degree(parallel::Axis::kReplicate) < 2) {
    needs.push_back(fmt::format(
        "data-parallel replicas that can outlive each other: data_parallel_replicate >= 2, not {}",
        mesh_->Describe()));
  }
  if (go.backend != parallel::Backend::kGloo) {
    needs.push_back("CPU ranks (Gloo): NCCL groups are not re-formed yet");
  }
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
  const parallel::Mesh& mesh = *mesh_;
  live_replica_ranks_ = env_.world / mesh.degree(parallel::Axis::kReplicate);
  const int replica = env_.rank / live_replica_ranks_;
  const int position = env_.rank % live_replica_ranks_;
  // ReplicaView and the launcher count on it: replicate is the outermost axis, so a replica's
  // ranks are consecutive.
  TENAX_CHECK(mesh.coord(env_.rank, parallel::Axis::kReplicate) == replica);
  parallel::LiveGroup::Options o;
  o.store_dir = ctx_.heartbeat_dir;
  o.name = fmt::format("live-g{}", ctx_.generation);
  o.slot = env_.rank;
  o.world = env_.world;
  o.group = go;
  o.secret = ctx_.job_secret;
  o.on_wait = [this] {
    if (beats_) beats_->Refresh();  // waiting for the others is not a hang
  };
  o.on_received = [this](size_t i) {
    if (faults_ && i == 0) faults_->DuringHeal(protocol::HealPoint::kTransfer);
  };
  if (!ctx_.live_store.empty()) {
    // Several nodes: the groups meet in the agents' etcd.
    etcd::EtcdOptions e;
    e.endpoints = ctx_.live_store.endpoints;
    e.ca_file = ctx_.live_store.ca_file;
    e.cert_file = ctx_.live_store.cert_file;
    e.key_file = ctx_.live_store.key_file;
    o.etcd = e;
    o.etcd_prefix = ctx_.live_store.prefix;
  }
  live_ = std::make_unique<parallel::LiveGroup>(o);
  // The groups inside this replica (the replica's own; FSDP's shard group, the tensor, pipeline
  // and context-parallel ones), formed once by this incarnation of its ranks (a replacement's
  // under TENAX_LIVE_JOIN's number) through stores of their own: a failure inside the replica
  // ends all of them.
  const int first = replica * live_replica_ranks_;
  const std::string inside_name =
      fmt::format("live-g{}-replica{}-i{}", ctx_.generation, replica, ctx_.live_incarnation);
  auto connect_inside =
      [this, inside_name, etcd = o.etcd, prefix = o.etcd_prefix, go](
          const std::string& group,
          const std::vector<int>& ranks) -> Result<std::unique_ptr<parallel::Communicator>> {
    // A store of its own per group: named by the group's kind (FSDP's shard group and the
    // context-parallel one may have the same ranks) and its first rank (a replica holds several
    // groups of a kind when it is split two ways, e.g. HSDP's shard groups beside TP's).
    const std::string name = fmt::format("{}-{}-r{}", inside_name, group, ranks.front());
    const int index =
        static_cast<int>(std::find(ranks.begin(), ranks.end(), env_.rank) - ranks.begin());
    const int size = static_cast<int>(ranks.size());
    if (etcd) return parallel::ConnectEtcdStoreGroup(*etcd, prefix + name + "/", index, size, go);
    return parallel::ConnectFileStoreGroup(ctx_.heartbeat_dir + "/" + name, index, size, go);
  };
  if (live_replica_ranks_ > 1) {
    parallel::LiveGroup::Options r = o;
    r.name = fmt::format("live-g{}-s{}", ctx_.generation, position);
    r.slot = replica;
    r.world = env_.world / live_replica_ranks_;
    r.ranks_per_replica = live_replica_ranks_;
    r.position = position;
    live_replicas_ = std::make_unique<parallel::LiveGroup>(r);
    std::vector<int> all(static_cast<size_t>(live_replica_ranks_));
    std::iota(all.begin(), all.end(), first);
    TENAX_ASSIGN_OR_RETURN(live_inside_, connect_inside("votes", all));
  }
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
    TENAX_RETURN_IF_ERROR(LiveForm(*m));
  }
  groups_ = parallel::ProcessGroups::Adopt(
      env_, live_->NewProxy(),
      [this, first, connect_inside, across = mesh.GroupOf(env_.rank, parallel::Axis::kReplicate)](
          const std::string& name,
          const std::vector<int>& ranks) -> Result<std::unique_ptr<parallel::Communicator>> {
        if (static_cast<int>(ranks.size()) == env_.world) return live_->NewProxy();
        if (live_replicas_ && ranks == across) return live_replicas_->NewProxy();
        const bool inside = std::all_of(ranks.begin(), ranks.end(), [&](int r) {
          return r >= first && r < first + live_replica_ranks_;
        });
        if (inside) return connect_inside(name, ranks);
        return std::unique_ptr<parallel::Communicator>();
      });
  return Status::Ok();
}

protocol::LiveMembership Trainer::LiveReplicaView(const protocol::LiveMembership& m) const {
  return protocol::ReplicaView(m, live_replica_ranks_, env_.rank % live_replica_ranks_);
}

int Trainer::LiveRankOf(int replica) const {
  return replica * live_replica_ranks_ + env_.rank % live_replica_ranks_;
}

Status Trainer::LiveForm(const protocol::LiveMembership& m) {
  TENAX_RETURN_IF_ERROR(live_->Form(m));
  if (live_replicas_) {
    if (Status st = live_replicas_->Form(LiveReplicaView(m)); !st.ok()) {
      live_->Leave();
      return st;
    }
  }
  return Status::Ok();
}

void Trainer::LiveLeave() {
  live_->Leave();
  if (live_replicas_) live_replicas_->Leave();
}

bool Trainer::LiveFormed() const {
  return live_->formed() && (!live_replicas_ || live_replicas_->formed());
}

bool Trainer::ReplicaAgrees(bool ok) {
  // Since the phase began (live_touched_ holds the count then).
  ReplicaVote v{ok, LiveReplicas().receives_begun() != live_touched_};
  if (live_replica_ranks_ > 1) {
    // Through the replica's own group, which a failure across replicas leaves intact.
    at::Tensor t =
        at::tensor({ok ? int64_t{0} : int64_t{1}, v.any_touched ? int64_t{1} : 0}, at::kLong);
    live_inside_->AllReduceSum(t);
    v.all_ok = t[0].item<int64_t>() == 0;
    v.any_touched = t[1].item<int64_t>() > 0;
  }
  if (v.all_ok) {
    live_has_state_ = true;
  } else if (v.any_touched) {
    // Some shard of this replica may hold a newer (or half-received) step than another: the
    // replica offers no state until a sync gives all of its ranks the same step.
    live_has_state_ = false;
  }
  return v.all_ok;
}

Result<protocol::LiveMembership> Trainer::AgreeInReplica(const protocol::LiveMembership& m) {
  if (live_replica_ranks_ == 1) return m;
  try {
    return parallel::BroadcastMembership(*live_inside_, m, 0);
  } catch (const std::exception& e) {
    if (!protocol::IsPeerLostError(e.what())) throw;
    return PeerLost(fmt::format("another rank of this replica is lost ({})", FirstLine(e.what())));
  }
}

void Trainer::LiveAcrossReplicas(const std::function<std::string()>& phase) {
  live_touched_ = LiveReplicas().receives_begun();
  std::string lost;
  try {
    lost = phase();
  } catch (const std::exception& e) {
    if (!protocol::IsPeerLostError(e.what())) throw;
    lost = e.what();
  }
  // Leaving first closes this rank's connections across replicas: its shard peers still blocked
  // in a collective across replicas fail now and come to the vote, instead of at a timeout.
  if (!lost.empty()) LiveLeave();
  if (ReplicaAgrees(lost.empty())) return;
  if (lost.empty()) {
    LiveLeave();
    lost = "another rank of this replica lost a peer in a collective across replicas";
  }
  throw LiveStepAbandoned(lost);
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
  // A rank behind the others at a failure took this step's quorum round already (below).
  bool quorum_taken = std::exchange(live_quorum_taken_, false);
  live_rerun_ = false;
  live_step_received_ = false;
  while (true) {
    try {
      // A switch to a newer epoch is followed by another round in it, as after a recovery and
      // as a replacement's first step begins, so every member issues the same collectives.
      Result<bool> switched = false;
      int64_t owed = live_owed_;
      if (!std::exchange(quorum_taken, false)) {
        LiveAcrossReplicas([&] {
          switched = LiveQuorum(&owed);
          // The newer epoch did not form (a member of it died first): as after a failed
          // collective, the launcher's next epoch decides.
          return !switched.ok() && !LiveFormed() ? switched.status().message() : std::string();
        });
      }
      if (!switched.ok()) return switched.status();
      if (*switched) continue;
      if (owed >= 0) {
        // A member was lost in step `owed`'s evaluation or save: every member holds that step's
        // state now (a lagging one received it) and does them again, then rounds again.
        if (progress_.step != owed) {
          return Internal(fmt::format(
              "live: step {}'s evaluation and save are owed, but this rank holds step {}", owed,
              progress_.step));
        }
        live_owed_ = owed;
        Status st;
        LiveAcrossReplicas([&] {
          st = BetweenSteps(owed, /*again=*/true);
          return st.code() == StatusCode::kPeerLost ? st.message() : std::string();
        });
        TENAX_RETURN_IF_ERROR(st);
        live_owed_ = -1;
        log::Info("step {}: evaluated and saved again after the member lost in them", owed);
        continue;
      }
      if (step > last_step_) return Status::Ok();  // the run's last round (Run)
      if (progress_.step >= step) {
        // The newest state was past this step: this rank failed in it while others had finished
        // it and failed in the next one. They round the next step's quorum once after their
        // recovery, as this rank just did: that round is the next step's here too, and what they
        // did after this step (an evaluation, a save) is not done again.
        log::Info("step {}: the others had finished it: this rank goes on from their state", step);
        live_step_received_ = true;
        live_quorum_taken_ = true;
        return Status::Ok();
      }
      return StepOnce(step);
    } catch (const LiveStepAbandoned& e) {
      TENAX_RETURN_IF_ERROR(LiveRecover(step, e.what()));
    } catch (const std::exception& e) {
      if (!protocol::IsPeerLostError(e.what())) throw;
      TENAX_RETURN_IF_ERROR(LiveRecover(step, e.what()));
    }
  }
}

// Once per step, before its first collective: a newer epoch seen by any member (a replacement
// joining) is taken by all of them here, at the same step boundary.
Result<bool> Trainer::LiveQuorum(int64_t* owed) {
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> seen,
                         protocol::ReadLiveMembership(ctx_.heartbeat_dir));
  if (seen && seen->generation != ctx_.generation) seen.reset();
  TENAX_ASSIGN_OR_RETURN(std::optional<protocol::LiveMembership> next,
                         live_->NewestEpoch(seen, owed));
  if (!next) return false;
  TENAX_RETURN_IF_ERROR(LiveSync(*next, live_has_state_));
  return true;
}

Status Trainer::LiveBetweenSteps(int64_t step) {
  const FailureKind kind = failure_kind_;
  const bool secondary = failure_secondary_;
  Status st;
  std::string lost;
  try {
    LiveAcrossReplicas([&] {
      st = BetweenSteps(step);
      return st.code() == StatusCode::kPeerLost ? st.message() : std::string();
    });
    return st;
  } catch (const LiveStepAbandoned& e) {
    lost = e.what();
  } catch (const std::exception& e) {
    if (!protocol::IsPeerLostError(e.what())) throw;
    lost = e.what();
  }
  // The step itself is done on every member; they owe its evaluation and save (LiveStep).
  live_owed_ = step;
  failure_kind_ = kind;  // a save's peer-lost verdict (Fail) was recovered from
  failure_secondary_ = secondary;
  return LiveRecover(step, lost);
}

Status Trainer::LiveRecover(int64_t step, const std::string& what) {
  const auto t0 = Clock::now();
  const int epoch = live_->membership().epoch;
  log::Warn(
      "step {}: a collective of live epoch {} failed ({}); waiting for the launcher's next "
      "membership",
      step, epoch, FirstLine(what));
  // This rank's own gradients of the step are kept for its run again (not on a step checked for
  // silent data corruption: its replay comes first).
  if (!step_model_->AbandonStep(/*keep=*/!SdcDue(step))) live_kept_.from_step = -1;
  LiveLeave();
  // What the rank waited for in the groups it left will never end: not a hang to time out on
  // (parallelism.collective_timeout_s), nor what a later hang's analysis should see it wait for.
  if (flight_) flight_->AbandonPending();
  if (beats_) {
    beats_->SetLiveEpoch(-1);
    beats_->Refresh();
  }
  auto replica_lost = [&](const std::string& why) {
    return Fail(FailureKind::kPeerLost, PeerLost(why), /*secondary=*/true);
  };
  // The next epoch of this generation; again if it does not form or its state transfer fails
  // (another member died meanwhile): the launcher publishes one more without that member.
  protocol::LiveMembership m;
  int after = epoch;
  while (true) {
    TENAX_ASSIGN_OR_RETURN(
        m, WaitForLiveRecord(after, [](const protocol::LiveMembership&) { return true; }));
    // HSDP: every rank of this replica attempts the same epoch.
    Result<protocol::LiveMembership> agreed = AgreeInReplica(m);
    if (!agreed.ok()) return replica_lost(agreed.status().message());
    m = *std::move(agreed);
    after = m.epoch;
    if (!m.Has(env_.rank)) {
      return replica_lost(fmt::format(
          "live epoch {} leaves this rank out (the launcher judged it, or its replica, failed)",
          m.epoch));
    }
    Status st;
    live_touched_ = LiveReplicas().receives_begun();
    try {
      st = LiveSync(m, live_has_state_);
    } catch (const std::exception& e) {
      if (!protocol::IsPeerLostError(e.what())) throw;
      st = PeerLost(e.what());
    }
    if (!st.ok() && LiveFormed() && st.code() != StatusCode::kPeerLost) return st;
    if (!st.ok()) LiveLeave();
    bool all = false;
    try {
      all = ReplicaAgrees(st.ok());
    } catch (const std::exception& e) {
      if (!protocol::IsPeerLostError(e.what())) throw;
      return replica_lost(
          fmt::format("another rank of this replica is lost ({})", FirstLine(e.what())));
    }
    if (all) break;
    if (st.ok()) st = PeerLost("another rank of this replica did not get through it");
    log::Warn("live epoch {} did not form or sync ({}); waiting for the next one", m.epoch,
              FirstLine(st.message()));
    LiveLeave();
  }
  log::Info(
      "step {}: live epoch {} formed by ranks {} {:.3f}s after the failure; rank(s) {} "
      "missing, their samples run by the others",
      step, m.epoch, fmt::join(m.members, ","), Seconds(Clock::now() - t0),
      fmt::join(m.Missing(), ","));
  live_rerun_ = true;  // on every rank of this replica (it agreed above)
  return Status::Ok();
}

bool Trainer::LiveResumesKept(const std::vector<protocol::SlotPart>& parts) {
  if (!std::exchange(live_rerun_, false)) return false;
  const LiveKept& k = live_kept_;
  bool usable = k.from_step == progress_.step && k.receives == LiveReplicas().receives_begun() &&
                protocol::PartsInclude(parts, k.parts);
  if (live_replica_ranks_ > 1) {
    // Every rank of the replica runs the same micro-batches: their gathers are collectives of
    // the replica's groups.
    at::Tensor t = at::tensor({usable ? int64_t{0} : int64_t{1}}, at::kLong);
    live_inside_->AllReduceSum(t);
    usable = t.item<int64_t>() == 0;
  }
  if (!usable) {
    step_model_->ForgetKeptGradients();
    live_kept_.from_step = -1;
  }
  return usable;
}

// Forms `next` (this rank a member) and brings every member to the newest state: the progress
// counters, the loss-spike window, the parameters and the optimizer's moments, in this order.
Status Trainer::LiveSync(const protocol::LiveMembership& next, bool has_state) {
  TENAX_RETURN_IF_ERROR(LiveForm(next));
  const parallel::LiveGroup::FormTimes& f = live_->last_form();
  log::Info(
      "live epoch {}: formed in {:.3f}s ({:.3f}s for every member's check-in, {:.3f}s connecting)",
      next.epoch, f.check_in_s + f.connect_s, f.check_in_s, f.connect_s);
  TENAX_RETURN_IF_ERROR(LiveSyncState(next, has_state));
  if (beats_) {
    // The launcher announces joiners only once every member beats in the current epoch: said
    // now, not with the step's next beat, so a replacement ready meanwhile is taken in at this
    // step's end rather than the next one's.
    beats_->SetLiveEpoch(next.epoch);
    beats_->Refresh();
  }
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
    // The former lead may have been lost in the step whose state the group holds, before its
    // line: written here, from the state (every member's line of a step is the same but for
    // its timing).
    const int64_t held = progress_.step;
    if (held > 0 && last_metrics_.step == held && LogsStep(held)) {
      TENAX_ASSIGN_OR_RETURN(const int64_t logged,
                             LastStepWith(reporter_out_->metrics_path(), "loss"));
      if (logged < held) TENAX_RETURN_IF_ERROR(reporter_out_->LogStep(last_metrics_));
    }
  }
  return Status::Ok();
}

Status Trainer::LiveSyncState(const protocol::LiveMembership& next, bool has_state) {
  const std::deque<double>& history = spikes_->history();
  at::Tensor meta =
      at::tensor({progress_.step, progress_.data_position, progress_.tokens_seen,
                  optimizer_->step_count(), static_cast<int64_t>(history.size()), sdc_first_step_},
                 at::kLong);
  at::Tensor window = at::zeros({std::max<int64_t>(1, t_.loss_spike_window)}, at::kDouble);
  for (size_t i = 0; i < history.size() && static_cast<int64_t>(i) < window.numel(); ++i) {
    window[static_cast<int64_t>(i)] = history[i];
  }
  // The newest step's metrics line, for a new lead that did not run that step (LiveSync).
  const StepMetrics& l = last_metrics_;
  at::Tensor line =
      at::tensor({static_cast<double>(l.step), l.loss, l.lr, l.grad_norm, l.tokens_per_s,
                  l.flops_per_s, static_cast<double>(l.mem_peak_bytes), l.step_time_s,
                  static_cast<double>(l.tokens_seen), l.eta_s},
                 at::kDouble);
  std::vector<at::Tensor> state = {meta, window, line};
  // The sigmoid router's selection biases (the same on every holder of a layer; a position holds
  // the same layers in every replica).
  model::MoeState* moe = step_model_->moe_state();
  at::Tensor bias = moe != nullptr && moe->has_bias() ? moe->BiasTable() : at::Tensor();
  if (bias.defined()) state.push_back(bias);
  for (auto& p : step_model_->optimizer_params()) state.push_back(p.tensor.detach());
  for (auto& s : optimizer_->StateTensors()) state.push_back(s.tensor.detach());
  TENAX_ASSIGN_OR_RETURN(parallel::LiveSyncReport r,
                         LiveReplicas().Sync(state, progress_.step, has_state));
  if (!r.transferred) return Status::Ok();
  const int64_t* v = meta.data_ptr<int64_t>();
  progress_.step = v[0];
  progress_.data_position = v[1];
  progress_.tokens_seen = v[2];
  sdc_first_step_ = v[5];  // the step every member checks for the check's cost (SdcDue)
  TENAX_RETURN_IF_ERROR(optimizer_->LoadState(optimizer_->StateTensors(), v[3]));
  if (bias.defined()) moe->SetBiasTable(bias);
  std::vector<double> losses(static_cast<size_t>(v[4]));
  for (size_t i = 0; i < losses.size(); ++i)
    losses[i] = window[static_cast<int64_t>(i)].item<double>();
  spikes_->Restore(losses);
  progress_.loss_history = losses;
  const double* d = line.data_ptr<double>();
  last_metrics_ = StepMetrics{};
  last_metrics_.step = static_cast<int64_t>(d[0]);
  last_metrics_.total_steps = t_.steps;
  last_metrics_.loss = d[1];
  last_metrics_.lr = d[2];
  last_metrics_.grad_norm = d[3];
  last_metrics_.tokens_per_s = d[4];
  last_metrics_.flops_per_s = d[5];
  last_metrics_.mem_peak_bytes = static_cast<int64_t>(d[6]);
  last_metrics_.step_time_s = d[7];
  last_metrics_.tokens_seen = static_cast<int64_t>(d[8]);
  last_metrics_.eta_s = d[9];
  loader_->Seek(progress_.data_position);
  // Slots of LiveReplicas() are replicas: named by their rank at this position.
  std::vector<int> receivers;
  for (int q : r.receivers) receivers.push_back(LiveRankOf(q));
  const int source = LiveRankOf(r.source_slot);
  const bool received = std::find(receivers.begin(), receivers.end(), env_.rank) != receivers.end();
  if (received) live_heal_ = LiveHeal{source, r.bytes, r.seconds, r.step};
  if (received || env_.rank == source) {
    log::Info(
        "live epoch {}: rank(s) {} received step {}'s state from rank {}: {} bytes in "
        "{:.3f}s, crc32c checked",
        next.epoch, fmt::join(receivers, ","), r.step, source, r.bytes, r.seconds);
  }
  return Status::Ok();
}

Status Trainer::LiveWarmUp() {
  const char* skip = nullptr;
  if (step_model_->moe_state() != nullptr) {
    skip = "a mixture of experts";  // the zeros' routing would count in the router's loads
  } else if (mesh_->degree(parallel::Axis::kPipeline) > 1) {
    skip = "pipeline stages";  // one row is not a schedule of micro-batches over the stages
  }
  if (skip != nullptr) {
    log::Info("live replacement: no warm-up step ({})", skip);
    if (faults_) faults_->DuringHeal(protocol::HealPoint::kWarmUp);
    return Status::Ok();
  }
  const auto t0 = Clock::now();
  // Its collectives across replicas in groups of this rank alone; those inside a replica of
  // several ranks with its partners, which are replacements warming up too (a failure inside a
  // replica replaces all of its ranks).
  TENAX_RETURN_IF_ERROR(live_->FormAlone());
  if (live_replicas_) {
    if (Status st = live_replicas_->FormAlone(); !st.ok()) {
      live_->Leave();
      return st;
    }
  }
  // The parameters are zeros until the transfer (Llama::Init::kOverwritten): the step computes
  // what a real one does, and what it leaves (gradients, reductions) is dropped below. One row of
  // an eighth of the sequence: what a first step is slow at is model-sized (the weights'
  // gathers, the gradients, their reductions), the same whatever the tokens, and the warm-up is
  // on the others' path when it ends after their step does (29M shape, HSDP 4x2, a quarter core
  // a rank: 3.2 s for a whole row, 2.1-2.5 s for an eighth; the first forward and backward after
  // an eighth was up to 0.2 s over the others', after a whole row up to 0.14 s: less than the
  // wait it saves). Rounded to what sequence and context parallelism split.
  const int64_t tp = mesh_->degree(parallel::Axis::kTensor);
  const int64_t cp = mesh_->degree(parallel::Axis::kContext);
  const int64_t granule = cp > 1 ? 2 * cp * tp : tp;
  const int64_t tokens = std::max(granule, t_.seq_len / 8 / granule * granule);
  const at::Tensor zeros =
      at::zeros({1, tokens}, at::TensorOptions(at::kLong).device(device_.device));
  // --inject heal-fail:...:at=warmup: the other new ranks of a replica wait for this one in the
  // step's first collective inside the replica.
  if (faults_) faults_->DuringHeal(protocol::HealPoint::kWarmUp);
  step_model_->BeginStep();
  Result<double> loss = step_model_->ForwardBackward(zeros, zeros, /*micro_batches=*/1);
  if (loss.ok()) step_model_->FinishStep();
  step_model_->ZeroGrad();
  LiveLeave();
  TENAX_RETURN_IF_ERROR(loss.status());
  log::Info(
      "live replacement: warmed up in {:.2f}s (the forward and backward of one row of {} zeros, "
      "{})",
      Seconds(Clock::now() - t0), tokens,
      live_replica_ranks_ > 1 ? "with the other new ranks of its replica" : "alone");
  return Status::Ok();
}

Status Trainer::LiveJoin() {
  TENAX_RETURN_IF_ERROR(LiveWarmUp());
  // Listed as joining once the launcher has seen this process ready (its Ready beat).
  TENAX_ASSIGN_OR_RETURN(const protocol::LiveMembership m,
                         WaitForLiveRecord(-1, [this](const protocol::LiveMembership& r) {
                           return r.Joining(env_.rank);
                         }));
  // HSDP: the replica's new ranks take the same epoch (the one its first rank read).
  TENAX_ASSIGN_OR_RETURN(const protocol::LiveMembership agreed, AgreeInReplica(m));
  if (!agreed.Joining(env_.rank)) {
    return PeerLost(fmt::format(
        "live epoch {} (read by this replica's first rank) does not list rank {} as joining",
        agreed.epoch, env_.rank));
  }
  if (faults_) faults_->DuringHeal(protocol::HealPoint::kForm);
  live_has_state_ = false;
  live_touched_ = LiveReplicas().receives_begun();
  live_heal_ = LiveHeal{};
  Status st = LiveSync(agreed, /*has_state=*/false);
  if (!ReplicaAgrees(st.ok())) {
    return st.ok() ? PeerLost("another rank of this replica did not heal") : st;
  }
  progress_.batch = batch_;
  TENAX_RETURN_IF_ERROR(checkpointer_->Start(progress_.step));
  // The launcher's record of the healing closes with this beat: not with LiveSync's, which says
  // the epoch before the replica agreed and with the step of this process's start-up.
  beats_->SetHealed(live_heal_.from, live_heal_.bytes, live_heal_.seconds, live_heal_.step);
  beats_->Ready(progress_.step, 0, run_dir_);
  return Status::Ok();
}

}  // namespace tenax::train::trainer_internal
