#include "tenax/data/tokenize_command.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace tenax::data {

Status TokenizeStream(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                      const TokenizeOptions& options) {
  std::string line, text, buffer;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (options.json_input) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_string()) {
        return InvalidArgument("stdin line " + std::to_string(line_no) +
                               " is not a JSON string, "
                               "which --json-input expects: \"" +
                               line.substr(0, 60) + "\"");
      }
      text = j.get<std::string>();
    } else {
      text = line;
    }
    TENAX_ASSIGN_OR_RETURN(std::vector<uint32_t> ids, options.special
                                                          ? tokenizer.EncodeWithSpecialTokens(text)
                                                          : tokenizer.Encode(text));
    buffer += '[';
    bool first = true;
    const auto put = [&](uint32_t id) {
      if (!first) buffer += ',';
      buffer += std::to_string(id);
      first = false;
    };
    if (options.bos_eos && tokenizer.bos()) put(*tokenizer.bos());
    for (uint32_t id : ids) put(id);
    if (options.bos_eos && tokenizer.eos()) put(*tokenizer.eos());
    buffer += "]\n";
    if (buffer.size() > (1 << 16)) {
      out << buffer;
      buffer.clear();
    }
  }
  out << buffer;
  out.flush();
  if (!out) return IoError("writing token ids to stdout failed");
  return Status::Ok();
}

Status TokenizeCommand(const std::string& spec, const TokenizeOptions& options) {
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, MakeTokenizer(spec));
  std::ios::sync_with_stdio(false);
  return TokenizeStream(*tokenizer, std::cin, std::cout, options);
}

}  // namespace tenax::data
