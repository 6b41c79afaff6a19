// Unit tests of the pretokenizer and byte-level BPE on small hand-made vocabularies. The full
// Llama 3 tokenizer is compared against an independent implementation in
// tests/llama3_tokenizer_test.cc.
#include "tenax/data/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "tenax/core/temp_dir.h"

namespace tenax::data {
namespace {

using testing::TempDir;

std::vector<std::string> Pieces(std::string_view pattern, std::string_view text) {
  Result<std::unique_ptr<Pretokenizer>> p = Pretokenizer::Create(pattern);
  TENAX_CHECK(p.ok());
  std::vector<std::string> out;
  TENAX_CHECK((*p)->Split(text, [&](std::string_view s) { out.emplace_back(s); }).ok());
  return out;
}

using V = std::vector<std::string>;

#define SKIP_WITHOUT_PCRE2() \
  if (!HavePcre2()) GTEST_SKIP() << "built without PCRE2 (libpcre2-dev)"

TEST(Pretokenizer, Llama3PatternSplitsLikeTiktoken) {
  SKIP_WITHOUT_PCRE2();
  const auto p = [](std::string_view t) { return Pieces(kLlama3Pattern, t); };
  EXPECT_EQ(p("Hello world!"), (V{"Hello", " world", "!"}));
  EXPECT_EQ(p("I'm don't WE'LL"), (V{"I", "'m", " don", "'t", " WE", "'LL"}));
  EXPECT_EQ(p("1234567 x"), (V{"123", "456", "7", " x"}));
  // Spaces: a run before a word leaves its last space to the word; a trailing run stays whole.
  EXPECT_EQ(p("a   b  "), (V{"a", "  ", " b", "  "}));
  EXPECT_EQ(p("a\n\n  b"), (V{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(p("x!!\n\ny"), (V{"x", "!!\n\n", "y"}));
  // Letters in any script, with one leading non-letter.
  EXPECT_EQ(p("\xE4\xBD\xA0\xE5\xA5\xBD,\xE4\xB8\x96"),
            (V{"\xE4\xBD\xA0\xE5\xA5\xBD", ",\xE4\xB8\x96"}));
  // Case folding is Unicode's: (?i:'s) also takes LATIN SMALL LETTER LONG S (U+017F).
  EXPECT_EQ(p("it'\xC5\xBF"), (V{"it", "'\xC5\xBF"}));
  // \s is Unicode White_Space, which includes NEL (U+0085): the run keeps its last character
  // for the letters that follow, as with spaces.
  EXPECT_EQ(p("a\xC2\x85\xC2\x85"
              "b"),
            (V{"a", "\xC2\x85",
               "\xC2\x85"
               "b"}));
  // ...and excludes ZERO WIDTH NO-BREAK SPACE (U+FEFF), which is punctuation-like here.
  EXPECT_EQ(p("a \xEF\xBB\xBF"
              "b"),
            (V{"a", " \xEF\xBB\xBF", "b"}));
}

TEST(Pretokenizer, InvalidUtf8BecomesItsOwnPieceAndNothingIsLost) {
  SKIP_WITHOUT_PCRE2();
  EXPECT_EQ(Pieces(kLlama3Pattern,
                   "ab\xFF\xFE"
                   "cd"),
            (V{"ab", "\xFF\xFE", "cd"}));
  EXPECT_EQ(Pieces(kLlama3Pattern, "\xC3"), (V{"\xC3"}));  // truncated character at the end
  EXPECT_EQ(Pieces(kLlama3Pattern, ""), V{});
}

TEST(Pretokenizer, LongRunsDoNotExhaustTheRegexEngine) {
  SKIP_WITHOUT_PCRE2();
  // 1 MB of spaces then a word: \s+(?!\S) backtracks over the whole run.
  const std::string text = std::string(1 << 20, ' ') + "word";
  const V pieces = Pieces(kLlama3Pattern, text);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), (1u << 20) - 1);
  EXPECT_EQ(pieces[1], " word");
}

// Builds without PCRE2 (the GPU machine has no Debian packages) say how to enable it.
TEST(Pretokenizer, AvailableOrSaysHowToEnableIt) {
  Result<std::unique_ptr<Pretokenizer>> p = Pretokenizer::Create(kLlama3Pattern);
  if (HavePcre2()) {
    EXPECT_TRUE(p.ok()) << p.status().ToString();
  } else {
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("libpcre2-dev"), std::string::npos);
  }
}

TEST(Pretokenizer, WhitespaceClassesAreRewritten) {
  Result<std::string> r = RewriteWhitespaceClasses(R"(\s+(?!\S)|[^\s\p{L}]|\\s|[\]s])");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->find("\\s"), r->find("\\\\s") + 1);  // only the escaped backslash keeps its 's'
  EXPECT_NE(r->find("[^\\x{09}-\\x{0D}"), std::string::npos) << *r;  // \S and [^\s...]
  EXPECT_NE(r->find("[\\]s]"), std::string::npos) << *r;             // class with ']' kept
  EXPECT_FALSE(RewriteWhitespaceClasses(R"([\S])").ok());
}

// A rank-form vocabulary over bytes plus tokens built by merging pairs in order, so it is a
// genuine BPE vocabulary (every token's parts have lower ranks). Also returns its merge list
// written the way Hugging Face's tiktoken converter writes one: for every token in rank order,
// every split into two tokens. (A list with only the pair that created each token would be a
// different tokenizer: rank form merges any pair whose concatenation is a token.)
struct ToyVocab {
  std::vector<std::string> tokens;
  std::vector<std::array<uint32_t, 3>> merges;
};

ToyVocab MakeToyVocab(int extra, uint32_t seed) {
  ToyVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
  std::map<std::string, uint32_t> id;
  for (uint32_t i = 0; i < 256; ++i) id[v.tokens[i]] = i;
  std::mt19937 rng(seed);
  // Candidates start from the letters a-d and space; merges only combine existing tokens.
  std::vector<uint32_t> pool = {'a', 'b', 'c', 'd', ' '};
  while (static_cast<int>(v.tokens.size()) < 256 + extra) {
    const uint32_t l = pool[rng() % pool.size()], r = pool[rng() % pool.size()];
    const std::string s = v.tokens[l] + v.tokens[r];
    if (s.size() > 6 || id.count(s)) continue;
    const auto m = static_cast<uint32_t>(v.tokens.size());
    id[s] = m;
    v.tokens.push_back(s);
    pool.push_back(m);
  }
  for (uint32_t m = 256; m < v.tokens.size(); ++m) {
    const std::string& t = v.tokens[m];
    std::vector<std::array<uint32_t, 3>> local;
    for (size_t k = 1; k < t.size(); ++k) {
      const auto l = id.find(t.substr(0, k)), r = id.find(t.substr(k));
      if (l != id.end() && r != id.end()) local.push_back({l->second, r->second, m});
    }
    std::sort(local.begin(), local.end());
    v.merges.insert(v.merges.end(), local.begin(), local.end());
  }
  return v;
}

std::unique_ptr<BpeTokenizer> Toy(const ToyVocab& v, bool merge_form, bool ignore_merges = true) {
  BpeModel m;
  m.name = "toy";
  m.tokens = v.tokens;
  if (merge_form) m.merges = v.merges;
  m.ignore_merges = ignore_merges;
  m.pattern = std::string(kLlama3Pattern);
  m.tokens.push_back("<|eot|>");
  m.special_ids = {static_cast<uint32_t>(m.tokens.size() - 1)};
  m.eos = m.special_ids[0];
  Result<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::Create(std::move(m));
  TENAX_CHECK(t.ok());
  return std::move(t).value();
}

TEST(Bpe, MergesLowestRankFirstByHand) {
  SKIP_WITHOUT_PCRE2();
  ToyVocab v = MakeToyVocab(0, 1);
  for (const char* s : {"ab", "bc", "abc"}) v.tokens.push_back(s);  // ranks 256, 257, 258
  std::unique_ptr<BpeTokenizer> t = Toy(v, false);
  // abcbc: ab(256) first -> [ab c b c]; then bc(257) -> [ab c bc]; then ab+c = abc(258).
  for (bool heap : {false, true}) {
    std::vector<uint32_t> ids;
    t->EncodePiece("abcbc", heap, &ids);
    EXPECT_EQ(ids, (std::vector<uint32_t>{258, 257})) << "heap " << heap;
  }
  std::vector<uint32_t> ids;
  t->EncodePiece("abc", false, &ids);  // a whole token is emitted directly
  EXPECT_EQ(ids, std::vector<uint32_t>{258});
}

// The heap loop (long pieces) and tiktoken's quadratic loop (short pieces) agree, and the rank
// form agrees with the merge-list form of the same vocabulary, on 3,000 random pieces.
TEST(Bpe, HeapAndQuadraticLoopsAndBothFormsAgree) {
  SKIP_WITHOUT_PCRE2();
  const ToyVocab v = MakeToyVocab(300, 7);
  std::unique_ptr<BpeTokenizer> ranks = Toy(v, false);
  std::unique_ptr<BpeTokenizer> merges = Toy(v, true);
  std::mt19937 rng(3);
  const char alphabet[] = "abcd ";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string piece;
    const size_t len = 2 + rng() % (trial < 2500 ? 40 : 400);
    for (size_t i = 0; i < len; ++i) piece += alphabet[rng() % 5];
    std::vector<uint32_t> a, b, c, d;
    ranks->EncodePiece(piece, false, &a);
    ranks->EncodePiece(piece, true, &b);
    merges->EncodePiece(piece, false, &c);
    merges->EncodePiece(piece, true, &d);
    ASSERT_EQ(a, b) << piece;
    ASSERT_EQ(a, c) << piece;
    ASSERT_EQ(a, d) << piece;
    std::string joined;
    for (uint32_t id : a) joined += v.tokens[id];
    ASSERT_EQ(joined, piece);
  }
}

