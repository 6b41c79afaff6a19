// Live recovery (resilience.mode = "live", docs/resilience.md): the launcher is the one authority
// on who is in the ranks' data-parallel group (protocol/live_membership.h); on several nodes the
// job's record in etcd is, each node's supervisor changing it through its LiveLink.
//   Start      every rank is a member of the generation's epoch 0, written before any starts.
//   Failure    a rank whose process ended is dropped: the next epoch lists the others, who form
//              it and train on with its samples (train/trainer_live.cc); no other process stops.
//              A replacement process takes its place at once, told to join (TENAX_LIVE_JOIN).
//   Joining    once the replacement has set up (its ready beat), the next epoch lists it as
//              joining; the members take it in at a step boundary and send it their state.
//   Healed     its first beat in that epoch with the bytes it received closes the record in
//              goodput.json `live_recoveries`.
//   HSDP       a replica is several ranks (JobInfo::live_replica_ranks, consecutive): a failure
//              of one drops its whole replica from the membership, the launcher kills the
//              replica's other ranks (Generation::retiring: their end is no failure of their
//              own), every one of them gets a replacement of the replica's next incarnation
//              (TENAX_LIVE_JOIN=K: its new ranks form the replica's own group under K), and the
//              replica joins only once all of them are ready.
// Every failure counts against the restart budget (restart_policy.h), so a rank that fails
// again and again ends the job as restarts would. A failure that is not a rank process ending
// (a hang without a named culprit, a straggler, every rank at once), or that comes while a
// surviving member is still in its setup, still ends the generation and restarts every rank; on
// several nodes so does a lost node. A hang with a named culprit: that rank is killed alone
// (LiveKillHung; on several nodes by its own node, the others waiting, LiveAwaitRemoteHang) and
// recovered as a crash; so are the ranks that alone left no flight record (frozen), one of each
// replica, all at once, when a replica without any is left to train on.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "tenax/core/log.h"
#include "tenax/launch/supervisor.h"
#include "tenax/protocol/live_membership.h"

