#include "tenax/data/tokenizer.h"

namespace tenax::data {

Result<std::vector<uint32_t>> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<uint32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

Result<std::string> ByteTokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id < 256) {
      out.push_back(static_cast<char>(id));
    } else if (id != kEos) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    }
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& spec) {
  if (spec == "byte") return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>());
  const std::string sp = "sentencepiece:";
  if (spec.compare(0, sp.size(), sp) == 0 && spec.size() > sp.size()) {
    return MakeSentencePieceTokenizer(spec.substr(sp.size()));
  }
  return InvalidArgument("unknown tokenizer \"" + spec +
                         "\"; allowed: \"byte\" or \"sentencepiece:PATH\" (PATH to a .model file)");
}

}  // namespace tenax::data
