#include "tenax/model/cpu_parallel.h"

#include <ATen/Parallel.h>

#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "libtorch's threads are OpenMP's: cpu_parallel.cc needs -fopenmp (CMakeLists.txt)"
#endif

namespace tenax::model {

void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& f) {
  at::parallel_for(begin, end, grain, f);
}

}  // namespace tenax::model