TEST(Bpe, SpecialTokensOnlyWhenAskedAndDecodeRoundTrips) {
  SKIP_WITHOUT_PCRE2();
  const ToyVocab v = MakeToyVocab(50, 5);
  std::unique_ptr<BpeTokenizer> t = Toy(v, false);
  const uint32_t eot = *t->eos();
  const std::string text = "ab <|eot|>cd";
  const std::vector<uint32_t> plain = *t->Encode(text);
  const std::vector<uint32_t> special = *t->EncodeWithSpecialTokens(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(std::count(special.begin(), special.end(), eot), 1);
  EXPECT_EQ(*t->Decode(plain), text);
  EXPECT_EQ(*t->Decode(special), "ab cd");  // EOS carries no text
  EXPECT_EQ(t->SpecialTokenId("<|eot|>"), std::optional<uint32_t>(eot));
  EXPECT_EQ(*t->Decode({'a', 99999}), "a\xEF\xBF\xBD");
  // Bytes that are not UTF-8 survive the round trip.
  const std::string binary = "x\xFF\x00y\xC3";
  EXPECT_EQ(*t->Decode(*t->Encode(binary)), binary);
}

TEST(Bpe, RejectsVocabulariesThatCannotEncodeEverything) {
  SKIP_WITHOUT_PCRE2();
  BpeModel m;
  m.name = "broken";
  m.pattern = std::string(kLlama3Pattern);
  for (int b = 0; b < 255; ++b) m.tokens.push_back(std::string(1, static_cast<char>(b)));
  Result<std::unique_ptr<BpeTokenizer>> t = BpeTokenizer::Create(m);
  EXPECT_EQ(t.status().code(), StatusCode::kDataError);
  EXPECT_NE(t.status().message().find("byte 0xFF"), std::string::npos) << t.status().message();
  m.tokens.push_back("a");  // byte 0xFF still missing, and "a" twice
  EXPECT_NE(BpeTokenizer::Create(m).status().message().find("same token"), std::string::npos);
}

std::string Base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += "=";
  }
  return out;
}

