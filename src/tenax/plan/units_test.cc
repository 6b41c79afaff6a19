#include "tenax/plan/units.h"

#include <gtest/gtest.h>

namespace tenax::plan {
namespace {

TEST(Units, CountsWithDecimalAndBinarySuffixes) {
  EXPECT_EQ(*ParseCount("2048", "x"), 2048);
  EXPECT_EQ(*ParseCount("16Mi", "x"), 16777216);
  EXPECT_EQ(*ParseCount("15T", "x"), 15e12);
  EXPECT_EQ(*ParseCount("1.5e3K", "x"), 1.5e6);
  EXPECT_EQ(*ParseCount("16,777,216", "x"), 16777216);
  EXPECT_EQ(*ParsePositiveInt("4Ki", "x"), 4096);
}

TEST(Units, BadCountsNameTheFlag) {
  auto r = ParseCount("16Q", "--tokens");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--tokens"), std::string::npos);
  EXPECT_NE(r.status().message().find("'Q'"), std::string::npos);
  EXPECT_FALSE(ParseCount("", "x").ok());
  EXPECT_FALSE(ParseCount("-3", "x").ok());
  EXPECT_FALSE(ParsePositiveInt("1.5", "x").ok());
  EXPECT_FALSE(ParsePositiveInt("0", "x").ok());
}

TEST(Units, Durations) {
  EXPECT_EQ(*ParseDuration("90", "x"), 90);
  EXPECT_EQ(*ParseDuration("90s", "x"), 90);
  EXPECT_EQ(*ParseDuration("5m", "x"), 300);
  EXPECT_EQ(*ParseDuration("5min", "x"), 300);
  EXPECT_EQ(*ParseDuration("1.5h", "x"), 5400);
  EXPECT_EQ(*ParseDuration("54d", "x"), 54 * 86400.0);
  EXPECT_EQ(*ParseDuration("1w", "x"), 7 * 86400.0);
  auto bad = ParseDuration("3 fortnights", "--duration");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--duration"), std::string::npos);
}

TEST(Units, Formatting) {
  EXPECT_EQ(FormatMoney(1234567.4), "$1,234,567");
  EXPECT_EQ(FormatMoney(999), "$999");
  EXPECT_EQ(FormatDuration(45), "45.0 s");
  EXPECT_EQ(FormatDuration(3 * kHour), "3.00 h");
  EXPECT_EQ(FormatDuration(132.2 * kDay), "132.2 d");
  EXPECT_EQ(FormatCount(16777216), "16.78M");
  EXPECT_EQ(FormatGiB(80 * kGiB), "80.0 GiB");
}

}  // namespace
}  // namespace tenax::plan
