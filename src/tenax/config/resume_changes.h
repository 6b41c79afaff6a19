// What a resumed run changes on purpose: the settings of the optimisation trajectory that differ
// between the config a checkpoint was written with and the config resuming it. A resume with the
// same settings continues the uninterrupted trajectory exactly; one that lowers optimizer.lr or
// stretches training.steps is a deliberate change, and the run log says so instead of applying it
// silently. The global batch has its own rules (config/batch.h).
// Compared: every key of [optimizer] and [lr_scheduler]; training.steps (the schedule spans it),
// training.max_norm (clipping), training.seq_len and job.seed (the data order). Both configs are
// normalised through ParseConfig/ConfigToToml first, so a key left at its default compares equal
// to the same value written out.
#pragma once

#include <string>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"

namespace tenax {

// One line per changed setting, e.g. "optimizer.lr: 0.0003 -> 0.0001", sorted by section and key.
// Fails only when `saved_toml` does not parse as a config (e.g. written by a tenax with other
// keys).
Result<std::vector<std::string>> TrajectoryChanges(const std::string& saved_toml,
                                                   const Config& now);

}  // namespace tenax
