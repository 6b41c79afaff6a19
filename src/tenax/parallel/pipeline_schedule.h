// Pipeline-parallel schedules as data: for p pipeline ranks, m micro-batches and v virtual stages
// (model chunks per rank), the ordered list of forward/backward actions each rank runs in one
// step, plus a discrete-event simulator that times a schedule under per-action costs and reports
// every rank's busy and idle time, the makespan and the peak number of micro-batches whose
// activations a rank holds; and each rank's program (computes, sends and receives in a
// deadlock-free order) that the executor (pipeline.h) runs.
//
// Schedules (S = p * v model stages; chunk c of rank r holds model stage c * p + r, except in the
// V-shaped placement of zbv and dualpipev, where v = 2 and rank r holds stages r and 2p - 1 - r,
// so the first and the last stage are both on rank 0 and the turn of the V is on rank p - 1):
//   gpipe             all m forwards, then all m backwards (v = 1). Holds m micro-batches.
//   1f1b              PipeDream-Flush (Narayanan et al. 2021): rank r warms up with p - 1 - r
//                     forwards, then alternates one forward / one backward, then cools down with
//                     the remaining backwards (v = 1, m >= p). Holds at most p micro-batches.
//   interleaved_1f1b  Megatron-LM's interleaved schedule (v >= 1, m % p == 0): micro-batches go
//                     through the chunks in groups of p; warm-up (p - r - 1) * 2 + (v - 1) * p
//                     forwards (all m * v when m == p), then 1F1B over (micro-batch, chunk) pairs.
//   zbv               Zero Bubble's ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism",
//                     section 6): V placement, the backward split into the input-gradient pass I
//                     (what the previous stage waits for) and the weight-gradient pass W (which
//                     nobody waits for), W deferred into the cool-down to fill it (v = 2,
//                     m >= 2p). Holds at most 2p chunk micro-batches, 1F1B's activation memory.
//   dualpipev         DualPipeV, the V-shaped ("cut-in-half") DualPipe of DeepSeek-V3 (v = 2,
//                     m >= 2p): after a warm-up, each steady step pairs a forward of one chunk
//                     with a backward of the other (the F&B pairs DualPipe overlaps), and the
//                     cool-down defers half the weight-gradient passes to fill its bubble.
//                     tenax's executor runs a pair back to back: the overlap DualPipe gets is of
//                     one chunk's communication under the other's compute (expert all-to-all),
//                     which blocking CPU messages do not have.
//
// A backward is either whole (B: input and weight gradients at once) or split into I and a later
// W of the same micro-batch and chunk; zbv and dualpipev split some, the others none.
//
// Bubble under uniform costs (forward f, backward b per action, the same on every stage): every
// rank is busy m * v * (f + b); the makespan exceeds that by the bubble, and
//   bubble fraction := idle / busy = (makespan - busy) / busy
// which is exactly (p - 1) / m for gpipe and 1f1b and (p - 1) / (v * m) for interleaved_1f1b
// (Narayanan et al.'s t_pb / t_id). The ratio does not depend on the unit of cost, so per-action
// costs need not be scaled by 1 / v. For zbv and dualpipev, BubbleFraction states the exact
// per-rank values under uniform costs (derived in pipeline_schedule.cc, checked by the simulator).
//
// Non-goals: non-uniform stage sizes, torch (this file is pure arithmetic so the planner can use
// it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::parallel {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved1F1B, kZBV, kDualPipeV };
// "gpipe" | "1f1b" | "interleaved_1f1b" | "zbv" | "dualpipev" (the names [parallelism]
// pipeline_schedule takes).
Result<ScheduleKind> ParseScheduleKind(const std::string& name);
const char* ScheduleName(ScheduleKind kind);
// zbv and dualpipev: two chunks per rank in a V (StageOf below).
bool IsVShaped(ScheduleKind kind);

// kBackward: the whole backward of a (micro-batch, chunk). kBackwardInput: only the gradient of
// its input (which the previous stage waits for); the weight gradients are left to a later
// kBackwardWeight of the same (micro-batch, chunk), which sends nothing.
enum class ActionKind { kForward, kBackward, kBackwardInput, kBackwardWeight };
// The three passes an action may be: 0 forward, 1 input gradient (B or I), 2 weight only (W).
inline int PassOf(ActionKind k) {
  return k == ActionKind::kForward ? 0 : k == ActionKind::kBackwardWeight ? 2 : 1;
}

struct Action {
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this rank, in [0, v); its model stage is chunk * p + rank
  bool operator==(const Action& o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
};
// "F3c1": forward of micro-batch 3 on chunk 1; B whole backward, I input gradient, W weights.
std::string ToString(const Action& a);

// One step's actions for every rank of a pipeline. Invariant: each rank's list holds, per
// (micro-batch, chunk), exactly one forward and after it either one B, or one I and later one W.
struct PipelinePlan {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int ranks = 1;                             // p: pipeline-parallel degree
  int microbatches = 1;                      // m
  int virtual_stages = 1;                    // v: chunks per rank
  bool v_shape = false;                      // zbv, dualpipev: rank r holds r and 2p - 1 - r
  std::vector<std::vector<Action>> actions;  // [rank] in execution order

