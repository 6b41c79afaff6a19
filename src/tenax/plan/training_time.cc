#include "tenax/plan/training_time.h"

#include "tenax/plan/units.h"

namespace tenax::plan {

FailureSummary SummarizeFailures(const FailureCosts& f, int64_t gpus) {
  FailureSummary s;
  const int64_t nodes = (gpus + f.gpus_per_node - 1) / f.gpus_per_node;
  s.mtbf = JobMtbfSeconds(f.rate, nodes);
  s.young_interval = YoungInterval(f.checkpoint_cost, s.mtbf);
  s.daly_interval = DalyInterval(f.checkpoint_cost, s.mtbf);
  const double work = kDay;  // any amount: the ratio is the same
  s.effective =
      work / DalyExpectedWallTime(work, s.daly_interval, f.checkpoint_cost, f.restart_cost, s.mtbf);
  return s;
}

TrainingEstimate EstimateTraining(double tokens, double tokens_per_s_per_gpu, int64_t gpus,
                                  double price, const std::optional<FailureCosts>& f) {
  TrainingEstimate e;
  const double g = static_cast<double>(gpus);
  e.tokens = tokens;
  e.seconds = tokens / (tokens_per_s_per_gpu * g);
  e.gpu_hours = e.seconds / kHour * g;
  e.cost = e.gpu_hours * price;
  if (!f) return e;
  e.with_failures = true;
  const int64_t nodes = (gpus + f->gpus_per_node - 1) / f->gpus_per_node;
  e.mtbf = JobMtbfSeconds(f->rate, nodes);
  e.interval = DalyInterval(f->checkpoint_cost, e.mtbf);
  e.wall_seconds =
      DalyExpectedWallTime(e.seconds, e.interval, f->checkpoint_cost, f->restart_cost, e.mtbf);
  e.effective = e.seconds / e.wall_seconds;
  e.wall_cost = e.wall_seconds / kHour * g * price;
  return e;
}

}  // namespace tenax::plan
