// Silent-data-corruption checks' part of the Trainer (resilience.sdc_check_interval; the method
// and its limits are in sdc_check.h, the user's view in docs/resilience.md).
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "tenax/train/trainer_internal.h"

namespace tenax::train::trainer_internal {
namespace {

std::string HostName() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? host : "?";
}

// Every rank's digests, in rank order: [rank][k] for the k-th of `mine`.
std::vector<std::vector<ComputeDigest>> GatherDigests(parallel::Communicator& world,
                                                      const std::vector<ComputeDigest>& mine) {
  constexpr int kFields = 5;
  const int k = static_cast<int>(mine.size());
  at::Tensor t = at::empty({k * kFields}, at::kDouble);
  double* p = t.data_ptr<double>();
  for (int i = 0; i < k; ++i) {
    p[i * kFields] = mine[i].loss;
    p[i * kFields + 1] = static_cast<double>(mine[i].grads);
    p[i * kFields + 2] = static_cast<double>(mine[i].buckets);
    p[i * kFields + 3] = mine[i].sq;
    p[i * kFields + 4] = mine[i].proj;
  }
  const at::Tensor all = world.AllGather(t).contiguous();
  const double* a = all.data_ptr<double>();
  std::vector<std::vector<ComputeDigest>> out(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    for (int r = 0; r < world.size(); ++r) {
      const double* d = a + (r * k + i) * kFields;
      ComputeDigest digest{d[0], static_cast<uint32_t>(d[1]), static_cast<int64_t>(d[2])};
      digest.sq = d[3];
      digest.proj = d[4];
      out[i].push_back(digest);
    }
  }
  return out;
}

}  // namespace

Status Trainer::CheckSdcLayout(const parallel::GroupOptions& go) {
  if (config_.resilience.sdc_check_interval <= 0) {
    if (config_.resilience.sdc_tolerance > 0 && env_.rank == 0) {
      log::Warn(
          "resilience.sdc_tolerance = {:g} does nothing without checks: set "
          "resilience.sdc_check_interval",
          config_.resilience.sdc_tolerance);
    }
    return Status::Ok();
  }
  std::vector<std::string> needs;
  if (!env_.distributed() || mesh_->dp() < 3) {
    needs.push_back(fmt::format(
        "at least 3 data-parallel ranks (two to compare a step, a third to tell which one is "
        "wrong), not {} ({})",
        mesh_->dp(), env_.distributed() ? mesh_->Describe() : "one process"));
  }
  // Expert parallelism: an expert-parallel group's all-to-all mixes its ranks' samples, so the
  // group replays together, each rank the rank at its place in the group before (SdcRingsNow):
  // 3 groups, not 3 data-parallel ranks. Live, whole replicas replay, and a replica holds whole
  // groups (expert parallelism borrows from data_parallel_shard): 3 replicas, below.
  const int ep = mesh_->ep();
  if (ep > 1 && mesh_->dp() / ep < 3 && config_.resilience.mode != "live") {
    needs.push_back(fmt::format(
        "with expert parallelism, at least 3 expert-parallel groups (the ranks of a group "
        "exchange their tokens, so a group replays another group's step together): "
        "data-parallel ranks / parallelism.expert_parallel >= 3, not {} / {}",
        mesh_->dp(), ep));
  }
  if (mesh_->degree(parallel::Axis::kContext) != 1) {
    needs.push_back(
        "no context parallelism (a replay of one rank's part of a sequence needs its whole "
        "context-parallel group)");
  }
  if (go.backend != parallel::Backend::kGloo && config_.resilience.sdc_tolerance <= 0) {
    needs.push_back(
        "a tolerance on GPU ranks, whose kernels need not repeat bit for bit: "
        "resilience.sdc_tolerance > 0 (docs/resilience.md says how to choose it)");
  }
  const int replicas = mesh_->degree(parallel::Axis::kReplicate);
  if (config_.resilience.mode == "live" && replicas < 3 && env_.distributed() && mesh_->dp() >= 3) {
    // Live, a rank replays the rank at its place in the replica before its own (SdcRingsNow).
    needs.push_back(fmt::format(
        "under resilience.mode = \"live\", at least 3 replicas (each rank is checked against "
        "the rank at its place in another replica, and a third tells which one is wrong): "
        "parallelism.data_parallel_replicate >= 3, not {} ({})",
        replicas, mesh_->Describe()));
  }
  if (needs.empty()) return Status::Ok();
  return InvalidArgument(
      fmt::format("resilience.sdc_check_interval = {} needs {}; change that or set "
                  "resilience.sdc_check_interval = 0",
                  config_.resilience.sdc_check_interval, fmt::join(needs, "; ")));
}