namespace tenax::launch {

bool Supervisor::LivePublish(int gen, const std::vector<int>& leave, const std::vector<int>& join) {
  const int seen = g_.live.membership.epoch;
  auto any_member = [&](const rdzv::LiveRecord& r) {
    return std::any_of(leave.begin(), leave.end(), [&](int x) { return r.membership.Has(x); });
  };
  bool made = false;  // whether the change's last answer (the one published) was a record
  const LiveLink::Change change =
      [&](const std::optional<rdzv::LiveRecord>& now) -> std::optional<rdzv::LiveRecord> {
    // A drop applies to the newest record (unless a repeated request already made it); a join
    // only to the one this node judged it on.
    made = now && (join.empty() ? any_member(*now)
                                : now->membership.epoch == seen && now->healing.empty());
    if (!made) return std::nullopt;
    return rdzv::NextLiveEpoch(*now, leave, join);
  };
  if (live_link_ == nullptr) {
    std::optional<rdzv::LiveRecord> next = change(g_.live);
    if (!next) return false;
    g_.live = std::move(*next);
    if (Status st = protocol::WriteLiveMembership(hb_dir_, g_.live.membership); !st.ok()) {
      // The ranks wait for it; without it they end (and the generation with them).
      log::Error("launch: cannot write the live membership: {}", st.message());
    }
    return true;
  }
  Result<std::optional<rdzv::LiveRecord>> now = live_link_->Update(gen, change);
  if (!now.ok()) {
    log::Error("launch: cannot publish the live membership in etcd: {}", now.status().message());
    return false;
  }
  if (*now) g_.live = **now;
  return join.empty() ? *now && !any_member(**now) : made;
}

void Supervisor::LiveStart(int gen) {
  const int world = o_.nproc_per_node * nnodes_;
  rdzv::LiveRecord first;
  first.membership.generation = gen;
  first.membership.world = world;
  for (int rank = 0; rank < world; ++rank) first.membership.members.push_back(rank);
  g_.incarnation.assign(static_cast<size_t>(world / job_.live_replica_ranks), 0);
  g_.live = first;
  if (live_link_ == nullptr) {
    if (Status st = protocol::WriteLiveMembership(hb_dir_, first.membership); !st.ok()) {
      log::Error("launch: cannot write the live membership: {}", st.message());
    }
    return;
  }
  // Every node puts the same first record; whoever is first, the others read it.
  Result<std::optional<rdzv::LiveRecord>> now = live_link_->Update(
      gen, [&](const std::optional<rdzv::LiveRecord>& was) -> std::optional<rdzv::LiveRecord> {
        if (was) return std::nullopt;
        return first;
      });
  if (!now.ok()) {
    log::Error("launch: cannot publish the live membership in etcd: {}", now.status().message());
  } else if (*now) {
    g_.live = **now;
  }
}

int Supervisor::LiveVacancyIncarnation(const GenerationPlan& plan) {
  // Apart from every incarnation the lost node, or a spare that took its place before, gave its
  // replicas (they count from 1 there, from 1000 after the first turn...): the groups inside a
  // replica meet under a name that holds it.
  const int incarnation = 1000 * (plan.live_vacancy->turn + 1);
  const int k = job_.live_replica_ranks;
  for (int local = 0; local < o_.nproc_per_node; local += k) {
    g_.incarnation[static_cast<size_t>(ReplicaOf(Rank(local)))] = incarnation;
  }
  log::Info(
      "launch: generation {}: this node takes the place of node {} (lost at step {}): its ranks "
      "start as replacements and join the live members {}",
      plan.generation, plan.node_rank, plan.live_vacancy->step,
      fmt::join(plan.live_vacancy->members, ","));
  return incarnation;
}

void Supervisor::LiveFillVacancy(const GenerationPlan& plan, int local, pid_t pid) {
  const rdzv::LiveVacancy& v = *plan.live_vacancy;
  const int rank = Rank(local);
  // On this launch's clock (the vacancy's time is the wall clock of the node that saw it).
  const double lost_s = v.time_unix - t0_wall_;
  Generation::Replacement r;
  r.local = local;
  r.incarnation = g_.incarnation[static_cast<size_t>(ReplicaOf(rank))];
  r.entry = {{"time_s", lost_s},
             {"generation", plan.generation},
             {"rank", rank},
             {"slot", slots_->SlotOf(local)},
             {"host", host_},
             {"node", plan.node_rank},
             {"kind", "node-lost"},  // as the nodes' failure reports name it (rendezvous.h)
             {"cause", fmt::format("node {} ({}) was lost: its etcd lease expired", plan.node_rank,
                                   v.agent)},
             {"step", v.step},
             // The lease's lapse: the node went at most this long before the others saw it.
             {"detection_s", o_.rdzv_lease_s},
             {"epoch", v.epoch},
             {"members", v.members},
             {"replacement_pid", pid},
             {"healed_at_s", -1}};
  if (job_.live_replica_ranks > 1) {
    r.entry["replica"] = ReplicaOf(rank);
    r.entry["incarnation"] = r.incarnation;
  }
  r.record = goodput_.AddLiveRecovery(r.entry);
  g_.replacements.push_back(std::move(r));
}

void Supervisor::LiveSync(int gen) {
  if (live_link_ == nullptr) return;
  if (std::optional<rdzv::LiveRecord> now = live_link_->Current(gen)) g_.live = std::move(*now);
  std::map<int, rdzv::LiveRankState> mine = LiveOwnStates(gen);
  // A publication that failed (etcd out of reach) is tried again on the next turn.
  if (mine != g_.live_published && live_link_->PublishOwn(gen, node_rank_, mine).ok()) {
    g_.live_published = std::move(mine);
  }
  // This node's live recoveries of the generation, on the wall clock, for node 0's goodput.json.
  nlohmann::json records = nlohmann::json::array();
  for (const nlohmann::json& l : goodput_.live_recoveries()) {
    if (l.value("generation", -1) != gen) continue;
    nlohmann::json r = l;
    for (const std::string key : {"time", "ready_at", "healed_at", "discarded_at"}) {
      const double s = r.value(key + "_s", -1.0);
      if (s >= 0) r[key + "_unix"] = goodput_.run_start_unix() + s;
    }
    records.push_back(std::move(r));
  }
  if (records != g_.live_recoveries_published &&
      live_link_->PublishRecoveries(gen, node_rank_, records).ok()) {
    g_.live_recoveries_published = std::move(records);
  }
}

std::map<int, rdzv::LiveRankState> Supervisor::LiveOwnStates(int gen) const {
  std::map<int, rdzv::LiveRankState> mine;
  for (int i = 0; i < o_.nproc_per_node; ++i) {
    rdzv::LiveRankState& s = mine[Rank(i)];
    const std::optional<protocol::Beat> b = CurrentBeat(gen, i);
    s.ready = b.has_value();  // its first beat comes once its setup is done
    s.epoch = b ? b->live_epoch : -1;
    s.finished = Done(i);
    // Past the run's last step: its final validation and save.
    s.done = s.finished || (b && job_.total_steps > 0 && b->step >= job_.total_steps);
  }
  return mine;
}

std::map<int, rdzv::LiveRankState> Supervisor::LiveStates(int gen) {
  std::map<int, rdzv::LiveRankState> all =
      live_link_ != nullptr ? live_link_->Others(gen) : std::map<int, rdzv::LiveRankState>();
  for (const auto& [rank, s] : LiveOwnStates(gen)) all[rank] = s;
  return all;
}

bool Supervisor::LiveRecover(int gen, const std::vector<RankEnd>& failed, const Verdict& v) {
  if (g_.stopping || (nnodes_ > 1 && live_link_ == nullptr) || !protocol::Restartable(v.code)) {
    return false;
  }
  if (v.kind == protocol::FailureKind::kSilentCorruption) {
    // The faulty rank's results may have reached every replica through the reductions of the
    // steps since the last check: the job goes back to the newest checkpoint (a check verified
    // it) with the faulty slot quarantined, as in restart mode.
    log::Warn(
        "launch: silent data corruption is not recovered live: every rank resumes from the "
        "newest checkpoint, which a check verified");
    return false;
  }
  LiveSync(gen);
  const int k = job_.live_replica_ranks;
  std::vector<int> dead;
  std::map<int, std::string> how;  // rank -> how its process ended
  std::set<int> lost_a_peer;       // ranks whose own exit says another rank failed first
  for (const RankEnd& e : failed) {
    dead.push_back(e.rank);
    if (e.code == protocol::ToInt(protocol::ExitCode::kPeerLost)) lost_a_peer.insert(e.rank);
    how[e.rank] = protocol::DescribeExitCode(e.code) +
                  (e.report ? ": " + e.report->cause.substr(0, e.report->cause.find('\n')) : "");
  }
  auto is_dead = [&](int r) { return std::find(dead.begin(), dead.end(), r) != dead.end(); };
  // Replicas with a failure of their own (not only ranks this launcher killed with them), and the
  // first such rank of each.
  std::map<int, int> hit;
  for (int r : dead) {
    if (g_.retiring.count(r) == 0 && hit.count(ReplicaOf(r)) == 0) hit[ReplicaOf(r)] = r;
  }
  std::vector<int> members, leave;
  for (int r : g_.live.membership.members) {
    (hit.count(ReplicaOf(r)) == 0 && !is_dead(r) ? members : leave).push_back(r);
  }
  // Nobody left holds the state (a replacement still healing was given none yet): restart from
  // a checkpoint.
  if (std::none_of(members.begin(), members.end(), [&](int r) { return LiveInQuorum(r); })) {
    return false;
  }
  for (int r : dead) {
    // Its work was done: the end of the run, nothing to recover.
    if (Finished(gen, Local(r))) return false;
  }
  // A member still in its setup (no beat of this generation yet) is forming the first epoch or
  // inside the resume's collectives, where it cannot take a new epoch: its setup fails with the
  // lost rank. The job restarts now, with this failure as the cause.
  const std::map<int, rdzv::LiveRankState> states = LiveStates(gen);
  std::vector<int> setting_up;
  for (int r : members) {
    const auto s = states.find(r);
    if (LiveInQuorum(r) && (s == states.end() || !s->second.ready)) setting_up.push_back(r);
  }
  if (!setting_up.empty()) {
    log::Warn(
        "launch: rank(s) {} are still in their setup, where a live group cannot change: no live "
        "recovery for rank(s) {}",
        fmt::join(setting_up, ","), fmt::join(dead, ","));
    return false;
  }
  if (!hit.empty()) {
    if (std::optional<std::string> no = restarts_.Take(gen, Elapsed())) {
      log::Error("launch: {}; no replacement for rank(s) {}", *no, fmt::join(dead, ","));
      return false;
    }
  }
  // The step the members hold now: what a replacement that dies before healing had not caught
  // up with (it holds no step of its own).
  const int64_t group_step = LiveGroupStep(gen, members);
  // A failed replica's other ranks (HSDP) go with it: their shard group is broken, and its new
  // ranks form their own.
  for (const auto& [q, culprit] : hit) {
    ++g_.incarnation[static_cast<size_t>(q)];
    for (int r = q * k; r < (q + 1) * k; ++r) {
      const int local = Local(r);
      if (is_dead(r) || g_.pids[local] <= 0 || g_.exited[local]) continue;
      g_.retiring[r] =
          fmt::format("killed with rank {} of its replica (which {})", culprit, how[culprit]);
      log::Warn(
          "launch: killing rank {} with rank {} of its replica: a replica's ranks are "
          "replaced together",
          r, culprit);
      ::kill(g_.pids[local], SIGKILL);
      ::kill(g_.pids[local], SIGCONT);
    }
  }
  // Replacements that were still on their way in and are among the dead are given up: their
  // records say so (the short-handed steps so far are theirs), a new one follows.
  std::vector<int> unhealed;
  auto& pending = g_.replacements;
  for (Generation::Replacement& r : pending) {
    const int rank = Rank(r.local);
    if (r.healed || !is_dead(rank)) continue;
    unhealed.push_back(rank);
    const auto hung = g_.hung.find(rank);
    const auto retired = g_.retiring.find(rank);
    const std::string reason = hung != g_.hung.end()
                                   ? "it was killed for a hang (" + hung->second.cause + ")"
                               : retired != g_.retiring.end() ? "it was " + retired->second
                                                              : "it " + how[rank];
    LiveDiscard(&r, "discarded while healing: " + reason, group_step);
    log::Warn("launch: the replacement for rank {} is discarded while healing: {}", rank, reason);
  }
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [&](const Generation::Replacement& r) {
                                 return !r.healed && std::find(unhealed.begin(), unhealed.end(),
                                                               Rank(r.local)) != unhealed.end();
                               }),
                pending.end());
  // Several nodes: the record is the job's (the others' changes meanwhile are kept); etcd out of
  // reach leaves the others without a next epoch, so the generation ends instead.
  if (!leave.empty() && !LivePublish(gen, leave, {})) return false;
  for (int rank : dead) {
    const int local = Local(rank);
    // The step it had finished: its last beat, read now (the loop's copy may be older).
    const std::optional<protocol::Beat> last = protocol::ReadHeartbeat(hb_dir_, rank);
    int64_t step = last && last->generation == gen ? last->step : g_.beats[local].step;
    if (std::find(unhealed.begin(), unhealed.end(), rank) != unhealed.end()) step = group_step;
    // Killed by the launcher for a hang (LiveKillHung): the hang is the failure, not the kill;
    // killed with its replica: the other rank's failure is.
    Verdict why = v;
    int failed_with = rank;
    if (auto h = g_.hung.find(rank); h != g_.hung.end()) {
      why = h->second;
      g_.hung.erase(h);
    } else if (auto t = g_.retiring.find(rank); t != g_.retiring.end()) {
      why.kind = protocol::FailureKind::kPeerLost;
      why.cause = fmt::format("rank {} was {}", rank, t->second);
      g_.retiring.erase(t);
    } else if (v.rank != rank) {
      // Gone with another rank's failure: of its own (a crash), or because that rank was its
      // peer (a pipeline stage whose neighbour died exits before this launcher kills it with
      // its replica), which blames no slot.
      why.kind = lost_a_peer.count(rank) > 0 ? protocol::FailureKind::kPeerLost
                                             : protocol::FailureKind::kCrash;
      why.cause = fmt::format("rank {} {} (with rank {}'s failure)", rank, how[rank], v.rank);
      if (v.rank >= 0) failed_with = v.rank;
    }
    int slot = slots_->SlotOf(local);
    // A slot to blame is left; one that is not (a rank killed with its replica) is left too when
    // a standby is up elsewhere: a replica heals only once all of its ranks are in.
    slot = protocol::BlamesSlot(why.kind) ? slots_->Exclude(slot) : slots_->TakeReadySpare(slot);
    protocol::Assignment a = AssignmentOf(gen, local);
    const int incarnation = g_.incarnation[static_cast<size_t>(ReplicaOf(rank))];
    a.live_incarnation = incarnation;
    Result<pid_t> pid = slots_->Assign(local, protocol::AssignmentLine(a));
    if (!pid.ok()) {
      log::Error("launch: no replacement for rank {}: {}", rank, pid.status().message());
      return false;
    }
    g_.pids[local] = *pid;
    g_.exited[local] = false;
    g_.finished[local] = false;
    g_.last_step[local] = -1;
    Generation::Replacement r;
    r.local = local;
    r.incarnation = incarnation;
    r.failed_with = failed_with;
    r.entry = {{"time_s", Elapsed()},
               {"generation", gen},
               {"rank", rank},
               {"slot", slot},
               {"host", host_},
               {"kind", protocol::FailureKindName(why.kind)},
               {"cause", why.cause},
               {"step", step},
               {"detection_s", Elapsed() - (why.mono_s - t0_mono_)},
               {"epoch", g_.live.membership.epoch},
               {"members", g_.live.membership.members},
               {"replacement_pid", *pid},
               {"healed_at_s", -1}};
    if (nnodes_ > 1) r.entry["node"] = node_rank_;
    if (k > 1) {
      r.entry["replica"] = ReplicaOf(rank);
      r.entry["incarnation"] = incarnation;
    }
    // The poisson schedule's failure that this is the verdict on (its culprit's entry).
    if (schedule_ && schedule_->awaiting() >= 0 && rank == v.rank) {
      r.entry["scheduled"] = schedule_->awaiting();
    }
    r.record = goodput_.AddLiveRecovery(r.entry);
    g_.replacements.push_back(std::move(r));
    log::Warn(
        "launch: {} ({}); live recovery: rank(s) {} train on in epoch {}, a replacement for "
        "rank {} starts in slot {} (pid {})",
        why.cause, protocol::FailureKindName(why.kind), fmt::join(g_.live.membership.members, ","),
        g_.live.membership.epoch, rank, slot, *pid);
  }
  // The schedule's clock stood from the injection to this verdict; the others train on, exposed.
  if (schedule_) schedule_->Resolved(Elapsed());
  WriteGoodput(false, 0);
  return true;
}

