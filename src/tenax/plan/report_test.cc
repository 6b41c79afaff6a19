#include "tenax/plan/report.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tenax/plan/search.h"
#include "tenax/plan/testing.h"

namespace tenax::plan {
namespace {

int64_t Number(const std::string& text) {  // "1,908" -> 1908
  std::string digits;
  for (char ch : text) {
    if (ch != ',') digits += ch;
  }
  return std::stoll(digits);
}

// The header of `tenax plan` for a model small enough that its parameters are counted by hand:
// 2 layers of dim 64 (4 heads, no GQA), SwiGLU of 128, vocabulary 256, untied output.
// Per layer: wq, wk, wv, wo 4 x 64 x 64 = 16,384; w1, w3, w2 3 x 64 x 128 = 24,576; two norms 128.
// Embedding and output 2 x 256 x 64 = 32,768; final norm 64. Total 2 x 41,088 + 32,832 = 115,008.
TEST(Report, HeaderCountsSmallModelsAndEveryLayoutLookedAt) {
  ModelSpec m;
  m.name = "tiny";
  m.n_layers = 2;
  m.dim = 64;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.ffn_hidden_dim = 128;
  m.vocab_size = 256;
  const Workload w = *MakeWorkload(m, Architecture{}, Software{}, 256, 64 * 256);
  const HardwareProfile hw = *LoadHardwareProfile("h100-sxm", testing::HardwareDirs());
  SearchOptions o;
  o.gpus = 8;
  o.accept = [](const Layout& l) { return l.tp == 1; };  // some layouts dropped before costing
  o.reject_reason = "tensor parallel (test)";
  const SearchResult s = *SearchLayouts(w, hw, o);
  PlanReport r;
  r.workload = &w;
  r.hardware = &hw;
  r.gpus = 8;
  r.search = &s;
  const std::string text = PlanText(r);
  EXPECT_NE(text.find("(115,008 parameters,"), std::string::npos) << text;

  // "searched X layouts in T s: C costed, F fit, dropped:" then one "N  reason" line per reason:
  // every layout looked at is either costed or dropped before costing, so no count exceeds X.
  std::smatch head;
  ASSERT_TRUE(std::regex_search(
      text, head,
      std::regex(R"(searched ([\d,]+) layouts in \S+ s: ([\d,]+) costed, ([\d,]+) fit)")))
      << text;
  const int64_t searched = Number(head[1]), costed = Number(head[2]), fit = Number(head[3]);
  EXPECT_EQ(costed, s.evaluated);
  EXPECT_EQ(fit, s.fitting);
  int64_t before_costing = 0, lines = 0;
  const std::regex drop(R"(\n\s+([\d,]+)  ([^\n]+))");
  const std::string tail = text.substr(static_cast<size_t>(head.position(0)));
  for (auto it = std::sregex_iterator(tail.begin(), tail.end(), drop); it != std::sregex_iterator();
       ++it) {
    const std::string reason = (*it)[2];
    if (s.dropped.count(reason) == 0) break;  // past the dropped list
    ++lines;
    EXPECT_LE(Number((*it)[1]), searched) << reason;
    if (reason != kDoesNotFitReason) before_costing += Number((*it)[1]);
  }
  EXPECT_EQ(lines, static_cast<int64_t>(s.dropped.size()));
  EXPECT_GT(s.dropped.at("tensor parallel (test)"), 0);
  EXPECT_EQ(searched, costed + before_costing);
  // The JSON carries the same counts.
  const nlohmann::json j = PlanJson(r, false);
  EXPECT_EQ(j["search"]["searched"], searched);
  EXPECT_EQ(j["search"]["evaluated"], costed);
}

}  // namespace
}  // namespace tenax::plan