std::string TiktokenFile(const std::vector<std::string>& tokens) {
  std::string f;
  for (size_t i = 0; i < tokens.size(); ++i)
    f += Base64(tokens[i]) + " " + std::to_string(i) + "\n";
  return f;
}

TEST(Tiktoken, LoadsRanksAndAppendsLlama3Specials) {
  SKIP_WITHOUT_PCRE2();
  TempDir dir;
  const ToyVocab v = MakeToyVocab(40, 9);
  const std::string path = dir.Write("toy.tiktoken", TiktokenFile(v.tokens));
  Result<std::unique_ptr<Tokenizer>> t = MakeTokenizer("tiktoken:" + path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 296u + 256u);
  EXPECT_EQ((*t)->bos(), std::optional<uint32_t>(296));
  EXPECT_EQ((*t)->eos(), std::optional<uint32_t>(297));
  EXPECT_EQ((*t)->name(), "tiktoken:" + path);
  EXPECT_EQ((*t)->cache_slug().rfind("tt-toy-", 0), 0u) << (*t)->cache_slug();
  EXPECT_EQ(*(*t)->EncodeWithSpecialTokens("<|eot_id|>"), std::vector<uint32_t>{296 + 9});
  std::unique_ptr<BpeTokenizer> ref = Toy(v, false);
  for (const char* s : {"abba cab", "dd  dcba\n\nab"})
    EXPECT_EQ(*(*t)->Encode(s), *ref->Encode(s)) << s;
  EXPECT_EQ(Llama3SpecialTokens().size(), 256u);
  EXPECT_EQ(Llama3SpecialTokens()[255], "<|reserved_special_token_247|>");
}

