// Byte-level BPE encoding and decoding (see bpe_tokenizer.h for the algorithm and its forms).
#include "tenax/data/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <queue>
#include <unordered_map>

namespace tenax::data {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
// Pieces up to this many bytes use the quadratic merge loop (tiktoken's), which beats a heap on
// the short pieces that make up almost all text; longer ones (runs of spaces or symbols) use the
// heap so a 1 MB run of spaces stays linearithmic.
constexpr size_t kHeapThreshold = 96;

uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    h = (h ^ k) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t k = 0;
  std::memcpy(&k, p, n);
  h = (h ^ k) * 0x94D049BB133111EBull;
  h ^= h >> 32;
  return h;
}

}  // namespace

// Lookup structures derived from the model; immutable after construction.
struct BpeTokenizer::Tables {
  // Open addressing over ordinary token ids, keyed by their bytes (the key lives in
  // model.tokens[id], so a slot is just an id).
  std::vector<uint32_t> slots;
  uint64_t mask = 0;
  uint32_t byte_ids[256];
  // Merge-list form: (left << 32 | right) -> (priority << 32 | merged).
  std::unordered_map<uint64_t, uint64_t> merges;
  // Special tokens by first byte, longest first, for EncodeWithSpecialTokens.
  std::vector<std::pair<std::string_view, uint32_t>> specials_by_byte[256];
  std::vector<uint8_t> kind;  // per id: 0 unassigned, 1 ordinary, 2 special

  uint32_t Find(const std::vector<std::string>& tokens, std::string_view key) const {
    for (uint64_t i = HashBytes(key) & mask;; i = (i + 1) & mask) {
      const uint32_t id = slots[i];
      if (id == kNone) return kNone;
      if (tokens[id] == key) return id;
    }
  }
};

BpeTokenizer::BpeTokenizer(BpeModel model) : model_(std::move(model)) {}
BpeTokenizer::~BpeTokenizer() = default;

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeModel model) {
  const std::string what = "tokenizer " + model.name + ": ";
  if (model.tokens.empty()) return DataError(what + "the vocabulary is empty");
  if (model.tokens.size() >= kNone) return DataError(what + "the vocabulary is too large");
  auto tables = std::make_unique<Tables>();
  const size_t n = model.tokens.size();
  tables->kind.assign(n, 1);
  for (uint32_t id : model.special_ids) {
    if (id >= n || model.tokens[id].empty()) {
      return DataError(what + "special token id " + std::to_string(id) + " has no text");
    }
    tables->kind[id] = 2;
  }
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  tables->slots.assign(cap, kNone);
  tables->mask = cap - 1;
  for (uint32_t id = 0; id < n; ++id) {
    const std::string& t = model.tokens[id];
    if (t.empty()) {
      tables->kind[id] = 0;
      continue;
    }
    if (tables->kind[id] != 1) continue;
    uint64_t i = HashBytes(t) & tables->mask;
    for (; tables->slots[i] != kNone; i = (i + 1) & tables->mask) {
      if (model.tokens[tables->slots[i]] == t) {
        return DataError(what + "ids " + std::to_string(tables->slots[i]) + " and " +
                         std::to_string(id) + " are the same token");
      }
    }
    tables->slots[i] = id;
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    tables->byte_ids[b] = tables->Find(model.tokens, std::string_view(&c, 1));
    if (tables->byte_ids[b] == kNone) {
      return DataError(what + "the vocabulary has no token for byte 0x" + fmt::format("{:02X}", b) +
                       ", so some text could not be encoded (not a byte-level BPE vocabulary?)");
    }
  }
  for (size_t p = 0; p < model.merges.size(); ++p) {
    const auto [l, r, m] = model.merges[p];
    if (l >= n || r >= n || m >= n || tables->kind[m] != 1 ||
        model.tokens[m] != model.tokens[l] + model.tokens[r]) {
      return DataError(what + "merge " + std::to_string(p) + " (" + std::to_string(l) + ", " +
                       std::to_string(r) + ") -> " + std::to_string(m) +
                       " does not concatenate its two tokens into a vocabulary token");
    }
    // The first (highest-priority) occurrence of a pair wins, as in Hugging Face tokenizers.
    tables->merges.emplace((uint64_t{l} << 32) | r, (uint64_t{p} << 32) | m);
  }
  for (uint32_t id : model.special_ids) {
    const std::string& t = model.tokens[id];
    tables->specials_by_byte[static_cast<unsigned char>(t[0])].emplace_back(t, id);
  }
  for (auto& v : tables->specials_by_byte) {
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<Pretokenizer> pre, Pretokenizer::Create(model.pattern));
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(model)));
  // specials_by_byte views point into model_.tokens: rebuild them against the moved model.
  for (auto& v : tables->specials_by_byte) {
    for (auto& [text, id] : v) text = tok->model_.tokens[id];
  }
  tok->pretokenizer_ = std::move(pre);
  tok->tables_ = std::move(tables);
  return tok;
}

