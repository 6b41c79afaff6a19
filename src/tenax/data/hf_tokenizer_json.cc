// Hugging Face tokenizer.json (byte-level BPE only) -> BpeModel. What is read, and what is refused
// with a message rather than approximated:
//   model            type "BPE"; vocab (byte-level strings -> ids), merges ("a b" strings or
//                    ["a", "b"] pairs), ignore_merges. Refused: dropout, byte_fallback,
//                    continuing_subword_prefix, end_of_word_suffix.
//   pre_tokenizer    ByteLevel (required; use_regex = true means GPT-2's pattern, add_prefix_space
//                    is honoured), optionally after one Split {Regex, behavior "Isolated"}.
//   normalizer       must be null (Llama 3, GPT-2).
//   added_tokens     all become special tokens (matched literally by EncodeWithSpecialTokens).
//   post_processor   only its TemplateProcessing's leading special token, as a BOS fallback.
#include <fmt/format.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tenax/core/crc32.h"
#include "tenax/core/fs.h"
#include "tenax/data/bpe_tokenizer.h"

namespace tenax::data {
namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode, inverted: the code point that stands for each byte in byte-level
// vocabularies -> that byte. Printable Latin-1 bytes stand for themselves; the other 68 bytes map
// to U+0100.. in byte order.
std::unordered_map<uint32_t, uint8_t> ByteLevelDecoder() {
  std::unordered_map<uint32_t, uint8_t> m;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    m[printable ? b : next++] = static_cast<uint8_t>(b);
  }
  return m;
}

// A byte-level vocabulary string -> raw bytes; false if a character is not a byte stand-in.
bool ByteLevelToBytes(const std::string& s, const std::unordered_map<uint32_t, uint8_t>& decoder,
                      std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    size_t n;
    if (c < 0x80) {
      cp = c;
      n = 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      n = 2;
    } else {
      return false;  // every stand-in is below U+0800
    }
    const auto it = decoder.find(cp);
    if (it == decoder.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += n;
  }
  return true;
}

// tokenizer_config.json writes special tokens as a string or as {"content": ...}.
std::optional<std::string> TokenText(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return std::nullopt;
}

// A tokenizer.json being read: its path, and the two kinds of error it can give.
struct HfFile {
  std::string path;
  std::string what;  // "tokenizer PATH: ", the messages' start

  // A tokenizer that is valid but not one tenax reads.
  Status Unsupported(const std::string& part) const {
    return DataError(what + part +
                     "; tenax reads byte-level BPE tokenizers (Llama 3, GPT-2 "
                     "style). For a SentencePiece model use sentencepiece:tokenizer.model");
  }
  Status Bad(const std::string& text) const { return DataError(what + text); }
};

// model.type and the model's options, and the normalizer (only what tenax implements passes).
Status ReadModelOptions(const HfFile& f, const json& j, BpeModel* m) {
  const json& model = j.at("model");
  if (model.value("type", "") != "BPE") {
    return f.Unsupported("the model type is " + model.value("type", std::string("missing")));
  }
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty())) {
      return f.Unsupported(std::string("model.") + key + " is set");
    }
  }
  if (model.value("byte_fallback", false)) return f.Unsupported("model.byte_fallback is true");
  m->ignore_merges = model.value("ignore_merges", false);
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    return f.Unsupported("it has a normalizer (" + j["normalizer"].value("type", std::string("?")) +
                         ")");
  }
  return Status::Ok();
}

// The pre-tokenizer: [Split(regex)] then ByteLevel -> m->pattern, m->add_prefix_space.
Status ReadPreTokenizer(const HfFile& f, const json& j, BpeModel* m) {
  std::vector<json> pres;
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    const json& p = j["pre_tokenizer"];
    if (p.value("type", "") == "Sequence") {
      for (const json& q : p.at("pretokenizers")) pres.push_back(q);
    } else {
      pres.push_back(p);
    }
  }
  bool byte_level = false;
  for (const json& p : pres) {
    const std::string type = p.value("type", "");
    if (type == "Split") {
      if (!m->pattern.empty()) return f.Unsupported("it splits with two regexes");
      if (!p.at("pattern").contains("Regex")) return f.Unsupported("its Split pattern is a String");
      if (p.value("behavior", "") != "Isolated" || p.value("invert", false)) {
        return f.Unsupported("its Split behaviour is not Isolated");
      }
      m->pattern = p["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      byte_level = true;
      m->add_prefix_space = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) {
        if (!m->pattern.empty()) return f.Unsupported("it splits with two regexes");
        m->pattern = std::string(kGpt2Pattern);
      }
    } else {
      return f.Unsupported("it uses the " + type + " pre-tokenizer");
    }
  }
  if (!byte_level) return f.Unsupported("it has no ByteLevel pre-tokenizer");
  return Status::Ok();
}

