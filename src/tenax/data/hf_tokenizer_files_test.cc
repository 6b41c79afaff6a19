#include "tenax/data/hf_tokenizer_files.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "tenax/core/fs.h"
#include "tenax/core/temp_dir.h"
#include "tenax/data/bpe_tokenizer.h"
#include "tenax/data/pretokenizer.h"

namespace tenax::data {
namespace {

using nlohmann::json;
using testing::TempDir;

std::string Base64(const std::string& in) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(a[(v >> s) & 63]);
  }
  if (i + 1 == in.size()) {
    const uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    out += std::string{a[(v >> 18) & 63], a[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += std::string{a[(v >> 18) & 63], a[(v >> 12) & 63], a[(v >> 6) & 63], '='};
  }
  return out;
}

// A genuine rank-form BPE vocabulary: the bytes, then tokens made by concatenating two earlier
// tokens (from a small alphabet, so many tokens have several splits and merges interact).
std::string ToyTiktoken(int extra, uint32_t seed) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  std::map<std::string, int> seen;
  std::vector<int> pool = {'a', 'b', 'c', ' ', 0xC3, 0xA9};  // 0xC3 0xA9: "é"
  std::mt19937 rng(seed);
  while (static_cast<int>(tokens.size()) < 256 + extra) {
    const std::string s = tokens[pool[rng() % pool.size()]] + tokens[pool[rng() % pool.size()]];
    if (s.size() > 7 || seen.count(s)) continue;
    seen[s] = static_cast<int>(tokens.size());
    pool.push_back(static_cast<int>(tokens.size()));
    tokens.push_back(s);
  }
  std::string f;
  for (size_t i = 0; i < tokens.size(); ++i)
    f += Base64(tokens[i]) + " " + std::to_string(i) + "\n";
  return f;
}

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  EXPECT_TRUE(LocalFs().CreateDirs(ParentDir(path)).ok());
  EXPECT_TRUE(LocalFs().WriteFileAtomic(path, text).ok());
  return path;
}

std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> parts = {
      "a", "b", "c", " ", "é", "ab", "  ", "\n", "cab", "1234", "!", "'s", "\xF0\x9F\xA6\x99"};
  std::string s;
  const int n = 1 + static_cast<int>(rng() % 30);
  for (int i = 0; i < n; ++i) s += parts[rng() % parts.size()];
  return s;
}

