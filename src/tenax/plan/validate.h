// The planner's and simulator's checks against published numbers (issue 5): Llama 3 405B on
// 8,192 and 16,384 H100 (Meta 2024), torchtitan's Llama 3.1 8B on 8 H100, the published failure
// rates, Llama 3 70B's GPU-hours, and Young's and Daly's intervals by hand. `tenax plan
// --validate` prints them as the table in docs/planner.md; plan/validate_test.cc asserts the
// checked rows. Informational rows (other published runs, outside the list) are shown
// with their errors but not asserted.
// Non-goals: tuning anything here. The only fitted number is h100-sxm's [efficiency] matmul,
// fitted once to the first row (configs/hardware/measurements/llama3-405b-8k.jsonl).
#pragma once

#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::plan {

struct ValidationRow {
  std::string claim;      // what was run, and where the published number comes from
  std::string published;  // as published
  std::string predicted;  // the planner's or simulator's value
  double error = 0;       // predicted / published - 1 (0 when not numeric)
  bool has_error = false;
  std::string tolerance;  // "within 10%", ">= 90%", "-" (informational)
  bool checked = true;
  bool pass = true;
};

// Loads the profiles from `hardware_dirs` (HardwareSearchDirs() when empty) and computes every
// row. Fails only when a profile or model cannot be loaded.
Result<std::vector<ValidationRow>> RunValidation(const std::vector<std::string>& hardware_dirs);

// The rows as a Markdown table, followed by one line per failed check (none when all pass).
std::string ValidationMarkdown(const std::vector<ValidationRow>& rows);

}  // namespace tenax::plan
