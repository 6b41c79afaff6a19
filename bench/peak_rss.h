// The process's peak resident set size so far, in MiB (getrusage's ru_maxrss, KiB on Linux), for
// the benchmarks that report memory. Per process: run the variants being compared in their own
// processes.
#pragma once

#include <sys/resource.h>

namespace tenax::bench {

inline double MaxRssMiB() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace tenax::bench
