// BrownToText: tag stripping and detokenisation of the tagged Brown corpus (rules in brown.h).
#include <array>

#include "tenax/data/brown.h"

namespace tenax::data {
namespace {

enum class Attach { kNone, kToPrevious, kToNext };

Attach AttachmentOf(std::string_view word) {
  static constexpr std::array<std::string_view, 9> kToPrevious = {",", ".", ";", ":", "!",
                                                                  "?", ")", "]", "}"};
  static constexpr std::array<std::string_view, 7> kClitics = {"'s", "'re", "'ve", "'ll",
                                                               "'d", "'m",  "n't"};
  if (word == "''") return Attach::kToPrevious;
  if (word == "``" || word == "(" || word == "[" || word == "{") return Attach::kToNext;
  for (std::string_view p : kToPrevious) {
    if (word == p) return Attach::kToPrevious;
  }
  for (std::string_view c : kClitics) {
    if (word == c) return Attach::kToPrevious;
  }
  return Attach::kNone;
}

bool IsSpaceInLine(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

bool IsBrownFileName(std::string_view name) {
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return name.size() == 4 && lower(name[0]) && lower(name[1]) && digit(name[2]) && digit(name[3]);
}

std::string BrownToText(std::string_view tagged) {
  std::string out;
  out.reserve(tagged.size() * 3 / 4);
  bool paragraph_open = false;  // a word was written since the last paragraph break
  bool pending_break = false;   // a blank line was seen after the current paragraph
  bool glue_next = false;       // the previous word attaches to the next one
  size_t pos = 0;
  while (pos < tagged.size()) {
    size_t eol = tagged.find('\n', pos);
    if (eol == std::string_view::npos) eol = tagged.size();
    std::string_view line = tagged.substr(pos, eol - pos);
    pos = eol + 1;
    size_t i = 0;
    bool line_has_words = false;
    while (i < line.size()) {
      while (i < line.size() && IsSpaceInLine(line[i])) ++i;
      size_t j = i;
      while (j < line.size() && !IsSpaceInLine(line[j])) ++j;
      if (j == i) break;
      std::string_view token = line.substr(i, j - i);
      i = j;
      const size_t slash = token.rfind('/');
      std::string_view word = slash == std::string_view::npos ? token : token.substr(0, slash);
      if (word.empty()) continue;
      line_has_words = true;
      const Attach attach = AttachmentOf(word);
      if (paragraph_open && pending_break) {
        out += "\n\n";
      } else if (paragraph_open && !glue_next && attach != Attach::kToPrevious) {
        out += ' ';
      }
      pending_break = false;
      paragraph_open = true;
      glue_next = attach == Attach::kToNext;
      out += (word == "``" || word == "''") ? std::string_view("\"") : word;
    }
    if (!line_has_words && paragraph_open) {
      pending_break = true;
      glue_next = false;
    }
  }
  return out;
}

}  // namespace tenax::data
