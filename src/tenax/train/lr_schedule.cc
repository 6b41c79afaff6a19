#include "tenax/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace tenax::train {

double LearningRate(const LrSchedulerOptions& o, double base_lr, int64_t step,
                    int64_t total_steps) {
  const int64_t warmup = std::min(o.warmup_steps, total_steps);
  if (warmup > 0 && step <= warmup) {
    return base_lr * static_cast<double>(step) / static_cast<double>(warmup);
  }
  const double min_lr = base_lr * o.min_lr_ratio;
  if (o.name == "constant") return base_lr;
  if (o.name == "cosine") {
    const int64_t span = total_steps - warmup;
    if (span <= 0) return base_lr;
    const double progress =
        std::clamp(static_cast<double>(step - warmup) / static_cast<double>(span), 0.0, 1.0);
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  // wsd
  const int64_t decay_steps = static_cast<int64_t>(std::llround(o.decay_ratio * total_steps));
  const int64_t decay_start = total_steps - decay_steps;
  if (decay_steps <= 0 || step <= decay_start) return base_lr;
  const double progress = std::clamp(
      static_cast<double>(step - decay_start) / static_cast<double>(decay_steps), 0.0, 1.0);
  double frac;  // fraction of the way from base_lr down to min_lr
  if (o.decay_type == "sqrt") {
    frac = std::sqrt(progress);
  } else if (o.decay_type == "cosine") {
    frac = 0.5 * (1.0 - std::cos(M_PI * progress));
  } else {
    frac = progress;
  }
  return base_lr - (base_lr - min_lr) * frac;
}

}  // namespace tenax::train