// The vocabulary (byte-level strings -> raw bytes) and the added tokens (all special) ->
// m->tokens, m->special_ids; `ids` gets each vocabulary string's id, for the merges.
Status ReadVocabulary(const HfFile& f, const json& j, BpeModel* m,
                      std::unordered_map<std::string, uint32_t>* ids) {
  const auto decoder = ByteLevelDecoder();
  uint64_t size = 0;
  const json& vocab = j.at("model").at("vocab");
  for (const auto& [key, value] : vocab.items()) {
    size = std::max<uint64_t>(size, value.get<uint64_t>() + 1);
  }
  for (const json& a : j.value("added_tokens", json::array())) {
    size = std::max<uint64_t>(size, a.at("id").get<uint64_t>() + 1);
  }
  if (size == 0 || size > (1u << 24)) return f.Bad("vocabulary size " + std::to_string(size));
  m->tokens.assign(size, "");
  std::string bytes;
  for (const auto& [key, value] : vocab.items()) {
    const uint32_t id = value.get<uint32_t>();
    if (!ByteLevelToBytes(key, decoder, &bytes)) {
      return f.Unsupported("vocabulary entry \"" + key + "\" is not byte-level");
    }
    if (!m->tokens[id].empty()) return f.Bad("two entries have id " + std::to_string(id));
    m->tokens[id] = bytes;
    ids->emplace(key, id);
  }
  for (const json& a : j.value("added_tokens", json::array())) {
    const uint32_t id = a.at("id").get<uint32_t>();
    const std::string content = a.at("content").get<std::string>();
    if (content.empty()) return f.Bad("added token " + std::to_string(id) + " is empty");
    if (!m->tokens[id].empty() && vocab.contains(content) && vocab[content] == id) {
      // Also in the vocabulary under the same text (GPT-2's <|endoftext|>): stays special.
    } else if (!m->tokens[id].empty()) {
      return f.Bad("added token \"" + content + "\" reuses id " + std::to_string(id));
    }
    m->tokens[id] = content;
    m->special_ids.push_back(id);
  }
  return Status::Ok();
}

// The merges, in priority order ("a b" strings or ["a", "b"] pairs), as ids.
Status ReadMerges(const HfFile& f, const json& j,
                  const std::unordered_map<std::string, uint32_t>& ids, BpeModel* m) {
  const auto id_of = [&](const std::string& s) -> std::optional<uint32_t> {
    const auto it = ids.find(s);
    if (it == ids.end()) return std::nullopt;
    return it->second;
  };
  const json& merges = j.at("model").at("merges");
  m->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string a, b;
    if (merges[i].is_string()) {
      const std::string s = merges[i].get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return f.Bad("merge " + std::to_string(i) + " \"" + s + "\" is not \"A B\"");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      a = merges[i].at(0).get<std::string>();
      b = merges[i].at(1).get<std::string>();
    }
    const auto l = id_of(a), r = id_of(b), c = id_of(a + b);
    if (!l || !r || !c) {
      return f.Bad("merge " + std::to_string(i) + " (\"" + a + "\", \"" + b +
                   "\") names a token that is not in the vocabulary");
    }
    m->merges.push_back({*l, *r, *c});
  }
  return Status::Ok();
}

