// `tenax plan --validate`: how well the planner reproduces what it was built from and predicts
// what it was not.
//   - Calibration rows: the component measurements recorded in the shipped hardware profiles
//     (GEMM throughput by shape, NCCL bus bandwidth by message size, whole layers timed on the
//     GPU) against the profile's model of them. These are in-sample: they show what the profile's
//     few numbers lose.
//   - Validation rows: published end-to-end training throughput (validate_cases.h), predicted
//     from the profiles without any tuning to them.
//   - Checks: arithmetic the planner must get exactly (Young, Daly), the failure simulator
//     against published failure rates, and properties of the search.
// Both mean absolute errors are reported; plan/validate_test.cc fails when the validation error
// grows past kRecordedValidationMae.
// Non-goals: tuning anything here.
#pragma once

#include <string>
#include <vector>

#include "tenax/core/status.h"

namespace tenax::plan {

enum class RowKind { kCalibration, kValidation, kCheck };

struct ValidationRow {
  RowKind kind = RowKind::kValidation;
  std::string group;      // rows are shown in groups (hardware and source)
  std::string claim;      // what was run or measured
  std::string source;     // where the published number comes from
  std::string published;  // as published
  std::string predicted;  // the planner's or simulator's value (and the layout it chose)
  double error = 0;       // predicted / published - 1 (0 when not numeric)
  bool has_error = false;
  std::string tolerance;  // checks only: "within 0.01%", "> 90%"
  bool checked = false;   // checks only
  bool pass = true;
};

// Loads the profiles from `hardware_dirs` (HardwareSearchDirs() when empty) and computes every
// row. Fails only when a profile or model cannot be loaded.
Result<std::vector<ValidationRow>> RunValidation(const std::vector<std::string>& hardware_dirs);

struct ValidationSummary {
  int calibration_rows = 0;
  double calibration_mae = 0;  // mean |predicted / measured - 1| over calibration rows
  int validation_rows = 0;
  double validation_mae = 0;  // the same over validation rows that produced a prediction
  int not_predicted = 0;      // validation rows where no layout fits
  int failed_checks = 0;
};
ValidationSummary Summarize(const std::vector<ValidationRow>& rows);

// The validation mean absolute error recorded in docs/planner.md. The test fails when the
// validation error exceeds it (by more than rounding): a change that makes the planner worse on
// the published runs must say so and update this figure and the docs together. Rows that no
// layout fits leave the error, so their count is recorded too: a change cannot hide a bad row by
// making it not fit.
constexpr double kRecordedValidationMae = 0.086;
constexpr int kRecordedUnpredictedRows = 0;

// The rows as Markdown: the calibration table, the validation table (by group), the checks, and a
// summary line with both errors; then one line per failed check.
std::string ValidationMarkdown(const std::vector<ValidationRow>& rows);

}  // namespace tenax::plan
