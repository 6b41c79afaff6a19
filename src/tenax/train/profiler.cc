// Kineto's profiler around a window of steps, and the table of where the time went.
#include "tenax/train/profiler.h"

#include <fmt/format.h>
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "tenax/core/log.h"

#if defined(TENAX_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tenax::train {
namespace {

namespace kp = torch::autograd::profiler;
namespace pi = torch::profiler::impl;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Contains(const std::string& s, std::initializer_list<const char*> parts) {
  for (const char* p : parts) {
    if (s.find(p) != std::string::npos) return true;
  }
  return false;
}

std::vector<ProfileRow> Sorted(std::map<std::string, ProfileRow>& rows) {
  std::vector<ProfileRow> out;
  for (auto& [name, row] : rows) out.push_back(row);
  std::sort(out.begin(), out.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  return out;
}

}  // namespace

std::string KernelKind(const std::string& name) {
  // Attention first: cuDNN's attention kernels carry "gemm"-like words too.
  if (Contains(name, {"flash", "fmha", "attention", "Attention", "cudnn::fusion", "sdpa"})) {
    return "attention";
  }
  if (Contains(name, {"nccl", "NCCL"})) return "communication";
  if (Contains(name, {"gemm", "Gemm", "GEMM", "cutlass", "xmma", "nvjet", "cublas", "wgmma"})) {
    return "matmul";
  }
  if (Contains(name, {"Memcpy", "Memset", "memcpy", "memset"})) return "memory";
  return "other";
}

StepProfiler::~StepProfiler() {
  if (running_) (void)kp::disableProfiler();
}

Status StepProfiler::Start() {
  if (running_) return Status::Ok();
  std::set<pi::ActivityType> activities{pi::ActivityType::CPU};
  if (cuda_) activities.insert(pi::ActivityType::CUDA);
  const pi::ProfilerConfig config(pi::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                  /*profile_memory=*/false, /*with_stack=*/false);
  try {
    kp::prepareProfiler(config, activities);
    kp::enableProfiler(config, activities);
  } catch (const c10::Error& e) {
    return Unavailable(fmt::format("the profiler could not start: {}", e.what_without_backtrace()));
  }
  running_ = true;
  start_ns_ = NowNs();
  return Status::Ok();
}

Result<ProfileSummary> StepProfiler::Stop(const std::string& trace_path, int64_t steps) {
  if (!running_) return Internal("StepProfiler::Stop without Start");
#if defined(TENAX_WITH_CUDA)
  // The last step's update is still queued on the device: its kernels belong to the window.
  if (cuda_) c10::cuda::device_synchronize();
#endif
  const int64_t end_ns = NowNs();
  std::unique_ptr<kp::ProfilerResult> result;
  try {
    result = kp::disableProfiler();
    running_ = false;
    result->save(trace_path);
  } catch (const c10::Error& e) {
    running_ = false;
    return Internal(fmt::format("the profiler's trace could not be written to {}: {}", trace_path,
                                e.what_without_backtrace()));
  }
  ProfileSummary s;
  s.steps = steps;
  s.gpu = cuda_;
  s.wall_ms = static_cast<double>(end_ns - start_ns_) / 1e6;
  std::map<std::string, ProfileRow> names, kinds;
  auto add = [](std::map<std::string, ProfileRow>& rows, const std::string& key,
                const std::string& kind, double ms) {
    ProfileRow& r = rows[key];
    r.name = key;
    r.kind = kind;
    r.total_ms += ms;
    r.calls += 1;
  };
  for (const kp::KinetoEvent& e : result->events()) {
    const auto type = static_cast<libkineto::ActivityType>(e.activityType());
    const double ms = static_cast<double>(e.durationNs()) / 1e6;
    if (cuda_) {
      const bool device_work = type == libkineto::ActivityType::CONCURRENT_KERNEL ||
                               type == libkineto::ActivityType::GPU_MEMCPY ||
                               type == libkineto::ActivityType::GPU_MEMSET;
      if (!device_work) continue;
      const std::string name = e.name();
      const std::string kind = KernelKind(name);
      add(names, name, kind, ms);
      add(kinds, kind, kind, ms);
      s.device_busy_ms += ms;
    } else if (type == libkineto::ActivityType::CPU_OP) {
      add(names, e.name(), "cpu", ms);
    }
  }
  s.by_name = Sorted(names);
  s.by_kind = Sorted(kinds);
  return s;
}

std::string FormatProfile(const ProfileSummary& s, int rows) {
  const double per = s.steps > 0 ? 1.0 / static_cast<double>(s.steps) : 1.0;
  std::string out =
      fmt::format("{} step(s), {:.1f} ms per step (host clock)\n", s.steps, s.wall_ms * per);
  if (s.gpu) {
    out += fmt::format(
        "GPU busy {:.1f} ms per step ({:.1f}% of the step; the rest is the GPU waiting for the "
        "host: launches, synchronisations, host work)\n\n",
        s.device_busy_ms * per, s.wall_ms > 0 ? 100 * s.device_busy_ms / s.wall_ms : 0.0);
    out += fmt::format("{:<14} {:>12} {:>8} {:>10}\n", "kind", "ms/step", "share", "calls/step");
    for (const ProfileRow& r : s.by_kind) {
      out += fmt::format("{:<14} {:>12.2f} {:>7.1f}% {:>10.1f}\n", r.kind, r.total_ms * per,
                         s.device_busy_ms > 0 ? 100 * r.total_ms / s.device_busy_ms : 0.0,
                         static_cast<double>(r.calls) * per);
    }
    out += "\n";
  } else {
    out += "CPU operators by inclusive time (a parent's row holds its children's time)\n\n";
  }
  out += fmt::format("{:>10} {:>10} {:<14} {}\n", "ms/step", "calls/step", "kind", "name");
  int n = 0;
  for (const ProfileRow& r : s.by_name) {
    if (n++ >= rows) break;
    std::string name = r.name.size() > 160 ? r.name.substr(0, 157) + "..." : r.name;
    out += fmt::format("{:>10.3f} {:>10.1f} {:<14} {}\n", r.total_ms * per,
                       static_cast<double>(r.calls) * per, r.kind, name);
  }
  return out;
}

}  // namespace tenax::train
