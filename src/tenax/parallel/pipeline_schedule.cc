#include "tenax/parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "tenax/core/check.h"

namespace tenax::parallel {

Result<ScheduleKind> ParseScheduleKind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved_1f1b") return ScheduleKind::kInterleaved1F1B;
  if (name == "zbv") return ScheduleKind::kZBV;
  if (name == "dualpipev") return ScheduleKind::kDualPipeV;
  return InvalidArgument(
      fmt::format("unknown pipeline_schedule \"{}\"; expected \"gpipe\", \"1f1b\", "
                  "\"interleaved_1f1b\", \"zbv\" or \"dualpipev\"",
                  name));
}

bool IsVShaped(ScheduleKind kind) {
  return kind == ScheduleKind::kZBV || kind == ScheduleKind::kDualPipeV;
}

const char* ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved_1f1b";
    case ScheduleKind::kZBV:
      return "zbv";
    case ScheduleKind::kDualPipeV:
      return "dualpipev";
  }
  return "?";
}

std::string ToString(const Action& a) {
  static constexpr char kLetter[] = {'F', 'B', 'I', 'W'};
  return fmt::format("{}{}c{}", kLetter[static_cast<int>(a.kind)], a.microbatch, a.chunk);
}

namespace {

Action F(int mb, int chunk) { return {ActionKind::kForward, mb, chunk}; }
Action B(int mb, int chunk) { return {ActionKind::kBackward, mb, chunk}; }
Action I(int mb, int chunk) { return {ActionKind::kBackwardInput, mb, chunk}; }
Action W(int mb, int chunk) { return {ActionKind::kBackwardWeight, mb, chunk}; }

std::vector<Action> GPipeRank(int m) {
  std::vector<Action> out;
  for (int i = 0; i < m; ++i) out.push_back(F(i, 0));
  // Backwards in micro-batch order: the last stage can start micro-batch 0's backward as soon as
  // its last forward ends, and every earlier stage follows one backward behind.
  for (int i = 0; i < m; ++i) out.push_back(B(i, 0));
  return out;
}

std::vector<Action> OneFOneBRank(int p, int m, int r) {
  // Warm-up fills the pipeline below this rank: rank r must have p - 1 - r micro-batches in
  // flight before the first backward can come back to it.
  const int warmup = std::min(p - 1 - r, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back(F(i, 0));
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back(F(warmup + i, 0));
    out.push_back(B(i, 0));
  }
  for (int i = m - warmup; i < m; ++i) out.push_back(B(i, 0));
  return out;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward (or backward) of
// a rank walks micro-batches in groups of p through chunk 0, 1, ..., v - 1 (backwards through
// v - 1, ..., 0), so each group of p micro-batches keeps every rank busy on one chunk while the
// previous chunk's outputs travel around the ring of ranks.
std::vector<Action> InterleavedRank(int p, int m, int v, int r) {
  const int total = m * v;
  auto nth = [&](int k, bool forward) {
    const int group = k / (p * v), in_group = k % (p * v);
    const int mb = group * p + in_group % p;
    const int chunk = forward ? in_group / p : v - 1 - in_group / p;
    return forward ? F(mb, chunk) : B(mb, chunk);
  };
  // With m == p there is no steady state to reach: Megatron runs every forward first.
  const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(nth(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(nth(k + warmup, true));
    out.push_back(nth(k, false));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(nth(k, false));
  return out;
}

// One rank's list under construction for the V schedules: the next micro-batch of each pass and
// chunk, and the split backwards whose W is still owed, oldest first.
struct VRank {
  std::vector<Action> out;
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};
  std::vector<Action> owed;  // I's without their W yet

  void Forward(int c) { out.push_back(F(next_f[c]++, c)); }
  // The next backward of chunk c: whole, or input-only with its W owed.
  void Backward(int c, bool split) {
    const int mb = next_b[c]++;
    out.push_back(split ? I(mb, c) : B(mb, c));
    if (split) owed.push_back(W(mb, c));
  }
  bool Owes(int c) const {
    return std::any_of(owed.begin(), owed.end(), [&](const Action& a) { return a.chunk == c; });
  }
  // The oldest owed W (of chunk c, or of any chunk when c < 0).
  void Weight(int c = -1) {
    auto it = std::find_if(owed.begin(), owed.end(),
                           [&](const Action& a) { return c < 0 || a.chunk == c; });
    TENAX_CHECK(it != owed.end());
    out.push_back(*it);
    owed.erase(it);
  }
};

// ZB-V (Qi et al. 2024, section 6, the schedule of their figure 8) on rank r of p, m >= 2p
// micro-batches; chunk 0 is stage r, chunk 1 stage 2p - 1 - r. Stage 0 and the loss stage are
// on rank 0, so every rank starts forwarding at once and its chunk-1 backwards return from the
// loss early. Phases:
//   1. 2(p - r) - 1 forwards of chunk 0 (the deeper the rank, the fewer it can start alone);
//   2. r times: forward chunk 1, forward chunk 0;
//   3. p - r times: forward chunk 1, whole backward chunk 1 (the V's turn comes back at once);
//   4. steady: until chunk 1 has run all m forwards, forward chunk 0 (while any is left), whole
//      backward chunk 0, forward chunk 1, whole backward chunk 1;
//   5. cool-down: r times I chunk 0, I chunk 1 (their W owed); p - r times I chunk 0 and an owed
//      W of chunk 0; then the owed W's of chunk 1, then of chunk 0.
// The W's of phase 5 fill the cool-down's wait for the gradients coming back down the V.
std::vector<Action> ZbvRank(int p, int m, int r) {
  VRank v;
  for (int i = 0; i < 2 * (p - r) - 1; ++i) v.Forward(0);
  for (int i = 0; i < r; ++i) {
    v.Forward(1);
    v.Forward(0);
  }
  for (int i = 0; i < p - r; ++i) {
    v.Forward(1);
    v.Backward(1, false);
  }
  while (v.next_f[1] < m) {
    if (v.next_f[0] < m) v.Forward(0);
    v.Backward(0, false);
    v.Forward(1);
    v.Backward(1, false);
  }
  for (int i = 0; i < r; ++i) {
    v.Backward(0, true);
    v.Backward(1, true);
  }
  for (int i = 0; i < p - r; ++i) {
    v.Backward(0, true);
    v.Weight(0);
  }
  while (v.Owes(1)) v.Weight(1);
  while (v.Owes(0)) v.Weight(0);
  return std::move(v.out);
}

// DualPipeV (DeepSeek-V3's DualPipe cut in half along its symmetry, so that no stage is held
// twice) on rank r of p, m >= 2p micro-batches, chunk 0 stage r, chunk 1 stage 2p - 1 - r:
//   1. 2(p - r - 1) forwards of chunk 0;
//   2. r + 1 times: forward chunk 0, forward chunk 1;
//   3. p - r - 1 times: whole backward chunk 1, forward chunk 1;
//   4. m - 2p + r + 1 times: the pairs (forward chunk 0 & backward chunk 1) and (forward chunk 1 &
//      backward chunk 0), whole backwards: the steady state, a forward and a backward of the
//      other chunk in every pair;
//   5. p - r - 1 times: backward chunk 1, then the pair (forward chunk 1 & backward chunk 0);
//   6. r + 1 times: backward chunk 1, backward chunk 0, input-only from the middle iteration on
//      ((r + 1) / 2; on odd ranks from its chunk-1 backward, on even ones from its chunk-0 one);
//   7. p - r - 1 times: the oldest owed W, then an input-only backward of chunk 0;
//   8. the r + 1 owed W's left, oldest first.
std::vector<Action> DualPipeVRank(int p, int m, int r) {
  VRank v;
  for (int i = 0; i < 2 * (p - r - 1); ++i) v.Forward(0);
  for (int i = 0; i < r + 1; ++i) {
    v.Forward(0);
    v.Forward(1);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    v.Backward(1, false);
    v.Forward(1);
  }
  for (int i = 0; i < m - 2 * p + r + 1; ++i) {
    v.Forward(0);
    v.Backward(1, false);
    v.Forward(1);
    v.Backward(0, false);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    v.Backward(1, false);
    v.Forward(1);
    v.Backward(0, false);
  }
  const int middle = (r + 1) / 2;
  for (int i = 0; i < r + 1; ++i) {
    v.Backward(1, i > middle || (i == middle && r % 2 == 1));
    v.Backward(0, i >= middle);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    v.Weight();
    v.Backward(0, true);
  }
  while (!v.owed.empty()) v.Weight();
  return std::move(v.out);
}

}  // namespace

Result<PipelinePlan> BuildSchedule(ScheduleKind kind, int p, int m, int v) {
  const char* name = ScheduleName(kind);
  if (p < 1 || m < 1 || v < 1) {
    return InvalidArgument(fmt::format(
        "pipeline_parallel ({}), microbatches ({}) and virtual_stages ({}) must all be >= 1", p, m,
        v));
  }
  if (IsVShaped(kind)) {
    if (v != 2) {
      return InvalidArgument(fmt::format(
          "pipeline_schedule = \"{}\" places two model stages on every rank (a V: rank r holds "
          "stages r and 2 x pipeline_parallel - 1 - r); set virtual_stages = 2 (it is {})",
          name, v));
    }
    if (m < 2 * p) {
      return InvalidArgument(fmt::format(
          "microbatches ({}) < 2 x pipeline_parallel ({}): the {} schedule needs two micro-batches "
          "per rank to fill its V; raise microbatches to {} or more, or use \"1f1b\"",
          m, p, name, 2 * p));
    }
  } else if (v > 1 && kind != ScheduleKind::kInterleaved1F1B) {
    return InvalidArgument(fmt::format(
        "virtual_stages = {} needs pipeline_schedule = \"interleaved_1f1b\", \"zbv\" or "
        "\"dualpipev\" (it is \"{}\")",
        v, name));
  }
  if (kind == ScheduleKind::k1F1B && m < p) {
    return InvalidArgument(fmt::format(
        "microbatches ({}) < pipeline_parallel ({}): the 1f1b schedule needs at least one "
        "micro-batch per stage in flight; raise microbatches or use \"gpipe\"",
        m, p));
  }
  if (kind == ScheduleKind::kInterleaved1F1B && m % p != 0) {
    return InvalidArgument(fmt::format(
        "microbatches ({}) is not a multiple of pipeline_parallel ({}), which interleaved_1f1b "
        "requires (micro-batches move through the chunks in groups of pipeline_parallel)",
        m, p));
  }
  PipelinePlan plan;
  plan.kind = kind;
  plan.ranks = p;
  plan.microbatches = m;
  plan.virtual_stages = v;
  plan.v_shape = IsVShaped(kind);
  for (int r = 0; r < p; ++r) {
    switch (kind) {
      case ScheduleKind::kGPipe:
        plan.actions.push_back(GPipeRank(m));
        break;
      case ScheduleKind::k1F1B:
        plan.actions.push_back(OneFOneBRank(p, m, r));
        break;
      case ScheduleKind::kInterleaved1F1B:
        plan.actions.push_back(InterleavedRank(p, m, v, r));
        break;
      case ScheduleKind::kZBV:
        plan.actions.push_back(ZbvRank(p, m, r));
        break;
      case ScheduleKind::kDualPipeV:
        plan.actions.push_back(DualPipeVRank(p, m, r));
        break;
    }
  }
  return plan;
}

// The V schedules' bubble under F = I = W = u per chunk (B = 2u), from their simulated timelines
// (pipeline_schedule_test checks these over a grid; they hold for every m >= 2p and every rank):
// zbv leaves each rank idle 3(p - 1)u and dualpipev (2p - 3)u for p >= 2, of a busy 6mu (two
// chunks, m micro-batches, F + I + W each). zbv's is interleaved_1f1b's at v = 2 with 2p chunks'
// activations held instead of 3p - 1; dualpipev's about a third of 1f1b's.
double BubbleFraction(ScheduleKind kind, int p, int m, int v) {
  switch (kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B:
      return (p - 1.0) / m;
    case ScheduleKind::kInterleaved1F1B:
      return (p - 1.0) / (v * m);
    case ScheduleKind::kZBV:
      return 3.0 * (p - 1) / (6.0 * m);
    case ScheduleKind::kDualPipeV:
      return p == 1 ? 0.0 : (2.0 * p - 3) / (6.0 * m);
  }
  return 0;
}

Result<std::vector<LayerRange>> SplitLayers(int64_t n_layers, int p, int v) {
  if (p < 1 || v < 1 || n_layers < 1) {
    return InvalidArgument(fmt::format(
        "model.n_layers ({}), pipeline_parallel ({}) and virtual_stages ({}) must all be >= 1",
        n_layers, p, v));
  }
  const int64_t stages = static_cast<int64_t>(p) * v;
  if (n_layers % stages != 0) {
    return InvalidArgument(fmt::format(
        "model.n_layers ({}) is not divisible by pipeline_parallel ({}) * virtual_stages ({}) = "
        "{}; every model stage must hold the same number of layers",
        n_layers, p, v, stages));
  }
  std::vector<LayerRange> out;
  const int64_t per = n_layers / stages;
  for (int64_t s = 0; s < stages; ++s) out.push_back({s * per, (s + 1) * per});
  return out;
}

namespace {

// The simulator proper; cost(r, i) is the duration of plan.actions[r][i].
template <typename CostFn>
Result<Simulation> Run(const PipelinePlan& plan, CostFn cost, double message) {
  const int p = plan.ranks, m = plan.microbatches, v = plan.virtual_stages, S = plan.num_stages();
  TENAX_CHECK(p >= 1 && m >= 1 && v >= 1);
  if (static_cast<int>(plan.actions.size()) != p) {
    return InvalidArgument(
        fmt::format("plan has {} action lists for {} ranks", plan.actions.size(), p));
  }
  // A malformed plan (duplicate or missing action) would otherwise look like a deadlock or
  // silently double-count; name it precisely instead.
  for (int r = 0; r < p; ++r) {
    // seen[pass][mb * v + chunk]: forward, input gradient (B or I), weight-only (W).
    std::vector<std::vector<int>> seen(3, std::vector<int>(static_cast<size_t>(m * v), 0));
    std::vector<char> split(static_cast<size_t>(m * v), 0);
    for (const Action& a : plan.actions[r]) {
      if (a.microbatch < 0 || a.microbatch >= m || a.chunk < 0 || a.chunk >= v) {
        return InvalidArgument(fmt::format("rank {}: action {} is out of range (m = {}, v = {})", r,
                                           ToString(a), m, v));
      }
      const size_t k = static_cast<size_t>(a.microbatch * v + a.chunk);
      if (seen[static_cast<size_t>(PassOf(a.kind))][k]++ > 0) {
        return InvalidArgument(fmt::format("rank {}: action {} appears twice", r, ToString(a)));
      }
      if (a.kind == ActionKind::kBackwardInput) split[k] = 1;
    }
    for (size_t k = 0; k < split.size(); ++k) {
      const Action a{ActionKind::kForward, static_cast<int>(k) / v, static_cast<int>(k) % v};
      if (!seen[0][k] || !seen[1][k] || seen[2][k] != split[k]) {
        return InvalidArgument(fmt::format(
            "rank {} has {} actions, but micro-batch {} chunk {} lacks {} (expected one forward "
            "and one backward, or an input-gradient I and its weight-gradient W, per micro-batch "
            "and chunk)",
            r, plan.actions[r].size(), a.microbatch, a.chunk,
            !seen[0][k]   ? "its forward"
            : !seen[1][k] ? "its backward"
            : split[k]    ? "its W"
                          : "its I"));
      }
    }
  }

  // Finish time of (pass, stage, micro-batch); negative = not run yet.
  auto key = [&](ActionKind k, int stage, int mb) {
    return (static_cast<size_t>(PassOf(k)) * S + stage) * m + mb;
  };
  std::vector<double> finish(static_cast<size_t>(3 * S * m), -1.0);
  Simulation sim;
  sim.busy.assign(p, 0.0);
  sim.idle.assign(p, 0.0);
  sim.peak_in_flight.assign(p, 0);
  sim.timeline.assign(p, {});
  std::vector<double> free_at(p, 0.0);
  std::vector<size_t> next(p, 0);
  std::vector<int> in_flight(p, 0);

  // Each rank's order is fixed, so an action starts at max(rank free, inputs finished): sweeping
  // the ranks until none can advance yields the exact event times in any sweep order.
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < plan.actions[r].size()) {
        const Action& a = plan.actions[r][next[r]];
        const int stage = plan.StageOf(r, a.chunk);
        double ready = free_at[r];
        bool runnable = true;
        auto need = [&](ActionKind k, int s) {
          const double t = finish[key(k, s, a.microbatch)];
          if (t < 0) runnable = false;
          ready = std::max(ready, t + (plan.RankOf(s) != r ? message : 0.0));
        };
        if (a.kind == ActionKind::kForward) {
          if (stage > 0) need(ActionKind::kForward, stage - 1);
        } else if (a.kind == ActionKind::kBackwardWeight) {
          need(ActionKind::kBackwardInput, stage);
        } else {
          need(ActionKind::kForward, stage);
          if (stage < S - 1) need(ActionKind::kBackward, stage + 1);  // its B or its I
        }
        if (!runnable) break;
        const double c = cost(r, next[r]);
        finish[key(a.kind, stage, a.microbatch)] = ready + c;
        free_at[r] = ready + c;
        sim.busy[r] += c;
        sim.timeline[r].push_back({a, stage, ready, ready + c});
        // Held from the forward until its weight gradients are done (B or W).
        in_flight[r] += a.kind == ActionKind::kForward         ? 1
                        : a.kind == ActionKind::kBackwardInput ? 0
                                                               : -1;
        sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], in_flight[r]);
        ++next[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    if (next[r] < plan.actions[r].size()) {
      stuck += fmt::format(" rank {} at {};", r, ToString(plan.actions[r][next[r]]));
    }
  }
  if (!stuck.empty()) {
    return InvalidArgument(fmt::format("{} schedule (p = {}, m = {}, v = {}) deadlocks:{}",
                                       ScheduleName(plan.kind), p, m, v, stuck));
  }
  sim.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int r = 0; r < p; ++r) sim.idle[r] = sim.makespan - sim.busy[r];
  return sim;
}

}  // namespace

