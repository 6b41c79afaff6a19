// `tenax plan --validate`'s rows: the calibration rows (component measurements the profiles were
// built from) and the validation rows (published training runs the planner predicts without
// having been tuned on them). Fails when the validation error grows past the figure recorded in
// validate.h and docs/planner.md, or when an exact check fails.
#include "tenax/plan/validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "tenax/plan/testing.h"
#include "tenax/plan/validate_cases.h"

namespace tenax::plan {
namespace {

TEST(Validate, ErrorStaysWithinTheRecordedFigure) {
  auto rows = RunValidation(testing::HardwareDirs());
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  std::printf("%s", ValidationMarkdown(*rows).c_str());
  const ValidationSummary s = Summarize(*rows);
  // Every published run is a row; the few that no layout fits are shown and counted apart.
  EXPECT_EQ(s.validation_rows + s.not_predicted, static_cast<int>(PublishedRuns().size()));
  EXPECT_GE(s.validation_rows, 40);
  EXPECT_LE(s.not_predicted, kRecordedUnpredictedRows)
      << "published runs the planner no longer fits leave the error silently";
  EXPECT_LE(s.validation_mae, kRecordedValidationMae + 0.0005)
      << "the planner got worse on the published runs: validation mean absolute error "
      << 100 * s.validation_mae << "% > recorded " << 100 * kRecordedValidationMae
      << "%; fix it, or update kRecordedValidationMae and docs/planner.md together";
  EXPECT_GE(s.calibration_rows, 50);
  int checked = 0;
  for (const auto& r : *rows) {
    if (!r.checked) continue;
    ++checked;
    EXPECT_TRUE(r.pass) << r.claim << ": expected " << r.published << ", computed " << r.predicted
                        << " (" << r.tolerance << ")";
  }
  EXPECT_GE(checked, 7);
}

// The components add up to a layer: whole layers timed on an H100 (h100-sxm's [calibration]
// layers) against the cost model's sum of GEMMs, attention and elementwise kernels. The Llama
// layers without recomputation are within 5% (1-3% today; 3-12% before the attention tables and
// the streaming efficiency were measured on that GPU). Recomputation and eager GPT layers are off
// by more (docs/planner.md, "Measured on an H100 SXM5"): their mean over all layer rows may not
// grow past the recorded figure. Megatron-LM's layer as published for A100 (fused kernels, TP 8,
// with and without recomputation) is within 5% too (1.7-3.0% today).
TEST(Validate, MeasuredLayersMatchTheSumOfTheirComponents) {
  auto rows = RunValidation(testing::HardwareDirs());
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  int layers = 0, plain_llama = 0, megatron = 0;
  double sum = 0;
  for (const auto& r : *rows) {
    if (r.kind != RowKind::kCalibration || r.claim.find(" layer") == std::string::npos) continue;
    ++layers;
    sum += std::fabs(r.error);
    if (r.group == "a100-80g") {
      // Megatron-LM's own layer on Selene (Korthikanti et al. 2022): fused kernels, TP 8.
      ++megatron;
      EXPECT_LE(std::fabs(r.error), 0.05) << r.group << ": " << r.claim << ": measured "
                                          << r.published << ", model " << r.predicted;
      continue;
    }
    if (r.claim.find("Llama layer,") == std::string::npos) continue;  // recompute, GPT
    ++plain_llama;
    EXPECT_LE(std::fabs(r.error), 0.05)
        << r.group << ": " << r.claim << ": measured " << r.published << ", model " << r.predicted;
  }
  EXPECT_GE(plain_llama, 4);
  EXPECT_EQ(megatron, 3);
  ASSERT_GE(layers, 7);
  EXPECT_LE(sum / layers, 0.068) << "the layer rows' mean absolute error grew: " << sum / layers;
}

// The fp8 casts (kernels.h, Fp8LinearCastBytes) against torchao's own microbenchmark of one
// Float8Linear forward + backward on an H100 (h100-sxm's [calibration] fp8_linear): within 3%
// (0.3% today; the casts as first modelled, every operand cast again for backward, were 5-10%
// slow).
TEST(Validate, Fp8LinearSpeedupMatchesTorchaosBenchmark) {
  auto rows = RunValidation(testing::HardwareDirs());
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  int fp8 = 0;
  for (const auto& r : *rows) {
    if (r.kind != RowKind::kCalibration || r.claim.rfind("fp8 linear", 0) != 0) continue;
    ++fp8;
    EXPECT_LE(std::fabs(r.error), 0.03)
        << r.claim << ": measured " << r.published << ", model " << r.predicted;
  }
  EXPECT_EQ(fp8, 2);
}

TEST(Validate, EveryPublishedRunNamesItsSource) {
  for (const PublishedRun& r : PublishedRuns()) {
    EXPECT_GT(std::string(r.source).size(), 10u) << r.Claim();
    EXPECT_GT(r.published, 0) << r.Claim();
    EXPECT_FALSE(r.Fix().empty()) << r.Claim();
  }
}

}  // namespace
}  // namespace tenax::plan
