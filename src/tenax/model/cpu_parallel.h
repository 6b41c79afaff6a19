// ParallelFor: at::parallel_for for tenax's own CPU loops (model/cpu_kernels.h), on libtorch's
// intra-op threads.
//
// Why not at::parallel_for directly: it is a header template whose threaded branch is compiled
// only where _OPENMP is defined (ATen/Parallel-inl.h, libtorch built with OpenMP as Debian's
// is). Called from a file compiled without -fopenmp, as all of tenax is, it runs the whole range
// on the calling thread, silently: at two intra-op threads half the machine idled during every
// loop of fused_layers.cc. cpu_parallel.cc alone is compiled with -fopenmp (CMakeLists.txt), so
// the template is instantiated there with its OpenMP branch and the range is split over
// at::get_num_threads() threads exactly as ATen's own kernels split theirs.
//
// Contract: f(begin, end) is called on disjoint sub-ranges that cover [begin, end), each at
// least `grain` long except perhaps the last; on one thread when the range is no longer than
// `grain`, when at::get_num_threads() is 1, or when called from inside a parallel region. An
// exception thrown by f is rethrown on the calling thread. The split depends on the thread
// count, so f must give the same result for any split (element- or row-wise work, or partial
// sums kept per fixed block, as the RMSNorm weight gradient does).
#pragma once

#include <cstdint>
#include <functional>

namespace tenax::model {

// Elements per task for element-wise loops, as ATen's own (at::internal::GRAIN_SIZE).
inline constexpr int64_t kLoopGrain = int64_t{1} << 15;

void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& f);

}  // namespace tenax::model