Result<Simulation> Simulate(const PipelinePlan& plan, const ActionCosts& costs) {
  return Run(
      plan,
      [&](int r, size_t i) {
        switch (plan.actions[r][i].kind) {
          case ActionKind::kForward:
            return costs.forward;
          case ActionKind::kBackward:
            return costs.backward;
          case ActionKind::kBackwardInput:
            return costs.backward_input;
          case ActionKind::kBackwardWeight:
            return costs.backward_weight;
        }
        return costs.backward;
      },
      costs.message);
}

Result<Simulation> SimulateWithDurations(const PipelinePlan& plan,
                                         const std::vector<std::vector<double>>& durations,
                                         double message_latency) {
  if (durations.size() != plan.actions.size()) {
    return InvalidArgument(
        fmt::format("durations for {} ranks, plan has {}", durations.size(), plan.actions.size()));
  }
  for (size_t r = 0; r < durations.size(); ++r) {
    if (durations[r].size() != plan.actions[r].size()) {
      return InvalidArgument(fmt::format("rank {}: {} durations for {} actions", r,
                                         durations[r].size(), plan.actions[r].size()));
    }
  }
  return Run(
      plan, [&](int r, size_t i) { return durations[static_cast<size_t>(r)][i]; }, message_latency);
}

std::string ToString(const ProgramStep& s) {
  switch (s.type) {
    case StepType::kCompute:
      return ToString(s.action);
    case StepType::kSend:
      return fmt::format("send {} -> {} #{}", ToString(s.action), s.peer, s.tag);
    case StepType::kRecv:
      return fmt::format("recv {} <- {} #{}", ToString(s.action), s.peer, s.tag);
  }
  return "?";
}