bool Trainer::SdcDue(int64_t step) const {
  const int64_t n = config_.resilience.sdc_check_interval;
  if (n <= 0) return false;
  // The second step of the generation measures the cost at once (the first pays the warm-up); a
  // checkpoint step is checked before its save, so no committed checkpoint holds state a check
  // did not see.
  return step % n == 0 || step == sdc_first_step_ + 1 ||
         checkpointer_->Due(step, step == last_step_);
}

Trainer::SdcRings Trainer::SdcRingsNow() const {
  SdcRings r;
  if (live()) {
    // The epoch's members (the ranks of its replicas, in order); a ring for each place in a
    // replica (its shard, tensor and pipeline coordinates) over the replicas. All of a replica's
    // ranks replay at once, so the collectives inside it line up, and each replays the rank at
    // its own place, which holds the same parts of the model and gathers the same weights.
    r.ranks = live_->membership().members;
    r.rings.assign(static_cast<size_t>(live_replica_ranks_), {});
    for (int q : r.ranks) r.rings[static_cast<size_t>(q % live_replica_ranks_)].push_back(q);
    return r;
  }
  r.ranks.resize(static_cast<size_t>(env_.world));
  std::iota(r.ranks.begin(), r.ranks.end(), 0);
  // One ring per place in an expert-parallel group (all of it without expert parallelism) and
  // in a TP/PP group: rank = (group * ep + place in it) * copies + c.
  const int ep = mesh_->ep();
  r.rings = Rings(mesh_->dp() / ep, ep * (env_.world / mesh_->dp()));
  return r;
}

Result<ComputeDigest> Trainer::SdcReplay(int64_t step, int distance) {
  const auto t0 = Clock::now();
  // The samples the rank `distance` places before this one in its ring runs (live: in this
  // epoch, its own slot and its part of a lost replica's).
  const SdcRings who = SdcRingsNow();
  const std::vector<int>& ring = RingOf(who.rings, env_.rank);
  const std::vector<protocol::SlotPart> parts = DataPartsOf(RingAfter(ring, env_.rank, -distance));
  if (live() && distance == 1 &&
      static_cast<int>(ring.size()) < mesh_->degree(parallel::Axis::kReplicate) &&
      groups_->world().rank() == 0) {
    if (live_replica_ranks_ == 1) {
      log::Info(
          "step {}: silent-data-corruption check over the {} live members (ranks {}), each "
          "replaying the samples the member before it runs in this epoch",
          step, ring.size(), fmt::join(ring, ","));
    } else {
      log::Info(
          "step {}: silent-data-corruption check over the {} live replicas (ranks {} at rank "
          "{}'s place, and so on), each rank replaying the samples the rank at its place in the "
          "replica before it runs in this epoch",
          step, ring.size(), fmt::join(ring, ","), env_.rank);
    }
  }
  if (flight_) flight_->SetPhase(step, "sdc_replay");
  parallel_model_->SetReplay(true);
  sdc_->BeginPass(step);
  sdc_->Arm();
  step_model_->BeginStep();
  Result<double> loss = RunMicroBatches(parts);
  if (loss.ok()) step_model_->FinishStep();  // observes the unreduced gradients, drops them
  step_model_->AbandonStep();
  parallel_model_->SetReplay(false);
  // The loss as the replayed rank's own pass states it (ForwardBackwardMicroBatches).
  const double share = SlotsIn(parts);
  const ComputeDigest d =
      sdc_->Disarm(loss.ok() ? *loss / (static_cast<double>(batch_.accum) * share) : 0.0);
  TENAX_RETURN_IF_ERROR(loss.status());
  if (distance == 1) sdc_replay_s_ = Seconds(Clock::now() - t0);
  return d;
}