void Supervisor::LiveEnd(int gen, Outcome* out) {
  std::vector<int> quorum;
  for (int rank : g_.live.membership.members) {
    if (LiveInQuorum(rank)) quorum.push_back(rank);
  }
  const int64_t group_step = LiveGroupStep(gen, quorum);
  // Every rank that ended only lost its peers, while a live recovery was on its way: they could
  // not train on after that failure (it struck while they were inside a save's collectives, or
  // an evaluation's), so the restart is that failure's. Its live record gives way to the restart's
  // (one failure, one record), and the verdict names it.
  // (A poisson failure still awaiting its verdict is this one's cause instead: it struck one of
  // them meanwhile, and the live record keeps its own failure.)
  Generation::Replacement* cause = nullptr;
  if (out->verdict && out->verdict->rank < 0 &&
      out->verdict->code == protocol::ToInt(protocol::ExitCode::kPeerLost) &&
      (!schedule_ || schedule_->awaiting() < 0)) {
    for (Generation::Replacement& r : g_.replacements) {
      if (r.healed || r.entry.contains("outcome")) continue;
      if (cause == nullptr ||
          r.entry["time_s"].get<double>() > cause->entry["time_s"].get<double>())
        cause = &r;
    }
    // A rank found dead beside that failure (it lost the culprit in a save's collectives before
    // the launcher saw the culprit go) is not the cause: the culprit's record is.
    if (cause != nullptr && cause->failed_with >= 0 && cause->failed_with != Rank(cause->local)) {
      for (Generation::Replacement& r : g_.replacements) {
        if (!r.healed && !r.entry.contains("outcome") && Rank(r.local) == cause->failed_with) {
          cause = &r;
          break;
        }
      }
    }
  }
  // The records of the ranks that died with the cause go with its record: one failure, one
  // record (dropped below, last index first: dropping shifts the later ones).
  std::vector<int> dropped;
  if (cause != nullptr) {
    for (Generation::Replacement& r : g_.replacements) {
      if (&r == cause || r.healed || r.entry.contains("outcome")) continue;
      if (r.failed_with == Rank(cause->local) && Rank(r.local) != r.failed_with) {
        dropped.push_back(r.record);
        r.entry["outcome"] = "dropped with the restart";  // skipped by the discards below
      }
    }
  }
  if (cause != nullptr) {
    Verdict& v = *out->verdict;
    const nlohmann::json& e = cause->entry;
    v.rank = e["rank"].get<int>();
    v.kind = protocol::ParseFailureKind(e["kind"].get<std::string>()).value_or(v.kind);
    v.host = e.value("host", v.host);
    v.cause = fmt::format("{}; the others lost it in a collective live recovery cannot take ({})",
                          e["cause"].get<std::string>(), v.cause);
    out->scheduled = e.value("scheduled", -1);
    log::Warn("launch: the restart is rank {}'s failure: {}", v.rank, v.cause);
  }
  for (Generation::Replacement& r : g_.replacements) {
    if (r.healed || r.entry.contains("outcome") || &r == cause) continue;
    LiveDiscard(&r,
                out->verdict ? "discarded: the generation ended before it healed (" +
                                   out->verdict->cause + ")"
                             : "discarded: the generation ended before it healed",
                group_step);
  }
  if (cause != nullptr) dropped.push_back(cause->record);
  std::sort(dropped.begin(), dropped.end(), std::greater<int>());
  for (int record : dropped) goodput_.DropLiveRecovery(record);  // the last use of the indices
  LiveSync(gen);  // several nodes: the records as they end, for node 0's goodput.json
}

