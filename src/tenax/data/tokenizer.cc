#include "tenax/data/tokenizer.h"

#include "tenax/data/bpe_tokenizer.h"

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
  const auto with_prefix = [&](const std::string& prefix) {
    return spec.compare(0, prefix.size(), prefix) == 0 && spec.size() > prefix.size();
  };
  if (with_prefix("sentencepiece:")) return MakeSentencePieceTokenizer(spec.substr(14));
  if (with_prefix("tiktoken:")) return LoadTiktokenTokenizer(spec.substr(9));
  if (with_prefix("hf:")) return LoadHfTokenizer(spec.substr(3));
  return InvalidArgument("unknown tokenizer \"" + spec +
                         "\"; allowed: \"byte\", \"tiktoken:PATH\" (Llama 3's tokenizer.model), "
                         "\"hf:PATH\" (a Hugging Face tokenizer.json) or \"sentencepiece:PATH\" "
                         "(a SentencePiece .model file)");
}

}  // namespace tenax::data