void BpeTokenizer::EncodePiece(std::string_view piece, bool use_heap,
                               std::vector<uint32_t>* out) const {
  const Tables& t = *tables_;
  const std::vector<std::string>& tokens = model_.tokens;
  const size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out->push_back(t.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (model_.ignore_merges) {
    const uint32_t whole = t.Find(tokens, piece);
    if (whole != kNone) {
      out->push_back(whole);
      return;
    }
  }
  const bool by_rank = model_.merges.empty();
  // Priority and result of merging the token spanning [a, b) with the one spanning [b, c).
  const auto pair = [&](uint32_t a, uint32_t b, uint32_t c, uint32_t left, uint32_t right,
                        uint32_t* merged) -> uint32_t {
    if (by_rank) {
      (void)b;
      *merged = t.Find(tokens, piece.substr(a, c - a));
      return *merged;  // a token's rank is its id
    }
    const auto it = t.merges.find((uint64_t{left} << 32) | right);
    if (it == t.merges.end()) return kNone;
    *merged = static_cast<uint32_t>(it->second);
    return static_cast<uint32_t>(it->second >> 32);
  };

  if (!use_heap) {
    // tiktoken's loop: find the lowest-priority pair (leftmost on ties), merge, repeat.
    struct Part {
      uint32_t start, id, prio, merged;
    };
    std::vector<Part> parts(n + 1);
    for (uint32_t i = 0; i < n; ++i) {
      parts[i] = {i, t.byte_ids[static_cast<unsigned char>(piece[i])], kNone, kNone};
    }
    parts[n] = {static_cast<uint32_t>(n), kNone, kNone, kNone};
    const auto update = [&](size_t i) {  // the pair (i, i + 1); parts.back() is a sentinel
      if (i + 2 >= parts.size()) {
        parts[i].prio = kNone;
        return;
      }
      parts[i].prio = pair(parts[i].start, parts[i + 1].start, parts[i + 2].start, parts[i].id,
                           parts[i + 1].id, &parts[i].merged);
    };
    for (size_t i = 0; i + 1 < n; ++i) update(i);
    while (parts.size() > 2) {
      size_t best = 0;
      for (size_t i = 1; i + 2 < parts.size(); ++i) {
        if (parts[i].prio < parts[best].prio) best = i;
      }
      if (parts[best].prio == kNone) break;
      parts[best].id = parts[best].merged;
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      update(best);
      if (best > 0) update(best - 1);
    }
    for (size_t i = 0; i + 1 < parts.size(); ++i) out->push_back(parts[i].id);
    return;
  }

  // Heap loop: a doubly linked list of tokens and a min-heap of candidate pairs keyed by
  // (priority, start byte), so the pop order equals the quadratic loop's choice at every step.
  // Entries go stale when either side merges; a version per node detects that on pop.
  struct Node {
    uint32_t start, end, id, prev, next, version;
  };
  struct Entry {
    uint32_t prio, start, left, right, left_version, right_version, merged;
    bool operator>(const Entry& o) const {
      return prio != o.prio ? prio > o.prio : start > o.start;
    }
  };
  std::vector<Node> nodes(n);
  for (uint32_t i = 0; i < n; ++i) {
    nodes[i] = {i,
                i + 1,
                t.byte_ids[static_cast<unsigned char>(piece[i])],
                i == 0 ? kNone : i - 1,
                i + 1 == n ? kNone : i + 1,
                0};
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  const auto push = [&](uint32_t l) {
    if (l == kNone) return;
    const uint32_t r = nodes[l].next;
    if (r == kNone) return;
    uint32_t merged = kNone;
    const uint32_t prio =
        pair(nodes[l].start, nodes[r].start, nodes[r].end, nodes[l].id, nodes[r].id, &merged);
    if (prio == kNone) return;
    heap.push({prio, nodes[l].start, l, r, nodes[l].version, nodes[r].version, merged});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    Node& l = nodes[e.left];
    if (l.version != e.left_version || l.next != e.right ||
        nodes[e.right].version != e.right_version) {
      continue;  // stale: one side has merged since this entry was pushed
    }
    Node& r = nodes[e.right];
    l.id = e.merged;
    l.end = r.end;
    l.next = r.next;
    ++l.version;
    ++r.version;  // r is gone; entries naming it as a left side fail the next check
    r.next = kNone;
    if (l.next != kNone) nodes[l.next].prev = e.left;
    push(l.prev);
    push(e.left);
  }
  for (uint32_t i = 0; i != kNone; i = nodes[i].next) out->push_back(nodes[i].id);
}

Status BpeTokenizer::EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const {
  std::string prefixed;
  if (model_.add_prefix_space && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  return pretokenizer_->Split(text, [&](std::string_view piece) {
    EncodePiece(piece, piece.size() > kHeapThreshold, out);
  });
}

Result<std::vector<uint32_t>> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 4 + 4);
  TENAX_RETURN_IF_ERROR(EncodeOrdinary(text, &ids));
  return ids;
}

Result<std::vector<uint32_t>> BpeTokenizer::EncodeWithSpecialTokens(std::string_view text) const {
  std::vector<uint32_t> ids;
  size_t done = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& candidates = tables_->specials_by_byte[static_cast<unsigned char>(text[i])];
    for (const auto& [special, id] : candidates) {
      if (text.compare(i, special.size(), special) != 0) continue;
      TENAX_RETURN_IF_ERROR(EncodeOrdinary(text.substr(done, i - done), &ids));
      ids.push_back(id);
      done = i + special.size();
      i = done - 1;
      break;
    }
  }
  TENAX_RETURN_IF_ERROR(EncodeOrdinary(text.substr(done), &ids));
  return ids;
}