int64_t Supervisor::LiveGroupStep(int gen, const std::vector<int>& ranks) const {
  int64_t step = -1;
  for (int r : ranks) {
    const std::optional<protocol::Beat> b = protocol::ReadHeartbeat(hb_dir_, r);
    if (b && b->generation == gen) step = std::max(step, b->step);
  }
  return step;
}

void Supervisor::LiveDiscard(Generation::Replacement* r, const std::string& outcome,
                             int64_t group_step) {
  r->entry["outcome"] = outcome;
  r->entry["discarded_at_s"] = Elapsed();
  r->entry["steps_short_handed"] =
      std::max<int64_t>(0, group_step - r->entry["step"].get<int64_t>());
  goodput_.AddLiveRecovery(r->entry, r->record);
}

void Supervisor::LiveHangSuspects(std::vector<int64_t>* last_step, std::vector<bool>* done) const {
  for (int i = 0; i < o_.nproc_per_node; ++i) {
    if (LiveInQuorum(Rank(i))) continue;
    (*done)[static_cast<size_t>(i)] = true;
    (*last_step)[static_cast<size_t>(i)] = std::numeric_limits<int64_t>::max();
  }
}

std::vector<int> Supervisor::LiveSilentRanks() const {
  std::vector<int> silent;
  for (int i = 0; i < o_.nproc_per_node; ++i) {
    if (g_.pids[i] <= 0 || Done(i) ||
        std::filesystem::exists(protocol::FlightRecordPath(hb_dir_, Rank(i)))) {
      continue;
    }
    silent.push_back(i);
  }
  if (silent.empty()) return {};
  if (std::all_of(silent.begin(), silent.end(),
                  [&](int i) { return ReplicaOf(Rank(i)) == ReplicaOf(Rank(silent.front())); })) {
    return silent;  // one replica: the culprit (a restart, if nobody else holds the state)
  }
  // Several replicas: taken out together only if a replica of the quorum is left to train on.
  for (int r : g_.live.membership.members) {
    if (!LiveInQuorum(r)) continue;
    const bool hit = std::any_of(silent.begin(), silent.end(),
                                 [&](int i) { return ReplicaOf(Rank(i)) == ReplicaOf(r); });
    if (!hit) return silent;
  }
  return {};
}