Status Trainer::SdcVerify(int64_t step, const ComputeDigest& own, const ComputeDigest& replay1) {
  const auto t0 = Clock::now();
  parallel::Communicator& world = groups_->world();
  const SdcRings who = SdcRingsNow();
  const std::vector<std::vector<int>>& rings = who.rings;
  // Gathered in the world group's order; indexed by rank below (live: the members' ranks).
  auto by_rank = [&](const std::vector<ComputeDigest>& in_order) {
    std::vector<ComputeDigest> out(static_cast<size_t>(env_.world));
    for (size_t i = 0; i < in_order.size(); ++i)
      out[static_cast<size_t>(who.ranks[i])] = in_order[i];
    return out;
  };
  const auto round1 = GatherDigests(world, {own, replay1});
  const std::vector<ComputeDigest> all_own = by_rank(round1[0]), all_replay1 = by_rank(round1[1]);
  const double tolerance = config_.resilience.sdc_tolerance;
  std::vector<int> mismatched;
  for (const auto& ring : rings) {
    for (int s : Mismatched(ring, all_own, all_replay1, tolerance)) mismatched.push_back(s);
  }
  if (tolerance > 0) SdcNoteAgreement(step, rings, all_own, all_replay1, mismatched);
  if (mismatched.empty()) {
    ++sdc_checks_;
    sdc_verify_s_ = Seconds(Clock::now() - t0);
    return Status::Ok();
  }
  // A third opinion on every pair: each rank replays the step of the rank two before it. This
  // step's own gradients are dropped first (it will not be applied), so the replay starts from
  // none, like the first one. A live epoch down to two members has no third rank: the mismatch
  // is found, the faulty one not named.
  step_model_->AbandonStep();
  std::vector<int> faulty;
  std::vector<std::string> reasons;
  std::vector<ComputeDigest> all_replay2(static_cast<size_t>(env_.world));
  const bool third = std::all_of(rings.begin(), rings.end(),
                                 [](const std::vector<int>& r) { return r.size() >= 3; });
  if (third) {
    TENAX_ASSIGN_OR_RETURN(const ComputeDigest replay2, SdcReplay(step, 2));
    all_replay2 = by_rank(GatherDigests(world, {replay2})[0]);
    for (const auto& ring : rings) {
      const SdcVerdict v = Judge(ring, all_own, all_replay1, all_replay2, tolerance);
      faulty.insert(faulty.end(), v.faulty.begin(), v.faulty.end());
      if (!v.reasoning.empty()) reasons.push_back(v.reasoning);
    }
  } else {
    reasons.push_back(fmt::format(
        "ranks {} disagree and only {} live replicas are left: no third one to replay the step",
        fmt::join(mismatched, ","), rings.front().size()));
  }
  std::sort(faulty.begin(), faulty.end());
  const std::string reasoning = fmt::format("{}", fmt::join(reasons, "; "));
  // Each named rank appends its own record (it knows its host), one after the other; the world
  // group's first rank writes the record of an undecided check.
  for (int r : faulty.empty() ? std::vector<int>{-1} : faulty) {
    if (env_.rank == (r >= 0 ? r : who.ranks.front())) {
      const int s = r >= 0 ? r : mismatched.front();
      const std::vector<int>& ring = RingOf(rings, s);
      const int n = static_cast<int>(ring.size());
      const int i = static_cast<int>(std::find(ring.begin(), ring.end(), s) - ring.begin());
      SdcRecord rec;
      rec.step = step;
      rec.generation = ctx_.generation;
      rec.rank = r;
      rec.host = r >= 0 ? HostName() : "";
      rec.mismatched = mismatched;
      rec.own = all_own[s].ToString();
      rec.replayed_by = ring[(i + 1) % n];
      rec.replay = all_replay1[rec.replayed_by].ToString();
      rec.third_by = third ? ring[(i + 2) % n] : -1;
      rec.third = third ? all_replay2[rec.third_by].ToString() : "";
      rec.reasoning = reasoning;
      Status st = AppendSdcRecord(run_dir_, rec);
      if (!st.ok()) log::Error("could not record the detection: {}", st.ToString());
    }
    world.Barrier();  // written before the next one reads the file, and before anyone exits
  }
  if (reporter_out_) reporter_out_->Finish();
  const bool named = std::find(faulty.begin(), faulty.end(), env_.rank) != faulty.end();
  const std::string what =
      !faulty.empty() ? fmt::format("rank {} computed wrong results (silent data corruption)",
                                    fmt::join(faulty, ", "))
                      : "the replays disagree but no rank could be named";
  // The named ranks say why; the others only that they stop with them.
  const bool explain = named || (faulty.empty() && world.rank() == 0);
  return Fail(FailureKind::kSilentCorruption,
              Unavailable(explain ? fmt::format("step {}: {}: {}; exiting so that the launcher "
                                                "quarantines the faulty slot and restarts from "
                                                "the newest checkpoint (every one was verified "
                                                "by a check)",
                                                step, what, reasoning)
                                  : fmt::format("step {}: {}; stopping with it", step, what)),
              /*secondary=*/!named);
}

