#include "tenax/train/checkpoint_interval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "tenax/plan/failure.h"

namespace tenax::train {
namespace {

constexpr size_t kStepTimeWindow = 32;

}  // namespace

double PosteriorFailureRatePerHour(double prior_rate_per_hour, double prior_failures,
                                   int64_t observed_failures, double observed_hours) {
  const double a0 = std::max(prior_failures, 1e-9);
  const double b0 = a0 / std::max(prior_rate_per_hour, 1e-12);  // prior exposure, hours
  return (a0 + static_cast<double>(std::max<int64_t>(observed_failures, 0))) /
         (b0 + std::max(observed_hours, 0.0));
}

int64_t OptimalIntervalSteps(double checkpoint_cost_s, double step_time_s,
                             double failure_rate_per_hour, int64_t max_steps) {
  max_steps = std::max<int64_t>(max_steps, 1);
  if (!(step_time_s > 0) || !(failure_rate_per_hour > 0)) return max_steps;
  const double mtbf_s = 3600.0 / failure_rate_per_hour;
  const double tau_s = plan::DalyInterval(std::max(checkpoint_cost_s, 0.0), mtbf_s);
  const double steps = std::round(tau_s / step_time_s);
  if (!std::isfinite(steps) || steps >= static_cast<double>(max_steps)) return max_steps;
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

CheckpointIntervalPolicy::CheckpointIntervalPolicy(IntervalPolicyOptions options,
                                                   int64_t resume_step)
    : options_(options),
      interval_(
          std::clamp<int64_t>(options.interval, 1, std::max<int64_t>(options.total_steps, 1))),
      last_save_step_(resume_step),
      observed_hours_(options.observed.run_elapsed_s / 3600.0) {
  rate_per_hour_ =
      PosteriorFailureRatePerHour(options_.prior_rate_per_hour, options_.prior_failures,
                                  options_.observed.restarts, observed_hours_);
}

bool CheckpointIntervalPolicy::ShouldSave(int64_t step) const {
  if (!options_.automatic) return step % options_.interval == 0;
  return step - last_save_step_ >= interval_;
}

void CheckpointIntervalPolicy::RecordStepTime(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  step_times_.push_back(seconds);
  if (step_times_.size() > kStepTimeWindow) step_times_.pop_front();
}

double CheckpointIntervalPolicy::MedianStepTime() const {
  if (step_times_.empty()) return 0;
  std::vector<double> v(step_times_.begin(), step_times_.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

bool CheckpointIntervalPolicy::RecordSave(int64_t step, double blocking_seconds,
                                          double process_elapsed_s) {
  last_save_step_ = step;
  if (!options_.automatic) return false;
  blocking_seconds = std::max(blocking_seconds, 0.0);
  ++saves_;
  // Running mean: the first save may include one-time costs, but a mean recovers quickly.
  cost_s_ = cost_s_ ? *cost_s_ + (blocking_seconds - *cost_s_) / static_cast<double>(saves_)
                    : blocking_seconds;
  observed_hours_ = (options_.observed.run_elapsed_s + std::max(process_elapsed_s, 0.0)) / 3600.0;
  rate_per_hour_ =
      PosteriorFailureRatePerHour(options_.prior_rate_per_hour, options_.prior_failures,
                                  options_.observed.restarts, observed_hours_);
  const double step_s = MedianStepTime();
  if (!(step_s > 0)) return false;  // nothing measured yet: keep the configured interval
  const int64_t next = OptimalIntervalSteps(*cost_s_, step_s, rate_per_hour_, options_.total_steps);
  if (next == interval_) return false;
  interval_ = next;  // the caller logs the change once every rank adopted rank 0's interval
  return true;
}

void CheckpointIntervalPolicy::AdoptInterval(int64_t steps) {
  interval_ = std::clamp<int64_t>(steps, 1, std::max<int64_t>(options_.total_steps, 1));
}

std::string CheckpointIntervalPolicy::Explain() const {
  return fmt::format(
      "checkpoint cost {:.3f} s, step {:.3f} s, {:.4g} failures/hour (prior {:.4g}/hour, {} "
      "failure(s) in {:.2f} h observed)",
      cost_s_.value_or(0.0), MedianStepTime(), rate_per_hour_, options_.prior_rate_per_hour,
      options_.observed.restarts, observed_hours_);
}

}  // namespace tenax::train