// BOS and EOS: from tokenizer_config.json beside it when there is one (its text, which the
// tokenizer's slug covers, goes to `config_text`), else the post-processor's leading special token
// and the usual end-of-text names among the added tokens.
Status ReadBosEos(const HfFile& f, const json& j, BpeModel* m, std::string* config_text) {
  const std::string config_path = JoinPath(ParentDir(f.path), "tokenizer_config.json");
  std::optional<std::string> bos_text, eos_text;
  bool from_config = false;
  if (LocalFs().Exists(config_path)) {
    TENAX_ASSIGN_OR_RETURN(*config_text, LocalFs().ReadFile(config_path));
    try {
      const json c = json::parse(*config_text);
      from_config = true;
      // add_bos_token = false (GPT-2 style) names a BOS that is not placed before documents.
      if (c.contains("bos_token") && c.value("add_bos_token", true)) {
        bos_text = TokenText(c["bos_token"]);
      }
      if (c.contains("eos_token")) eos_text = TokenText(c["eos_token"]);
    } catch (const json::exception& e) {
      return DataError(config_path + " is not valid JSON (" + e.what() + ")");
    }
  }
  if (!from_config) {
    std::vector<json> procs;
    if (j.contains("post_processor") && !j["post_processor"].is_null()) {
      const json& p = j["post_processor"];
      if (p.value("type", "") == "Sequence") {
        for (const json& q : p.at("processors")) procs.push_back(q);
      } else {
        procs.push_back(p);
      }
    }
    for (const json& p : procs) {
      if (p.value("type", "") != "TemplateProcessing" || !p.contains("single")) continue;
      const json& single = p["single"];
      if (!single.empty() && single[0].contains("SpecialToken")) {
        bos_text = single[0]["SpecialToken"].at("id").get<std::string>();
      }
    }
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"}) {
      if (!eos_text && std::find_if(m->special_ids.begin(), m->special_ids.end(), [&](uint32_t id) {
                         return m->tokens[id] == name;
                       }) != m->special_ids.end()) {
        eos_text = name;
      }
    }
  }
  const auto special_id = [&](const std::optional<std::string>& text,
                              const char* role) -> Result<std::optional<uint32_t>> {
    if (!text) return std::optional<uint32_t>();
    for (uint32_t id : m->special_ids) {
      if (m->tokens[id] == *text) return std::optional<uint32_t>(id);
    }
    return f.Bad(std::string("its ") + role + " token \"" + *text +
                 "\" is not one of its added tokens");
  };
  TENAX_ASSIGN_OR_RETURN(m->bos, special_id(bos_text, "BOS"));
  TENAX_ASSIGN_OR_RETURN(m->eos, special_id(eos_text, "EOS"));
  // One token that both begins and ends documents (GPT-2's <|endoftext|>) separates them once.
  if (m->bos && m->bos == m->eos) m->bos.reset();
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& given) {
  HfFile f;
  f.path = IsDirectory(given) ? JoinPath(given, "tokenizer.json") : given;
  f.what = "tokenizer " + f.path + ": ";
  Result<std::string> file = LocalFs().ReadFile(f.path);
  if (!file.ok()) return file.status().WithContext("loading tokenizer.json for --tokenizer hf:");
  BpeModel m;
  m.name = "hf:" + given;
  json j;
  try {
    j = json::parse(*file);
  } catch (const json::exception& e) {
    return f.Bad(std::string("not valid JSON (") + e.what() + ")");
  }
  // Each part's accessors throw on a structure it does not expect (a missing key, a wrong type).
  try {
    TENAX_RETURN_IF_ERROR(ReadModelOptions(f, j, &m));
    TENAX_RETURN_IF_ERROR(ReadPreTokenizer(f, j, &m));
    std::unordered_map<std::string, uint32_t> ids;
    TENAX_RETURN_IF_ERROR(ReadVocabulary(f, j, &m, &ids));
    TENAX_RETURN_IF_ERROR(ReadMerges(f, j, ids, &m));
    std::string config_text;
    TENAX_RETURN_IF_ERROR(ReadBosEos(f, j, &m, &config_text));
    const std::string folder = ParentDir(f.path).empty() ? f.path : ParentDir(f.path);
    m.slug = fmt::format("hf-{}-{:08x}", SlugStem(folder),
                         Crc32(config_text.data(), config_text.size(), Crc32(*file)));
  } catch (const json::exception& e) {
    return f.Bad(std::string("unexpected structure (") + e.what() + ")");
  }
  Result<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::Create(std::move(m));
  if (!tok.ok()) return tok.status();
  return std::unique_ptr<Tokenizer>(std::move(tok).value());
}

}  // namespace tenax::data
