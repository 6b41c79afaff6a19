// The --inject grammar: every kind parses with its fields and defaults, gen=all, and malformed
// specs are refused with a message that names the item and the grammar.
#include "tenax/core/fault_injection.h"

#include <gtest/gtest.h>

namespace tenax {
namespace {

TEST(FaultInjectionTest, ParsesEveryKind) {
  Result<std::vector<Fault>> f = ParseFaults(
      "crash:rank=1:step=8:how=exit:code=3,hang:rank=0:step=5:gen=2,slow:rank=1:factor=2.5,"
      "nan:rank=0:step=4,ckpt-fail:step=9,ckpt-corrupt:step=6,kill-in-ckpt:rank=1:step=3,"
      "spike:rank=1:step=10:gen=all,spike:rank=0:step=11:factor=7");
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->size(), 9u);
  const std::vector<Fault>& v = *f;
  EXPECT_EQ(v[0].kind, "crash");
  EXPECT_EQ(v[0].rank, 1);
  EXPECT_EQ(v[0].step, 8);
  EXPECT_EQ(v[0].how, "exit");
  EXPECT_EQ(v[0].code, 3);
  EXPECT_EQ(v[0].generation, 0);
  EXPECT_EQ(v[1].kind, "hang");
  EXPECT_EQ(v[1].generation, 2);
  EXPECT_EQ(v[2].kind, "slow");
  EXPECT_DOUBLE_EQ(v[2].factor, 2.5);
  EXPECT_EQ(v[2].step, 1);  // from step 1 by default
  EXPECT_EQ(v[4].kind, "ckpt-fail");
  EXPECT_EQ(v[5].kind, "ckpt-corrupt");
  EXPECT_EQ(v[6].kind, "kill-in-ckpt");
  EXPECT_EQ(v[7].kind, "spike");
  EXPECT_EQ(v[7].step, 10);
  EXPECT_DOUBLE_EQ(v[7].factor, 100);  // the default
  EXPECT_EQ(v[7].generation, Fault::kEveryGeneration);
  EXPECT_DOUBLE_EQ(v[8].factor, 7);
}

TEST(FaultInjectionTest, RefusesMalformedSpecs) {
  for (const std::string bad :
       {"boom:rank=1", "crash:rank=1", "crash:rank=1:step=2:time=3", "hang:step=3",
        "slow:rank=0", "spike:rank=0", "spike:rank=0:step=3:factor=1", "nan:rank=0:step=0",
        "crash:rank=0:step=2:gen=some", "nan:rank=x:step=2"}) {
    Result<std::vector<Fault>> f = ParseFaults(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(f.status().message().find("--inject"), std::string::npos) << f.status().message();
  }
}

}  // namespace
}  // namespace tenax
