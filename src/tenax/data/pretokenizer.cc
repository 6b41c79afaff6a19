// PCRE2-backed pretokenizer (see pretokenizer.h for the dialect rules).
#include "tenax/data/pretokenizer.h"

#include <string>

#ifdef TENAX_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace tenax::data {
namespace {

// Unicode White_Space (PropList.txt), the set Rust's regex and Oniguruma mean by \s.
constexpr const char* kWhiteSpaceMembers =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Length of the UTF-8 character starting at s[i] if it is valid, else 0.
size_t ValidUtf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

Result<std::string> RewriteWhitespaceClasses(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceMembers)
                        : "[" + std::string(kWhiteSpaceMembers) + "]";
      } else if (e == 'S') {
        if (in_class) {
          return InvalidArgument(
              "the pretokenizer pattern has \\S inside a character class, which "
              "tenax cannot translate to PCRE2: " +
              std::string(pattern));
        }
        out += "[^" + std::string(kWhiteSpaceMembers) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

#ifdef TENAX_WITH_PCRE2

bool HavePcre2() { return true; }

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Pretokenizer::Pretokenizer(std::string pattern) : pattern_(std::move(pattern)) {}
Pretokenizer::~Pretokenizer() = default;

Result<std::unique_ptr<Pretokenizer>> Pretokenizer::Create(std::string_view pattern) {
  TENAX_ASSIGN_OR_RETURN(std::string rewritten, RewriteWhitespaceClasses(pattern));
  std::unique_ptr<Pretokenizer> p(new Pretokenizer(std::string(pattern)));
  p->impl_ = std::make_unique<Impl>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  p->impl_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (p->impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("the pretokenizer pattern does not compile with PCRE2 (" +
                           std::string(reinterpret_cast<const char*>(message)) + " at offset " +
                           std::to_string(offset) + " of the rewritten pattern " + rewritten +
                           "); tenax reads Rust/Oniguruma patterns that PCRE2 shares");
  }
  // JIT is an optimisation (about 5x here); a platform without it still matches correctly.
  p->impl_->jit = pcre2_jit_compile(p->impl_->code, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

Status Pretokenizer::Split(std::string_view text,
                           const std::function<void(std::string_view)>& piece) const {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (md == nullptr) return Internal("out of memory creating PCRE2 match data");
  // A large JIT stack only when a match needs one (a run of thousands of spaces backtracking
  // through \s+(?!\S)); most text never does, so it is not allocated up front.
  pcre2_match_context* big_ctx = nullptr;
  pcre2_jit_stack* big_stack = nullptr;
  const auto cleanup = [&] {
    pcre2_match_data_free(md);
    if (big_ctx != nullptr) pcre2_match_context_free(big_ctx);
    if (big_stack != nullptr) pcre2_jit_stack_free(big_stack);
  };
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  size_t gap = 0;  // start of bytes not yet emitted (invalid UTF-8 or empty-match skips)
  Status status;
  while (pos < n) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, n, pos, 0, md, big_ctx)
                        : pcre2_match(impl_->code, subject, n, pos, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && big_ctx == nullptr) {
      big_stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr);
      big_ctx = pcre2_match_context_create(nullptr);
      if (big_stack == nullptr || big_ctx == nullptr) {
        status = Internal("out of memory growing the PCRE2 JIT stack");
        break;
      }
      pcre2_jit_stack_assign(big_ctx, nullptr, big_stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      status = Internal("PCRE2 failed while splitting text at byte " + std::to_string(pos) + ": " +
                        reinterpret_cast<const char*>(message));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (end == start) {
      // An empty match (possible only for patterns that allow one): skip one character, which
      // then joins the gap, so the loop always advances.
      const size_t len = ValidUtf8Length(text, pos);
      pos += len == 0 ? 1 : len;
      continue;
    }
    if (start > gap) piece(text.substr(gap, start - gap));
    piece(text.substr(start, end - start));
    pos = gap = end;
  }
  if (status.ok() && gap < n) piece(text.substr(gap));
  cleanup();
  return status;
}

#else  // !TENAX_WITH_PCRE2

bool HavePcre2() { return false; }

struct Pretokenizer::Impl {};
Pretokenizer::Pretokenizer(std::string pattern) : pattern_(std::move(pattern)) {}
Pretokenizer::~Pretokenizer() = default;

Result<std::unique_ptr<Pretokenizer>> Pretokenizer::Create(std::string_view pattern) {
  (void)ValidUtf8Length;
  return InvalidArgument(
      "this tenax was built without PCRE2, which the tiktoken and hf tokenizers need for their "
      "pretokenizer regex: apt-get install libpcre2-dev (Debian/Ubuntu), re-run cmake and "
      "rebuild, or prepare data on a machine whose tenax has it (prepared shards are portable)");
}

Status Pretokenizer::Split(std::string_view, const std::function<void(std::string_view)>&) const {
  return InvalidArgument("tenax was built without PCRE2");
}

#endif

}  // namespace tenax::data