// Deadlock-free ordering of blocking point-to-point messages.
//
// Send and Recv block, and a backend may make Send wait until the matching Recv is posted (NCCL
// does; Gloo may). Sending each output as soon as it is computed and receiving each input just
// before it is needed deadlocks 1F1B: rank r blocks sending activation i+1 to r+1 while r+1 blocks
// sending the gradient of i to r. The rule used instead:
//
//   1. Simulate the plan with unit costs (forward 1, backward 2; exact in floating point, so every
//      rank computes the same times). Every message gets a ready time (the end of the action
//      producing it) and an id (direction, sending stage, micro-batch).
//   2. The global message order is (ready time, id). Every rank performs its own sends and
//      receives in that order; its computes are placed at their simulated start times, and a
//      message at the same time as a compute goes first.
//
// Each rank's communication is then a subsequence of one global order, so the earliest pending
// message always has both ends at it: its sender has finished every earlier message and, since a
// message is ready strictly after its producer starts (costs > 0), the producing compute too; its
// receiver has nothing earlier left. By induction every message completes, whatever the real
// timings are and whether or not Send waits for the Recv. A compute's inputs always arrive before
// it (ready time <= start time, messages first on ties). Tags are the message ids, so a backend
// that matches by tag cannot pair the wrong tensors; NCCL, which matches in order per peer, sees
// the same order on both ends. CheckRendezvous verifies all this mechanically (tests run it over
// a grid of layouts).
Result<std::vector<std::vector<ProgramStep>>> BuildPrograms(const PipelinePlan& plan) {
  TENAX_ASSIGN_OR_RETURN(Simulation order, Simulate(plan, ActionCosts{1.0, 2.0, 0.0}));
  const int S = plan.num_stages(), m = plan.microbatches;
  struct Keyed {
    double time;
    int cls;  // 0: message, 1: compute (messages first on equal times)
    int dir, from_stage, mb;
    int rank;
    ProgramStep step;
  };
  // The kind of each (rank, micro-batch, chunk)'s gradient pass (B or I): what a received
  // gradient is consumed by.
  const int v = plan.virtual_stages;
  std::vector<ActionKind> grad_kind(static_cast<size_t>(plan.ranks * m * v), ActionKind::kBackward);
  for (int q = 0; q < plan.ranks; ++q) {
    for (const Action& a : plan.actions[static_cast<size_t>(q)]) {
      if (a.kind == ActionKind::kBackwardInput) {
        grad_kind[static_cast<size_t>((q * m + a.microbatch) * v + a.chunk)] = a.kind;
      }
    }
  }
  std::vector<Keyed> keyed;
  for (int q = 0; q < plan.ranks; ++q) {
    for (const TimedAction& ta : order.timeline[static_cast<size_t>(q)]) {
      const Action& a = ta.action;
      keyed.push_back({ta.start, 1, 0, 0, 0, q, {StepType::kCompute, a, ta.stage, -1, 0}});
      if (a.kind == ActionKind::kBackwardWeight) continue;  // sends nothing
      const bool fwd = a.kind == ActionKind::kForward;
      const int to_stage = fwd ? ta.stage + 1 : ta.stage - 1;
      if (to_stage < 0 || to_stage >= S) continue;
      const int to = plan.RankOf(to_stage);
      if (to == q) continue;  // hand-over between chunks of one rank: no message
      const int dir = fwd ? 0 : 1;
      const int tag = (dir * S + ta.stage) * m + a.microbatch;
      const int to_chunk = plan.ChunkOf(to_stage);
      const Action consumer{
          fwd ? a.kind : grad_kind[static_cast<size_t>((to * m + a.microbatch) * v + to_chunk)],
          a.microbatch, to_chunk};
      keyed.push_back(
          {ta.end, 0, dir, ta.stage, a.microbatch, q, {StepType::kSend, a, ta.stage, to, tag}});
      keyed.push_back({ta.end,
                       0,
                       dir,
                       ta.stage,
                       a.microbatch,
                       to,
                       {StepType::kRecv, consumer, to_stage, q, tag}});
    }
  }
  // Per rank, at most one entry has a given (time, cls, dir, from_stage, mb): computes on a rank
  // have distinct start times and each message has one send and one receive on different ranks.
  std::sort(keyed.begin(), keyed.end(), [](const Keyed& x, const Keyed& y) {
    return std::tie(x.time, x.cls, x.dir, x.from_stage, x.mb, x.rank) <
           std::tie(y.time, y.cls, y.dir, y.from_stage, y.mb, y.rank);
  });
  std::vector<std::vector<ProgramStep>> programs(static_cast<size_t>(plan.ranks));
  for (const Keyed& k : keyed) programs[static_cast<size_t>(k.rank)].push_back(k.step);
  return programs;
}

