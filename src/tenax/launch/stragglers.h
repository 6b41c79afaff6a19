// Straggler detection from the ranks' per-step compute times (heartbeats carry the last steps'
// compute seconds, excluding time blocked in collectives, so the ranks that wait for a slow peer
// do not look slow themselves). A rank is slow at a step when its compute time exceeds `factor`
// x the median of the other ranks at that step; slow for `steps` consecutive steps, it is
// reported once per generation.
// Thread safety: none. On several nodes node 0's agent runs one over every rank of the job
// (node_agent.cc), fed from the progress each agent publishes in etcd.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace tenax::launch {

struct Straggler {
  int local = -1;
  int64_t step = 0;      // the step that completed the run of slow steps
  double compute_s = 0;  // its compute time at that step
  double median_s = 0;   // the other ranks' median at that step
};

class StragglerDetector {
 public:
  StragglerDetector(int ranks, double factor, int steps);
  void Reset();  // a new generation
  void Add(int local, const std::vector<std::pair<int64_t, double>>& recent);
  std::vector<Straggler> Evaluate();  // stragglers found since the last call

 private:
  int ranks_;
  double factor_;
  int steps_;
  std::map<int64_t, std::vector<double>> by_step_;  // step -> compute_s per rank (<0: unknown)
  int64_t done_ = 0;                                // steps up to here are evaluated
  std::vector<int> run_;
  std::vector<bool> reported_;
};

}  // namespace tenax::launch
