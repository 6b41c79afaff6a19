// Learning-rate schedules as pure functions of the step, so resuming needs no scheduler state
// beyond the step number. Steps are 1-based: step s is the s-th optimizer update.
//   warmup:   lr * s / warmup for s <= warmup (every schedule)
//   cosine:   then half a cosine from lr down to lr * min_lr_ratio at the last step
//   wsd:      then constant ("stable") until the last decay_ratio of the steps, then decay to
//             lr * min_lr_ratio along decay_type (linear | sqrt: 1 - sqrt(progress) | cosine)
//   constant: then lr
#pragma once

#include <cstdint>

#include "tenax/config/options.h"

namespace tenax::train {

double LearningRate(const LrSchedulerOptions& schedule, double base_lr, int64_t step,
                    int64_t total_steps);

}  // namespace tenax::train