void Trainer::SdcNoteAgreement(int64_t step, const std::vector<std::vector<int>>& rings,
                               const std::vector<ComputeDigest>& own,
                               const std::vector<ComputeDigest>& replay,
                               const std::vector<int>& mismatched) {
  // How far apart the pairs that agreed were: what the devices' own noise is, so that the
  // tolerance can be chosen from it (printed by rank 0 when it is a new high).
  double widest = 0;
  for (const auto& ring : rings) {
    const int n = static_cast<int>(ring.size());
    for (int i = 0; i < n; ++i) {
      const int s = ring[static_cast<size_t>(i)];
      if (std::find(mismatched.begin(), mismatched.end(), s) != mismatched.end()) continue;
      widest = std::max(widest, Disagreement(own[s], replay[ring[(i + 1) % n]]));
    }
  }
  if (widest <= sdc_widest_agreement_) return;
  sdc_widest_agreement_ = widest;
  if (groups_->world().rank() != 0) return;
  const double tolerance = config_.resilience.sdc_tolerance;
  if (widest > tolerance / 4) {
    log::Warn(
        "silent-data-corruption check at step {}: replays that agreed differed by up to {:.3g} "
        "of the gradients' norm, more than a quarter of resilience.sdc_tolerance = {:g}: noise "
        "this close to it may raise false alarms; raise the tolerance",
        step, widest, tolerance);
  } else {
    log::Info(
        "silent-data-corruption check at step {}: replays agreed within {:.3g} of the "
        "gradients' norm (resilience.sdc_tolerance = {:g})",
        step, widest, tolerance);
  }
}

void Trainer::SdcLogCost(int64_t step, double own_s) {
  if (groups_->world().rank() != 0) return;
  const int64_t n = config_.resilience.sdc_check_interval;
  // `own_s` (this rank's own pass, after the replay) holds the digests and their comparison too.
  const double digest_s = sdc_->digest_s();
  const double check_s = sdc_replay_s_ + digest_s + sdc_verify_s_;
  const double step_s = std::max(0.0, own_s - digest_s - sdc_verify_s_);
  const double per_step = check_s / static_cast<double>(n);
  log::Info(
      "silent-data-corruption checks (resilience.sdc_check_interval = {}): step {}'s check took "
      "{:.3f}s (replaying another rank's step {:.3f}s, digesting this rank's gradients {:.3f}s, "
      "gathering and comparing the digests {:.3f}s) against {:.3f}s for the step itself: about "
      "{:.1f}% more time at this interval, plus one replay per checkpoint",
      n, step, check_s, sdc_replay_s_, digest_s, sdc_verify_s_, step_s,
      step_s > 0 ? 100.0 * per_step / step_s : 0.0);
}

}  // namespace tenax::train::trainer_internal