TEST(HfTokenizerFiles, TiktokenConvertsToATokenizerJsonThatEncodesTheSame) {
  if (!HavePcre2()) GTEST_SKIP() << "built without PCRE2 (libpcre2-dev)";
  TempDir dir;
  const std::string tt = Write(dir, "toy.model", ToyTiktoken(120, 5));
  Result<HfTokenizerFiles> files = MakeHfTokenizerFiles("tiktoken:" + tt, 512);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->files.size(), 3u);
  EXPECT_EQ(files->bos, std::optional<uint32_t>(376));  // 256 + 120 ordinary tokens, then specials
  EXPECT_EQ(files->eos, std::optional<uint32_t>(377));
  for (const auto& [name, text] : files->files) Write(dir, "hf/" + name, text);
  const json config = json::parse(files->files.at("tokenizer_config.json"));
  EXPECT_EQ(config["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(config["eos_token"], "<|end_of_text|>");
  EXPECT_EQ(config["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(config["model_max_length"], 512);
  const json tj = json::parse(files->files.at("tokenizer.json"));
  EXPECT_EQ(tj["model"]["vocab"].size(), 376u);
  EXPECT_EQ(tj["added_tokens"].size(), 256u);
  EXPECT_EQ(tj["post_processor"]["special_tokens"]["<|begin_of_text|>"]["ids"][0], 376);

  // The converted file, read by tenax's own tokenizer.json loader (merge-list form, a different
  // code path from the rank form), gives the ids of the tiktoken file on random text.
  Result<std::unique_ptr<Tokenizer>> ranks = MakeTokenizer("tiktoken:" + tt);
  Result<std::unique_ptr<Tokenizer>> merges = MakeTokenizer("hf:" + (dir / "hf"));
  ASSERT_TRUE(ranks.ok() && merges.ok()) << merges.status().ToString();
  EXPECT_EQ((*merges)->bos(), (*ranks)->bos());
  EXPECT_EQ((*merges)->eos(), (*ranks)->eos());
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    const std::string text = RandomText(rng);
    EXPECT_EQ(*(*merges)->Encode(text), *(*ranks)->Encode(text)) << text;
  }
  EXPECT_EQ(*(*merges)->EncodeWithSpecialTokens("ab<|eot_id|>"),
            *(*ranks)->EncodeWithSpecialTokens("ab<|eot_id|>"));
}

TEST(HfTokenizerFiles, HfSpecIsCopiedAndCompanionsWrittenWhenAbsent) {
  if (!HavePcre2()) GTEST_SKIP() << "built without PCRE2 (libpcre2-dev)";
  TempDir dir;
  const std::string tt = Write(dir, "toy.model", ToyTiktoken(40, 6));
  Result<HfTokenizerFiles> from_tt = MakeHfTokenizerFiles("tiktoken:" + tt, 64);
  ASSERT_TRUE(from_tt.ok());
  const std::string tokenizer_json = from_tt->files.at("tokenizer.json");
  // Only tokenizer.json: the companions are written from the BOS/EOS tenax uses.
  Write(dir, "a/tokenizer.json", tokenizer_json);
  Result<HfTokenizerFiles> a = MakeHfTokenizerFiles("hf:" + (dir / "a/tokenizer.json"), 64);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->files.at("tokenizer.json"), tokenizer_json);
  EXPECT_EQ(json::parse(a->files.at("special_tokens_map.json")),
            json({{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}}));
  // With a tokenizer_config.json beside it, that one is kept as written (and decides BOS/EOS).
  Write(dir, "b/tokenizer.json", tokenizer_json);
  const std::string cfg = R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})";
  Write(dir, "b/tokenizer_config.json", cfg);
  Result<HfTokenizerFiles> b = MakeHfTokenizerFiles("hf:" + (dir / "b"), 64);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->files.at("tokenizer_config.json"), cfg);
  EXPECT_EQ(b->eos, std::optional<uint32_t>(296 + 9));
  EXPECT_EQ(json::parse(b->files.at("special_tokens_map.json"))["eos_token"], "<|eot_id|>");
}

TEST(HfTokenizerFiles, TokenizersWithoutAnHfFormSaySo) {
  Result<HfTokenizerFiles> byte = MakeHfTokenizerFiles("byte", 64);
  ASSERT_TRUE(byte.ok());
  EXPECT_TRUE(byte->files.empty());
  EXPECT_EQ(byte->eos, std::optional<uint32_t>(256));
  EXPECT_NE(byte->note.find("no Hugging Face form"), std::string::npos);
  EXPECT_FALSE(MakeHfTokenizerFiles("bpe:x", 64).ok());
  EXPECT_EQ(MakeHfTokenizerFiles("tiktoken:/no/such/file", 64).status().code(),
            StatusCode::kNotFound);
}

TEST(HfTokenizerFiles, AbsoluteSpec) {
  EXPECT_EQ(AbsoluteTokenizerSpec("byte"), "byte");
  EXPECT_EQ(AbsoluteTokenizerSpec("hf:/a/b"), "hf:/a/b");
  const std::string abs = AbsoluteTokenizerSpec("tiktoken:x/tokenizer.model");
  EXPECT_EQ(abs.rfind("tiktoken:/", 0), 0u) << abs;
  EXPECT_EQ(abs.substr(abs.size() - 18), "/x/tokenizer.model");
}

}  // namespace
}  // namespace tenax::data