void Supervisor::LiveHealed(int gen, int rank) {
  auto without = [rank](rdzv::LiveRecord r) {
    r.healing.erase(std::remove(r.healing.begin(), r.healing.end(), rank), r.healing.end());
    return r;
  };
  if (live_link_ == nullptr) {
    g_.live = without(g_.live);
    return;
  }
  Result<std::optional<rdzv::LiveRecord>> now = live_link_->Update(
      gen, [&](const std::optional<rdzv::LiveRecord>& was) -> std::optional<rdzv::LiveRecord> {
        if (!was || std::find(was->healing.begin(), was->healing.end(), rank) == was->healing.end())
          return std::nullopt;
        return without(*was);
      });
  if (!now.ok()) {
    log::Warn(
        "launch: cannot record in etcd that rank {} healed ({}); no replacement joins until "
        "it is",
        rank, now.status().message());
  } else if (*now) {
    g_.live = **now;
  }
}

bool Supervisor::LiveInQuorum(int rank) const {
  const std::vector<int>& healing = g_.live.healing;
  return g_.live.membership.Has(rank) &&
         std::find(healing.begin(), healing.end(), rank) == healing.end();
}

void Supervisor::LiveGoodputBeat(int gen) {
  int lead = -1;
  for (int i = 0; i < o_.nproc_per_node; ++i) {
    if (!CurrentBeat(gen, i)) continue;
    if (g_.beats[i].pid == g_.lead_pid) {
      lead = i;
      break;
    }
    if (lead < 0 || g_.beats[i].steps_s > g_.beats[lead].steps_s) lead = i;
  }
  if (lead < 0) return;
  const protocol::Beat& b = g_.beats[lead];
  if (auto seen = g_.counters.find(b.pid); seen != g_.counters.end()) {
    g_.steps_s += std::max(0.0, b.steps_s - seen->second.first);
    g_.checkpoint_s += std::max(0.0, b.checkpoint_s - seen->second.second);
  } else if (g_.lead_pid < 0) {
    g_.steps_s = b.steps_s;  // the generation's first poll
    g_.checkpoint_s = b.checkpoint_s;
  }
  g_.lead_pid = b.pid;
  for (int i = 0; i < o_.nproc_per_node; ++i) {
    if (g_.beats[i].pid > 0)
      g_.counters[g_.beats[i].pid] = {g_.beats[i].steps_s, g_.beats[i].checkpoint_s};
  }
  protocol::Beat group = b;
  group.steps_s = g_.steps_s;
  group.checkpoint_s = g_.checkpoint_s;
  goodput_.LeadBeat(group, Elapsed(), protocol::WallNow());
}