Result<std::string> BpeTokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id >= model_.tokens.size() || tables_->kind[id] == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    } else if (model_.bos == id || model_.eos == id) {
      continue;  // document separators carry no text
    } else {
      out += model_.tokens[id];
    }
  }
  return out;
}

std::optional<uint32_t> BpeTokenizer::SpecialTokenId(std::string_view text) const {
  if (text.empty()) return std::nullopt;
  for (const auto& [special, id] : tables_->specials_by_byte[static_cast<unsigned char>(text[0])]) {
    if (special == text) return id;
  }
  return std::nullopt;
}

std::vector<std::string> Llama3SpecialTokens() {
  std::vector<std::string> s = {"<|begin_of_text|>",
                                "<|end_of_text|>",
                                "<|reserved_special_token_0|>",
                                "<|reserved_special_token_1|>",
                                "<|finetune_right_pad_id|>",
                                "<|reserved_special_token_2|>",
                                "<|start_header_id|>",
                                "<|end_header_id|>",
                                "<|eom_id|>",
                                "<|eot_id|>",
                                "<|python_tag|>"};
  for (int i = 3; s.size() < 256; ++i) {
    s.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  return s;
}

std::string SlugStem(const std::string& path) {
  std::string base = path;
  while (!base.empty() && base.back() == '/') base.pop_back();
  base = base.substr(base.find_last_of('/') + 1);
  const size_t dot = base.rfind('.');
  if (dot != std::string::npos && dot > 0) base.resize(dot);
  std::string out;
  for (char c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out.push_back(ok ? c : '-');
  }
  return out.empty() ? "model" : out;
}

}  // namespace tenax::data
