// A window of training steps profiled with libtorch's Kineto profiler (metrics.profile_step and
// metrics.profile_steps): where a step's time goes, on the GPU kernel by kernel.
//
// Writes, in the run folder's profile/ (RunPaths::profile_trace, profile_table):
//   rank<R>-steps<A>-<B>.json   the Chrome trace (open it in Perfetto or chrome://tracing)
//   rank<R>-steps<A>-<B>.txt    a table: the time per step of each GPU kernel (grouped by name,
//                               largest first) and of each kind (matmul, attention,
//                               communication, memory, other), and how busy the GPU was
// On a CPU rank the table lists operators instead, by their inclusive time (a parent operator
// holds its children's time: the rows overlap).
//
// Non-goals: profiling every rank's window differently, memory timelines, Python-side stacks.
// Thread safety: one profiler per process, driven by the training thread (Kineto's profiler is
// thread-local to the thread that enabled it; the checkpoint writer's threads are not seen).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::train {

// One row of the table: events of one name (or one kind) over the window.
struct ProfileRow {
  std::string name;
  std::string kind;  // matmul | attention | communication | memory | other | cpu
  double total_ms = 0;
  int64_t calls = 0;
};

struct ProfileSummary {
  int64_t steps = 0;
  double wall_ms = 0;         // the window, host clock, first step's start to the last's end
  double device_busy_ms = 0;  // GPU: the sum of kernel and copy durations (0 on a CPU rank)
  bool gpu = false;
  std::vector<ProfileRow> by_name;  // largest first
  std::vector<ProfileRow> by_kind;  // largest first
};

// The kind of a GPU kernel, from its name (cuBLAS/CUTLASS GEMMs, flash/cuDNN attention, NCCL).
std::string KernelKind(const std::string& name);

// The table as written to the .txt file (top `rows` names).
std::string FormatProfile(const ProfileSummary& s, int rows = 40);

class StepProfiler {
 public:
  // Profiles the CUDA device as well when `cuda` (the trainer's device is a GPU).
  explicit StepProfiler(bool cuda) : cuda_(cuda) {}
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Before the window's first step. An error (a libtorch without Kineto) leaves training as is.
  Status Start();
  bool running() const { return running_; }
  // After the window's last step: waits for the device, stops, writes the trace to `trace_path`
  // and returns the summary of `steps` steps.
  Result<ProfileSummary> Stop(const std::string& trace_path, int64_t steps);

 private:
  const bool cuda_;  // constant after construction
  bool running_ = false;
  int64_t start_ns_ = 0;
};

}  // namespace tenax::train