Status CheckRendezvous(const PipelinePlan& plan,
                       const std::vector<std::vector<ProgramStep>>& programs) {
  const int p = plan.ranks, m = plan.microbatches, S = plan.num_stages();
  if (static_cast<int>(programs.size()) != p) {
    return InvalidArgument(fmt::format("{} programs for {} ranks", programs.size(), p));
  }
  // done[pass][stage][mb]: the action ran. arrived[pass][stage][mb]: the consuming action's input
  // (activation for a forward, output gradient for a B or I) is on its rank.
  auto idx = [&](ActionKind k, int stage, int mb) {
    return (static_cast<size_t>(PassOf(k)) * S + stage) * m + mb;
  };
  std::vector<char> done(static_cast<size_t>(3 * S * m), 0), arrived(done.size(), 0);
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  auto at_end = [&](int r) { return pc[r] >= programs[r].size(); };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (!at_end(r)) {
        const ProgramStep& s = programs[r][pc[r]];
        const Action& a = s.action;
        if (s.type == StepType::kCompute && a.kind == ActionKind::kBackwardWeight) {
          if (!done[idx(ActionKind::kBackwardInput, s.stage, a.microbatch)]) {
            return InvalidArgument(fmt::format("rank {} runs {} before its I", r, ToString(s)));
          }
          done[idx(a.kind, s.stage, a.microbatch)] = 1;
          ++pc[r];
          progress = true;
          continue;
        }
        if (s.type == StepType::kCompute) {
          const bool fwd = a.kind == ActionKind::kForward;
          const bool needs_input = fwd ? s.stage > 0 : s.stage < S - 1;
          if (needs_input && !arrived[idx(a.kind, s.stage, a.microbatch)]) {
            return InvalidArgument(
                fmt::format("rank {} runs {} before its input arrived", r, ToString(s)));
          }
          if (!fwd && !done[idx(ActionKind::kForward, s.stage, a.microbatch)]) {
            return InvalidArgument(
                fmt::format("rank {} runs {} before its forward", r, ToString(s)));
          }
          done[idx(a.kind, s.stage, a.microbatch)] = 1;
          const int to_stage = fwd ? s.stage + 1 : s.stage - 1;
          if (to_stage >= 0 && to_stage < S && plan.RankOf(to_stage) == r) {
            arrived[idx(a.kind, to_stage, a.microbatch)] = 1;  // local hand-over
          }
          ++pc[r];
          progress = true;
          continue;
        }
        // A message completes only when both ends stand at it (rendezvous).
        const int peer = s.peer;
        if (peer < 0 || peer >= p || peer == r || at_end(peer)) break;
        const ProgramStep& o = programs[peer][pc[peer]];
        const bool pair = o.peer == r && o.tag == s.tag &&
                          ((s.type == StepType::kSend && o.type == StepType::kRecv) ||
                           (s.type == StepType::kRecv && o.type == StepType::kSend));
        if (!pair) break;
        const ProgramStep& send = s.type == StepType::kSend ? s : o;
        const ProgramStep& recv = s.type == StepType::kSend ? o : s;
        if (!done[idx(send.action.kind, send.stage, send.action.microbatch)]) {
          return InvalidArgument(fmt::format("rank {} sends {} before computing it",
                                             s.type == StepType::kSend ? r : peer, ToString(send)));
        }
        arrived[idx(recv.action.kind, recv.stage, recv.action.microbatch)] = 1;
        ++pc[r];
        ++pc[peer];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    if (!at_end(r)) stuck += fmt::format(" rank {} at {};", r, ToString(programs[r][pc[r]]));
  }
  if (!stuck.empty()) {
    return InvalidArgument(fmt::format("{} programs (p = {}, m = {}, v = {}) deadlock:{}",
                                       ScheduleName(plan.kind), p, m, plan.virtual_stages, stuck));
  }
  // Every forward and every B or I ran (the first two passes), and every W the plan holds.
  for (size_t i = 0; i < static_cast<size_t>(2 * S * m); ++i) {
    if (!done[i]) return InvalidArgument("programs leave an action unrun");
  }
  for (int r = 0; r < p; ++r) {
    for (const Action& a : plan.actions[static_cast<size_t>(r)]) {
      if (a.kind == ActionKind::kBackwardWeight &&
          !done[idx(a.kind, plan.StageOf(r, a.chunk), a.microbatch)]) {
        return InvalidArgument(fmt::format("programs leave rank {}'s {} unrun", r, ToString(a)));
      }
    }
  }
  return Status::Ok();
}

}  // namespace tenax::parallel
