#include "tenax/plan/layout.h"

#include <gtest/gtest.h>

namespace tenax::plan {
namespace {

TEST(Layout, NamesAreShortAndDistinct) {
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.vpp = 4;
  l.dp_shard = 64;
  l.micro_batch = 1;
  l.micro_batches = 32;
  l.recompute = Recompute::kSelective;
  l.reshard = false;
  EXPECT_EQ(LayoutName(l), "tp8 pp16v4 dopt64 mbs1x32 ac=selective bf16");
  l.dp_replicate = 2;
  l.cp = 2;
  l.fp8 = true;
  EXPECT_EQ(LayoutName(l), "tp8 cp2 pp16v4 hdopt2x64 mbs1x32 ac=selective fp8");
  l.reshard = true;
  l.first_layers = 7;
  l.last_layers = 7;
  EXPECT_EQ(LayoutName(l), "tp8 cp2 pp16v4 split7/7 hfsdp2x64 mbs1x32 ac=selective fp8");
  EXPECT_EQ(l.gpus(), 8 * 2 * 16 * 128);
}

TEST(Layout, ConstraintsParseAndFilter) {
  auto c = ParseLayoutConstraints("tp=8,pp=16,v=4,dp=64,ac=full,fp8=no,reshard=yes,mbs=2");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c->tp, 8);
  EXPECT_EQ(*c->vpp, 4);
  EXPECT_EQ(*c->recompute, Recompute::kFull);
  EXPECT_FALSE(*c->fp8);
  EXPECT_TRUE(*c->reshard);
  Layout l;
  l.tp = 8;
  l.pp = 16;
  l.vpp = 4;
  l.dp_shard = 64;
  l.micro_batch = 2;
  l.recompute = Recompute::kFull;
  EXPECT_TRUE(c->Allows(l));
  l.tp = 4;
  EXPECT_FALSE(c->Allows(l));
}

TEST(Layout, BadConstraintsSayWhatIsAllowed) {
  auto r = ParseLayoutConstraints("tp=8,etp=2");  // expert tensor parallelism: not modelled
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown key 'etp'"), std::string::npos);
  auto ep = ParseLayoutConstraints("tp=8,ep=2");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(*ep->ep, 2);
  EXPECT_FALSE(ParseLayoutConstraints("tp").ok());
  EXPECT_FALSE(ParseLayoutConstraints("tp=0").ok());
  EXPECT_FALSE(ParseLayoutConstraints("ac=some").ok());
  EXPECT_FALSE(ParseLayoutConstraints("fp8=maybe").ok());
}

}  // namespace
}  // namespace tenax::plan