  int num_stages() const { return ranks * virtual_stages; }
  int StageOf(int rank, int chunk) const {
    return v_shape && chunk == 1 ? 2 * ranks - 1 - rank : chunk * ranks + rank;
  }
  int RankOf(int stage) const {
    return v_shape && stage >= ranks ? 2 * ranks - 1 - stage : stage % ranks;
  }
  int ChunkOf(int stage) const { return stage / ranks; }
};

// Builds the plan, or InvalidArgument naming the factors when the schedule cannot run them:
// p, m, v >= 1; v > 1 only with interleaved_1f1b, zbv and dualpipev, which need v = 2 and
// m >= 2p; 1f1b needs m >= p; interleaved_1f1b needs m % p == 0. (gpipe accepts any m.)
Result<PipelinePlan> BuildSchedule(ScheduleKind kind, int ranks, int microbatches,
                                   int virtual_stages = 1);

// Layers [begin, end) of each model stage, split evenly: stage s gets [s * L / S, (s + 1) * L / S).
struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
};
// InvalidArgument when n_layers is not divisible by ranks * virtual_stages (or a factor is < 1).
Result<std::vector<LayerRange>> SplitLayers(int64_t n_layers, int ranks, int virtual_stages);

// Per-action costs in arbitrary units (time for one chunk's forward or backward). A split
// backward costs backward_input for I and backward_weight for W (together about `backward`).
struct ActionCosts {
  double forward = 1.0;
  double backward = 2.0;
  double message = 0.0;  // latency added when an action's input comes from another rank
  double backward_input = 1.0;
  double backward_weight = 1.0;
};

// The idle / busy fraction of every rank under uniform costs (the same on every stage): any
// forward and backward costs for gpipe and 1f1b, (p - 1) / m, and interleaved_1f1b,
// (p - 1) / (v m); for zbv and dualpipev, F = I = W (a whole backward 2F, the Zero Bubble
// paper's assumption): (p - 1) / (2m) and (2p - 3) / (6m) (derived in pipeline_schedule.cc).
// Only for layouts BuildSchedule accepts.
double BubbleFraction(ScheduleKind kind, int ranks, int microbatches, int virtual_stages);

struct TimedAction {
  Action action;
  int stage = 0;
  double start = 0;
  double end = 0;
};

struct Simulation {
  double makespan = 0;
  std::vector<double> busy;         // [rank] sum of its action costs
  std::vector<double> idle;         // [rank] makespan - busy (waiting, warm-up, drain)
  std::vector<int> peak_in_flight;  // [rank] max (micro-batch, chunk) pairs whose forward
                                    // ran and whose weight gradient (B or W) has not:
                                    // activations held
  std::vector<std::vector<TimedAction>> timeline;  // [rank] in execution order
  double bubble_fraction(int rank) const { return idle[rank] / busy[rank]; }
};

// Runs `plan` as a discrete-event simulation: every rank executes its list in order, starting an
// action when the rank is free and its inputs exist. Forward of stage s on micro-batch i needs
// forward of stage s - 1 on i; a backward (B or I) of stage s needs its own forward and the B or I
// of stage s + 1; a W needs its own I (communication costs `message` between ranks). Returns
// InvalidArgument naming the stuck actions if the plan deadlocks (some rank waits on an action that
// can never run), or if the plan is malformed.
Result<Simulation> Simulate(const PipelinePlan& plan, const ActionCosts& costs = {});
// The same with one cost per action: durations[r][i] is the cost of plan.actions[r][i] (e.g.
// measured on real ranks, to replay a step and predict its makespan from its own compute times).
Result<Simulation> SimulateWithDurations(const PipelinePlan& plan,
                                         const std::vector<std::vector<double>>& durations,
                                         double message_latency = 0.0);

// A rank's program for one step: its computes and its blocking sends and receives, in order.
// Messages carry a forward's output to the next stage and a backward's (B or I) input gradient
// to the previous one; between stages on the same rank (p == 1, or the turn of a V) there is no
// message, and a W sends nothing.
enum class StepType { kCompute, kSend, kRecv };
struct ProgramStep {
  StepType type = StepType::kCompute;
  Action action;  // compute: itself; send: the producing action; recv: the consuming action
  int stage = 0;  // model stage of `action`
  int peer = -1;  // send/recv: the other pipeline rank
  int tag = 0;    // send/recv: (direction * S + sending stage) * m + micro-batch, unique per step
};

// Every rank's program, ordered so that blocking point-to-point calls cannot deadlock even when a
// Send waits for its Recv (the rule and its proof are in pipeline_schedule.cc). Deterministic: all
// ranks derive the same programs from the same plan.
Result<std::vector<std::vector<ProgramStep>>> BuildPrograms(const PipelinePlan& plan);

// Executes `programs` abstractly with rendezvous semantics (a send and its receive complete
// together, only once both ranks have reached them) and checks that every compute has its input
// and every send its data. InvalidArgument naming the stuck steps if the programs deadlock.
Status CheckRendezvous(const PipelinePlan& plan,
                       const std::vector<std::vector<ProgramStep>>& programs);
std::string ToString(const ProgramStep& s);  // "send F3c1 -> 2 #27"

}  // namespace tenax::parallel