bool Supervisor::LiveAwaitRemoteHang() {
  if (!job_.live || live_link_ == nullptr || g_.live_hang_deferred == g_.live.membership.epoch) {
    return false;
  }
  // The rank this node's ranks wait for is on another node, whose check fires about when this one
  // did (progress stopped everywhere at once): that node kills it alone and publishes the next
  // epoch, in which the ranks here train on. Once per epoch: if it is still current at the next
  // timeout, nobody could, and the generation ends.
  g_.live_hang_deferred = g_.live.membership.epoch;
  g_.last_progress = Elapsed();
  log::Warn(
      "launch: hang: the ranks here wait for a rank on another node; its node replaces it live "
      "(the generation ends if epoch {} is still current at the next timeout)",
      g_.live.membership.epoch);
  return true;
}

bool Supervisor::LiveKillHung(const Verdict& v) {
  if (v.rank < 0 || (nnodes_ > 1 && live_link_ == nullptr)) return false;
  // The culprit, and the first silent rank of each other replica that has one (their replicas go
  // with them: LiveRecover kills the others); all of them die now, so that their ends are seen
  // together and one epoch drops them all.
  std::vector<int> kill = {v.rank};
  for (int r : g_.hang_silent) {
    if (std::none_of(kill.begin(), kill.end(),
                     [&](int q) { return ReplicaOf(q) == ReplicaOf(r); })) {
      kill.push_back(r);
    }
  }
  for (int r : kill) {
    const int local = Local(r);
    if (local < 0 || local >= o_.nproc_per_node || g_.pids[local] <= 0) return false;
    if (!g_.live.membership.Has(r)) return false;
  }
  if (kill.size() == 1) {
    log::Error("launch: {}; killing rank {} only: the others train on without it (live recovery)",
               v.cause, v.rank);
  } else {
    log::Error(
        "launch: {}; killing ranks {} only: the others train on without their replicas (live "
        "recovery)",
        v.cause, fmt::join(kill, ","));
  }
  for (int r : kill) {
    Verdict mine = v;
    mine.rank = r;
    g_.hung[r] = mine;
    const int local = Local(r);
    ::kill(g_.pids[local], SIGKILL);
    ::kill(g_.pids[local], SIGCONT);
  }
  g_.last_progress = Elapsed();  // the hang clock starts again with the recovery
  return true;
}

