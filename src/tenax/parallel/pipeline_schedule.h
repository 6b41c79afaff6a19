// Pipeline-parallel schedules as data: for p pipeline ranks, m micro-batches and v virtual stages
// (model chunks per rank), the ordered list of forward/backward actions each rank runs in one
// step, plus a discrete-event simulator that times a schedule under per-action costs and reports
// every rank's busy and idle time, the makespan and the peak number of micro-batches whose
// activations a rank holds; and each rank's program (computes, sends and receives in a
// deadlock-free order) that the executor (pipeline.h) runs.
//
// Schedules (S = p * v model stages; chunk c of rank r holds model stage c * p + r):
//   gpipe             all m forwards, then all m backwards (v = 1). Holds m micro-batches.
//   1f1b              PipeDream-Flush (Narayanan et al. 2021): rank r warms up with p - 1 - r
//                     forwards, then alternates one forward / one backward, then cools down with
//                     the remaining backwards (v = 1, m >= p). Holds at most p micro-batches.
//   interleaved_1f1b  Megatron-LM's interleaved schedule (v >= 1, m % p == 0): micro-batches go
//                     through the chunks in groups of p; warm-up (p - r - 1) * 2 + (v - 1) * p
//                     forwards (all m * v when m == p), then 1F1B over (micro-batch, chunk) pairs.
//
// Bubble under uniform costs (forward f, backward b per action, the same on every stage): every
// rank is busy m * v * (f + b); the makespan exceeds that by the bubble, and
//   bubble fraction := idle / busy = (makespan - busy) / busy
// which is exactly (p - 1) / m for gpipe and 1f1b and (p - 1) / (v * m) for interleaved_1f1b
// (Narayanan et al.'s t_pb / t_id). The ratio does not depend on the unit of cost, so per-action
// costs need not be scaled by 1 / v.
//
// Non-goals: zero-bubble / split-backward schedules, non-uniform stage sizes, torch (this file is
// pure arithmetic so the planner can use it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::parallel {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved1F1B };
// "gpipe" | "1f1b" | "interleaved_1f1b" (the names [parallelism] pipeline_schedule takes).
Result<ScheduleKind> ParseScheduleKind(const std::string& name);
const char* ScheduleName(ScheduleKind kind);

enum class ActionKind { kForward, kBackward };

struct Action {
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  int chunk = 0;  // model chunk on this rank, in [0, v); its model stage is chunk * p + rank
  bool operator==(const Action& o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
};
std::string ToString(const Action& a);  // "F3c1": forward of micro-batch 3 on chunk 1

// One step's actions for every rank of a pipeline. Invariant: each rank's list holds exactly one
// forward and one backward per (micro-batch, chunk), the forward first.
struct PipelinePlan {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int ranks = 1;                             // p: pipeline-parallel degree
  int microbatches = 1;                      // m
  int virtual_stages = 1;                    // v: chunks per rank
  std::vector<std::vector<Action>> actions;  // [rank] in execution order

  int num_stages() const { return ranks * virtual_stages; }
  int StageOf(int rank, int chunk) const { return chunk * ranks + rank; }
  int RankOf(int stage) const { return stage % ranks; }
  int ChunkOf(int stage) const { return stage / ranks; }
};

// Builds the plan, or InvalidArgument naming the factors when the schedule cannot run them:
// p, m, v >= 1; v > 1 only with interleaved_1f1b; 1f1b needs m >= p; interleaved_1f1b needs
// m % p == 0. (gpipe accepts any m.)
Result<PipelinePlan> BuildSchedule(ScheduleKind kind, int ranks, int microbatches,
                                   int virtual_stages = 1);

// Layers [begin, end) of each model stage, split evenly: stage s gets [s * L / S, (s + 1) * L / S).
struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
};
// InvalidArgument when n_layers is not divisible by ranks * virtual_stages (or a factor is < 1).
Result<std::vector<LayerRange>> SplitLayers(int64_t n_layers, int ranks, int virtual_stages);

// Per-action costs in arbitrary units (time for one chunk's forward or backward).
struct ActionCosts {
  double forward = 1.0;
  double backward = 2.0;
  double message = 0.0;  // latency added when an action's input comes from another rank
};

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
                                    // ran and whose backward has not: activations held
  std::vector<std::vector<TimedAction>> timeline;  // [rank] in execution order
  double bubble_fraction(int rank) const { return idle[rank] / busy[rank]; }
};

// Runs `plan` as a discrete-event simulation: every rank executes its list in order, starting an
// action when the rank is free and its inputs exist. Forward of stage s on micro-batch i needs
// forward of stage s - 1 on i; backward of stage s needs its own forward and backward of stage
// s + 1 (communication is free). Returns InvalidArgument naming the stuck actions if the plan
// deadlocks (some rank waits on an action that can never run), or if the plan is malformed.
Result<Simulation> Simulate(const PipelinePlan& plan, const ActionCosts& costs = {});
// The same with one cost per action: durations[r][i] is the cost of plan.actions[r][i] (e.g.
// measured on real ranks, to replay a step and predict its makespan from its own compute times).
Result<Simulation> SimulateWithDurations(const PipelinePlan& plan,
                                         const std::vector<std::vector<double>>& durations,
                                         double message_latency = 0.0);

// A rank's program for one step: its computes and its blocking sends and receives, in order.
// Messages carry a forward's output to the next stage and a backward's input gradient to the
// previous one; between chunks on the same rank (only when p == 1) there is no message.
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
