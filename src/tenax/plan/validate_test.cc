// The validation against published numbers. Prints the table docs/planner.md shows (run
// `tenax plan --validate` for the same output) and fails on any checked row outside its
// tolerance.
#include "tenax/plan/validate.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

TEST(Validate, PublishedNumbersWithinTolerance) {
  auto rows = RunValidation(testing::HardwareDirs());
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  std::printf("%s", ValidationMarkdown(*rows).c_str());
  int checked = 0;
  for (const auto& r : *rows) {
    if (!r.checked) continue;
    ++checked;
    EXPECT_TRUE(r.pass) << r.claim << ": published " << r.published << ", predicted " << r.predicted
                        << " (" << r.tolerance << ")";
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace tenax::plan
