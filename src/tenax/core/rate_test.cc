#include "tenax/core/rate.h"

#include <gtest/gtest.h>

namespace tenax {
namespace {

TEST(ParsePerWindow, ThreeUnitsAndNothingElse) {
  EXPECT_DOUBLE_EQ(ParsePerWindow("10/h")->count, 10);
  EXPECT_DOUBLE_EQ(ParsePerWindow("10/h")->window_s, 3600);
  EXPECT_DOUBLE_EQ(ParsePerWindow("0.5/min")->per_second(), 0.5 / 60);
  EXPECT_DOUBLE_EQ(ParsePerWindow("3/s")->per_second(), 3);
  EXPECT_DOUBLE_EQ(ParsePerWindow("0/h")->count, 0);
  for (const char* bad : {"", "10", "/h", "10/", "10/day", "-1/h", "1e999/h", "x/s", "1/h "}) {
    EXPECT_FALSE(ParsePerWindow(bad)) << bad;
  }
}

}  // namespace
}  // namespace tenax
