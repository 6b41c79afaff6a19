// tiktoken's BPE file ("BASE64 RANK" per line), as Meta ships Llama 3's tokenizer.model.
#include <fmt/format.h>
#include <sys/stat.h>

#include "tenax/core/crc32.h"
#include "tenax/core/fs.h"
#include "tenax/data/bpe_tokenizer.h"

namespace tenax::data {
namespace {

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with optional '=' padding; false on any other character or a bad length.
bool DecodeBase64(std::string_view in, std::string* out) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;
  out->clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = Base64Value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

}  // namespace

Result<BpeModel> ReadTiktokenModel(const std::string& given) {
  const std::string path = IsDirectory(given) ? JoinPath(given, "tokenizer.model") : given;
  Result<std::string> file = LocalFs().ReadFile(path);
  if (!file.ok())
    return file.status().WithContext("loading tiktoken file for --tokenizer tiktoken:");
  const std::string redo =
      " (a tiktoken file has one \"BASE64 RANK\" line per token, like Llama "
      "3's original/tokenizer.model; for a tokenizer.json use hf:PATH)";
  BpeModel m;
  m.name = "tiktoken:" + given;
  m.pattern = std::string(kLlama3Pattern);
  m.ignore_merges = true;
  std::string_view text = *file;
  size_t line_no = 0;
  std::string bytes;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string where = path + " line " + std::to_string(line_no) + ": ";
    if (space == std::string_view::npos || !DecodeBase64(line.substr(0, space), &bytes) ||
        bytes.empty()) {
      return DataError(where + "expected \"BASE64 RANK\", got \"" +
                       std::string(line.substr(0, 80)) + "\"" + redo);
    }
    uint64_t rank = 0;
    const std::string_view digits = line.substr(space + 1);
    bool ok = !digits.empty() && digits.size() <= 9;
    for (char c : digits) {
      ok = ok && c >= '0' && c <= '9';
      rank = rank * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok)
      return DataError(where + "the rank \"" + std::string(digits) + "\" is not a number" + redo);
    if (rank != m.tokens.size()) {
      // Ranks are ids; a gap or a reordering would silently shift every id after it.
      return DataError(where + "rank " + std::to_string(rank) + " where " +
                       std::to_string(m.tokens.size()) +
                       " was expected: ranks must run 0, 1, 2, ... in order" + redo);
    }
    m.tokens.push_back(bytes);
  }
  if (m.tokens.size() < 256) {
    return DataError(path + " holds " + std::to_string(m.tokens.size()) +
                     " tokens; a byte-level BPE needs at least the 256 bytes" + redo);
  }
  const uint32_t base = static_cast<uint32_t>(m.tokens.size());
  for (const std::string& s : Llama3SpecialTokens()) {
    m.special_ids.push_back(static_cast<uint32_t>(m.tokens.size()));
    m.tokens.push_back(s);
  }
  m.bos = base;
  m.eos = base + 1;
  m.slug = fmt::format("tt-{}-{:08x}", SlugStem(path), Crc32(*file));
  return m;
}

Result<std::unique_ptr<Tokenizer>> LoadTiktokenTokenizer(const std::string& given) {
  TENAX_ASSIGN_OR_RETURN(BpeModel m, ReadTiktokenModel(given));
  Result<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::Create(std::move(m));
  if (!tok.ok()) return tok.status();
  return std::unique_ptr<Tokenizer>(std::move(tok).value());
}

}  // namespace tenax::data
