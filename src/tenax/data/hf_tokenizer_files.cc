#include "tenax/data/hf_tokenizer_files.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "tenax/core/fs.h"
#include "tenax/data/bpe_tokenizer.h"

namespace tenax::data {
namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode: the character that stands for each byte in byte-level vocabularies
// (printable Latin-1 bytes stand for themselves, the other 68 map to U+0100.. in byte order), as
// UTF-8.
const std::array<std::string, 256>& ByteLevelAlphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next++;
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {  // every stand-in is below U+0800: two bytes
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      t[b] = s;
    }
    return t;
  }();
  return table;
}

std::string ByteLevel(const std::string& bytes) {
  std::string out;
  for (char c : bytes) out += ByteLevelAlphabet()[static_cast<unsigned char>(c)];
  return out;
}

json SpecialTokenMap(const std::string& bos, const std::string& eos) {
  json m = json::object();
  if (!bos.empty()) m["bos_token"] = bos;
  if (!eos.empty()) m["eos_token"] = eos;
  return m;
}

json TokenizerConfig(const std::string& bos, const std::string& eos, int64_t max_length) {
  json c = SpecialTokenMap(bos, eos);
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  c["model_input_names"] = {"input_ids", "attention_mask"};
  c["model_max_length"] = max_length;
  c["clean_up_tokenization_spaces"] = true;
  return c;
}

// tiktoken ranks -> tokenizer.json (see the header for the merge rule).
Result<HfTokenizerFiles> FromTiktoken(const std::string& path, int64_t max_length) {
  TENAX_ASSIGN_OR_RETURN(BpeModel m, ReadTiktokenModel(path));
  const size_t ordinary = m.tokens.size() - m.special_ids.size();
  std::unordered_map<std::string, uint32_t> rank;
  rank.reserve(ordinary * 2);
  for (uint32_t id = 0; id < ordinary; ++id) rank.emplace(m.tokens[id], id);
  json vocab = json::object();
  json merges = json::array();
  std::vector<std::tuple<uint32_t, uint32_t, size_t>> splits;  // (left rank, right rank, cut)
  for (uint32_t id = 0; id < ordinary; ++id) {
    const std::string& t = m.tokens[id];
    vocab[ByteLevel(t)] = id;
    splits.clear();
    for (size_t cut = 1; cut < t.size(); ++cut) {
      auto l = rank.find(t.substr(0, cut));
      auto r = rank.find(t.substr(cut));
      if (l != rank.end() && r != rank.end()) splits.emplace_back(l->second, r->second, cut);
    }
    std::sort(splits.begin(), splits.end());
    for (const auto& [l, r, cut] : splits) {
      merges.push_back(ByteLevel(t.substr(0, cut)) + " " + ByteLevel(t.substr(cut)));
    }
  }
  json added = json::array();
  for (uint32_t id : m.special_ids) {
    added.push_back({{"id", id},
                     {"content", m.tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const std::string bos = m.bos ? m.tokens[*m.bos] : "";
  const std::string eos = m.eos ? m.tokens[*m.eos] : "";
  auto special = [](const std::string& text, int type_id) {
    return json{{"SpecialToken", {{"id", text}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* id, int type_id) {
    return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  json post = nullptr;
  if (m.bos) {  // transformers' tokenizer adds BOS through this, as Meta's Llama 3 files do
    post = {{"type", "TemplateProcessing"},
            {"single", {special(bos, 0), sequence("A", 0)}},
            {"pair", {special(bos, 0), sequence("A", 0), special(bos, 1), sequence("B", 1)}},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {*m.bos}}, {"tokens", {bos}}}}}}};
  }
  json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", m.pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor", post},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", true},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  HfTokenizerFiles out;
  out.bos = m.bos;
  out.eos = m.eos;
  out.files["tokenizer.json"] = tokenizer.dump();
  out.files["tokenizer_config.json"] = TokenizerConfig(bos, eos, max_length).dump(2) + "\n";
  out.files["special_tokens_map.json"] = SpecialTokenMap(bos, eos).dump(2) + "\n";
  return out;
}

// hf:FILE -> the same tokenizer.json, its companions copied or written.
Result<HfTokenizerFiles> FromHf(const std::string& given, int64_t max_length) {
  const bool dir = IsDirectory(given);
  const std::string path = dir ? JoinPath(given, "tokenizer.json") : given;
  const std::string folder = dir ? given : ParentDir(given);
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadHfTokenizer(given));
  HfTokenizerFiles out;
  out.bos = tok->bos();
  out.eos = tok->eos();
  TENAX_ASSIGN_OR_RETURN(out.files["tokenizer.json"], LocalFs().ReadFile(path));
  // The texts of the BOS and EOS ids, for the files written here.
  std::string bos, eos;
  try {
    for (const json& a : json::parse(out.files["tokenizer.json"]).value("added_tokens", json())) {
      const uint32_t id = a.at("id").get<uint32_t>();
      if (out.bos == id) bos = a.at("content").get<std::string>();
      if (out.eos == id) eos = a.at("content").get<std::string>();
    }
  } catch (const json::exception& e) {
    return DataError(path + ": added_tokens are malformed: " + e.what());
  }
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string beside = JoinPath(folder.empty() ? "." : folder, name);
    if (LocalFs().Exists(beside)) {
      TENAX_ASSIGN_OR_RETURN(out.files[name], LocalFs().ReadFile(beside));
    } else if (std::string(name) == "tokenizer_config.json") {
      out.files[name] = TokenizerConfig(bos, eos, max_length).dump(2) + "\n";
    } else {
      out.files[name] = SpecialTokenMap(bos, eos).dump(2) + "\n";
    }
  }
  return out;
}

}  // namespace

Result<HfTokenizerFiles> MakeHfTokenizerFiles(const std::string& spec, int64_t model_max_length) {
  if (spec.rfind("tiktoken:", 0) == 0) return FromTiktoken(spec.substr(9), model_max_length);
  if (spec.rfind("hf:", 0) == 0) return FromHf(spec.substr(3), model_max_length);
  HfTokenizerFiles out;
  if (spec == "byte") {
    out.eos = ByteTokenizer::kEos;
    out.note = "the byte tokenizer has no Hugging Face form (ids 0-255 are bytes, 256 is EOS)";
  } else if (spec.rfind("sentencepiece:", 0) == 0) {
    out.note = "SentencePiece tokenizers are not exported; copy " + spec.substr(14) +
               " into the folder as tokenizer.model for transformers' LlamaTokenizer";
  } else {
    return InvalidArgument("unknown tokenizer '" + spec +
                           "'; expected byte, tiktoken:PATH, hf:PATH or sentencepiece:PATH");
  }
  return out;
}

std::string AbsoluteTokenizerSpec(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  const std::string path = spec.substr(colon + 1);
  if (path.empty() || path[0] == '/') return spec;
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return spec;
  return spec.substr(0, colon + 1) + JoinPath(cwd, path);
}

}  // namespace tenax::data