void Supervisor::LiveTick(int gen) {
  LiveSync(gen);
  std::map<int, rdzv::LiveRankState> state = LiveStates(gen);
  // The members in the quorum are done: a replacement still on its way in has nothing left to
  // join, and waiting for it would leave the hang check a rank that makes no progress.
  // And once they have finished outright (their processes' work done): a replacement already
  // announced may be taken in at the last step's boundary and train it with them, so it is left
  // alone until then.
  bool members_done = true, members_finished = true;
  for (int rank : g_.live.membership.members) {
    if (!LiveInQuorum(rank)) continue;  // a joiner: it holds nothing yet
    members_done = members_done && state[rank].done;
    members_finished = members_finished && state[rank].finished;
  }
  // Replacements are announced one epoch at a time: every one that is ready, together, and only
  // once the previous announcement was taken in (a joiner forms exactly the epoch that listed it;
  // a newer one announced meanwhile would leave it waiting alone): nobody is healing. And only
  // once every member trains in the current epoch (its beats say so): a member still on its way
  // into it would read the newer record instead and form that, apart from the others.
  // When each replacement was first seen ready (set up, waiting to be taken in): its healing
  // splits into its start-up and the rest (waiting for a step boundary, the transfer).
  for (Generation::Replacement& r : g_.replacements) {
    if (!r.entry.contains("ready_at_s") && !r.entry.contains("outcome") &&
        CurrentBeat(gen, r.local)) {
      r.entry["ready_at_s"] = Elapsed();
    }
  }
  bool settled = g_.live.healing.empty();
  for (int rank : g_.live.membership.members) {
    settled = settled && state[rank].epoch == g_.live.membership.epoch;
  }
  if (settled && !members_done) {
    // A replica joins whole: once the replacement of its current incarnation is ready on each of
    // its ranks (a replica's ranks are on one node).
    const int k = job_.live_replica_ranks;
    std::map<int, std::vector<int>> ready;  // replica -> its ranks that are ready
    for (const Generation::Replacement& r : g_.replacements) {
      const int rank = Rank(r.local);
      if (r.announced_epoch < 0 &&
          r.incarnation == g_.incarnation[static_cast<size_t>(ReplicaOf(rank))] &&
          CurrentBeat(gen, r.local)) {
        ready[ReplicaOf(rank)].push_back(rank);
      }
    }
    std::vector<int> joining;
    for (const auto& [q, ranks] : ready) {
      if (static_cast<int>(ranks.size()) == k)
        joining.insert(joining.end(), ranks.begin(), ranks.end());
    }
    std::sort(joining.begin(), joining.end());
    if (!joining.empty() && LivePublish(gen, {}, joining)) {
      for (Generation::Replacement& r : g_.replacements) {
        if (std::find(joining.begin(), joining.end(), Rank(r.local)) != joining.end()) {
          r.announced_epoch = g_.live.membership.epoch;
        }
      }
      log::Info("launch: the replacement(s) for rank(s) {} are ready; they join in epoch {}",
                fmt::join(joining, ","), g_.live.membership.epoch);
    }
  }
  for (Generation::Replacement& r : g_.replacements) {
    if (r.healed || r.entry.contains("outcome")) continue;  // closed already
    const std::optional<protocol::Beat> beat = CurrentBeat(gen, r.local);
    const bool healed = beat && r.announced_epoch >= 0 && beat->live_epoch >= r.announced_epoch &&
                        beat->healed_bytes > 0 && beat->healed_step >= 0;
    if (!healed && (r.announced_epoch < 0 ? members_done : members_finished) &&
        g_.pids[r.local] > 0) {
      // The others finished the run before it could join: nothing is left for it to do.
      log::Info("launch: the run ended before the replacement for rank {} joined; stopping it",
                Rank(r.local));
      g_.cancelled.push_back(g_.pids[r.local]);
      ::kill(g_.pids[r.local], SIGKILL);
      r.entry["healed_at_s"] = -1;
      r.entry["outcome"] = "the run ended before it joined";
      goodput_.AddLiveRecovery(r.entry, r.record);
      continue;
    }
    // Not ready yet, waiting for its announcement, or healing.
    if (!healed) continue;
    const int rank = Rank(r.local);
    r.healed = true;
    LiveHealed(gen, rank);
    CloseHealedLiveRecovery(*beat, r.announced_epoch, Elapsed(), &r.entry);
    goodput_.AddLiveRecovery(r.entry, r.record);
    // --spares: the standby it came from is replaced now that it trains (started earlier, its
    // start-up would have taken CPU from the replacement's own).
    Prewarm();
    log::Info(
        "launch: rank {} healed from rank {} ({} bytes in {:.3f}s) and trains again at step {}: "
        "{:.2f}s after its failure (its replacement ready after {:.2f}s), {} step(s) "
        "short-handed",
        rank, beat->healed_from, beat->healed_bytes, beat->healed_s, beat->healed_step + 1,
        Elapsed() - r.entry["time_s"].get<double>(),
        r.entry.value("ready_at_s", Elapsed()) - r.entry["time_s"].get<double>(),
        r.entry["steps_short_handed"].get<int64_t>());
    WriteGoodput(false, 0);
  }
}

}  // namespace tenax::launch