TEST(Tiktoken, BadFilesNameTheLine) {
  SKIP_WITHOUT_PCRE2();
  TempDir dir;
  const ToyVocab v = MakeToyVocab(0, 1);
  std::string good = TiktokenFile(v.tokens);
  const auto error = [&](const std::string& text) {
    return MakeTokenizer("tiktoken:" + dir.Write("t.model", text)).status().message();
  };
  EXPECT_NE(error(good + "!!! 256\n").find("line 257"), std::string::npos);
  EXPECT_NE(error(good + Base64("zz") + " 300\n").find("rank 300 where 256"), std::string::npos);
  EXPECT_NE(error(TiktokenFile({v.tokens.begin(), v.tokens.begin() + 10})).find("at least the 256"),
            std::string::npos);
  EXPECT_EQ(MakeTokenizer("tiktoken:/no/such/file").status().code(), StatusCode::kNotFound);
}

// GPT-2's byte -> character stand-ins, for writing a tokenizer.json by hand.
std::string ByteLevel(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    uint32_t cp = b;
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
      cp = 256;
      for (uint32_t x = 0; x < b; ++x) {
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++cp;
      }
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

TEST(HfTokenizerJson, ByteLevelBpeMatchesTheRankForm) {
  SKIP_WITHOUT_PCRE2();
  TempDir dir;
  const ToyVocab v = MakeToyVocab(60, 11);
  nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[ByteLevel(v.tokens[i])] = i;
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string a = ByteLevel(v.tokens[v.merges[i][0]]),
                      b = ByteLevel(v.tokens[v.merges[i][1]]);
    if (i % 2)
      merges.push_back(a + " " + b);  // both spellings of a merge
    else
      merges.push_back({a, b});
  }
  const uint32_t n = static_cast<uint32_t>(v.tokens.size());
  nlohmann::json j = {
      {"normalizer", nullptr},
      {"added_tokens",
       {{{"id", n}, {"content", "<|begin_of_text|>"}, {"special", true}},
        {{"id", n + 1}, {"content", "<|end_of_text|>"}, {"special", true}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", std::string(kLlama3Pattern)}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}};
  dir.Write("tokenizer.json", j.dump());
  Result<std::unique_ptr<Tokenizer>> t = MakeTokenizer("hf:" + dir.path());  // the folder works
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), n + 2);
  EXPECT_EQ((*t)->bos(), std::optional<uint32_t>(n));      // from the template
  EXPECT_EQ((*t)->eos(), std::optional<uint32_t>(n + 1));  // by name
  std::unique_ptr<BpeTokenizer> ref = Toy(v, false);
  std::mt19937 rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    for (int i = 0; i < 60; ++i) s += "abcd \n"[rng() % 6];
    ASSERT_EQ(*(*t)->Encode(s), *ref->Encode(s)) << s;
  }
  // tokenizer_config.json, when present, names BOS/EOS.
  dir.Write("tokenizer_config.json",
            R"({"bos_token": null, "eos_token": {"content": "<|begin_of_text|>"}})");
  t = MakeTokenizer("hf:" + dir.Join("tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->bos(), std::nullopt);
  EXPECT_EQ((*t)->eos(), std::optional<uint32_t>(n));
  // GPT-2 style: one token both begins and ends documents; it separates them once.
  dir.Write("tokenizer_config.json",
            R"({"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"})");
  t = MakeTokenizer("hf:" + dir.Join("tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->bos(), std::nullopt);
  EXPECT_EQ((*t)->eos(), std::optional<uint32_t>(n + 1));

  // What tenax cannot read is refused by name.
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  dir.Write("tokenizer.json", j.dump());
  Status st = MakeTokenizer("hf:" + dir.path()).status();
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_NE(st.message().find("Metaspace"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("sentencepiece:"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tenax::data
