#include "tenax/model/hf.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/checkpoint/testing_fs.h"
#include "tenax/core/temp_dir.h"

namespace tenax::model {
namespace {

using nlohmann::json;
using testing::TempDir;

ModelCheckpoint RandomCheckpoint(bool tied) {
  ModelSpec s;
  s.name = "hf-test";
  s.dim = 32;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_hidden_dim = 64;
  s.vocab_size = 50;
  s.max_seq_len = 64;
  s.tie_embeddings = tied;
  Llama m(s, 3, at::kCPU);
  ModelCheckpoint c;
  c.dir = "random";
  c.spec = s;
  for (const auto& p : m.params()) c.params.push_back({p.name, p.tensor.detach().clone()});
  return c;
}

int64_t Bytes(const std::vector<NamedTensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.tensor.numel() * static_cast<int64_t>(t.tensor.element_size());
  return n;
}

void ExpectSameParams(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_TRUE(at::equal(a[i].tensor, b[i].tensor)) << a[i].name;
  }
}

TEST(HfExport, ShardsAboveTheLimitWithAnIndexAndReadsBack) {
  TempDir dir;
  const ModelCheckpoint c = RandomCheckpoint(/*tied=*/false);
  HfExportOptions o;
  o.max_shard_bytes = 20000;  // a layer holds ~37 KB: several shards, each tensor < 20 KB
  o.bos_id = 48;
  o.eos_id = 49;
  o.extra_files["tokenizer.json"] = "{}";
  ASSERT_TRUE(ExportHf(c, dir / "hf", o).ok());
  Result<std::vector<std::string>> names = LocalFs().ListDir(dir / "hf");
  ASSERT_TRUE(names.ok());
  EXPECT_FALSE(LocalFs().Exists(dir / "hf/model.safetensors"));
  const json index = json::parse(*LocalFs().ReadFile(dir / "hf/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], Bytes(c.params));
  EXPECT_EQ(index["weight_map"].size(), c.params.size());
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file);
  const size_t n = shards.size();
  ASSERT_GT(n, 2u);
  for (size_t k = 1; k <= n; ++k) {
    const std::string want = fmt::format("model-{:05d}-of-{:05d}.safetensors", k, n);
    EXPECT_TRUE(shards.count(want)) << want;
    // Each shard within the limit (no single tensor here exceeds it).
    Result<ckpt::SafetensorsFile> f = ckpt::SafetensorsFile::Open(dir / ("hf/" + want));
    ASSERT_TRUE(f.ok());
    size_t bytes = 0;
    for (const auto& t : f->names()) bytes += f->Get(t)->nbytes;
    EXPECT_LE(bytes, 20000u) << want;
  }
  EXPECT_EQ(names->size(), n + 4);  // shards, index, config, generation config, tokenizer.json
  const json config = json::parse(*LocalFs().ReadFile(dir / "hf/config.json"));
  EXPECT_EQ(config["bos_token_id"], 48);
  EXPECT_EQ(config["eos_token_id"], 49);
  EXPECT_EQ(config["torch_dtype"], "float32");
  const json gen = json::parse(*LocalFs().ReadFile(dir / "hf/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 48);
  EXPECT_EQ(gen["eos_token_id"], 49);
  EXPECT_EQ(gen["max_length"], 64);

  Result<HfModel> back = ReadHf(dir / "hf");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameParams(c.params, back->params);  // bit for bit, through the shards
  EXPECT_EQ(back->bos_id, std::optional<int64_t>(48));
  EXPECT_EQ(back->eos_ids, std::vector<int64_t>{49});

  // One file when everything fits; a list of EOS ids (Llama 3 instruct) is read whole.
  ASSERT_TRUE(ExportHf(c, dir / "one", {}).ok());
  EXPECT_TRUE(LocalFs().Exists(dir / "one/model.safetensors"));
  EXPECT_FALSE(LocalFs().Exists(dir / "one/model.safetensors.index.json"));
  ASSERT_TRUE(LocalFs()
                  .WriteFileAtomic(dir / "one/generation_config.json",
                                   R"({"bos_token_id": 1, "eos_token_id": [7, 9]})")
                  .ok());
  back = ReadHf(dir / "one");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->eos_ids, (std::vector<int64_t>{7, 9}));
}

TEST(HfExport, RefusesANonEmptyFolder) {
  TempDir dir;
  ASSERT_TRUE(LocalFs().CreateDirs(dir / "hf").ok());
  ASSERT_TRUE(LocalFs().WriteFileAtomic(dir / "hf/mine.txt", "keep").ok());
  const Status st = ExportHf(RandomCheckpoint(true), dir / "hf", {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("already exists and is not empty"), std::string::npos);
  EXPECT_EQ(*LocalFs().ReadFile(dir / "hf/mine.txt"), "keep");
  // An empty folder (e.g. made by a job script) is fine.
  ASSERT_TRUE(LocalFs().CreateDirs(dir / "empty").ok());
  EXPECT_TRUE(ExportHf(RandomCheckpoint(true), dir / "empty", {}).ok());
}

// A crash at any step leaves either no folder at the destination or the complete one, never a
// folder that looks like an export but lacks files; a failed write leaves nothing behind.
TEST(HfExport, CrashAtAnyStepLeavesNoHalfFolder) {
  const ModelCheckpoint c = RandomCheckpoint(false);
  HfExportOptions o;
  o.max_shard_bytes = 20000;
  o.extra_files["tokenizer.json"] = "{}";
  int64_t ops = 0;
  {
    TempDir dir;
    ckpt::FaultyFileSystem fs(LocalFs());
    ASSERT_TRUE(ExportHf(c, dir / "hf", o, fs).ok());
    ops = static_cast<int64_t>(fs.ops().size());
  }
  ASSERT_GT(ops, 8);
  for (int64_t crash = 0; crash < ops; ++crash) {
    SCOPED_TRACE("crash at operation " + std::to_string(crash));
    TempDir dir;
    ckpt::FaultyFileSystem fs(LocalFs());
    fs.CrashAt(crash);
    EXPECT_THROW((void)ExportHf(c, dir / "hf", o, fs), ckpt::SimulatedCrash);
    if (LocalFs().Exists(dir / "hf")) {
      Result<HfModel> m = ReadHf(dir / "hf");
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      ExpectSameParams(c.params, m->params);
      EXPECT_TRUE(LocalFs().Exists(dir / "hf/tokenizer.json"));
      EXPECT_TRUE(LocalFs().Exists(dir / "hf/generation_config.json"));
    }
    // The next export (another process) succeeds whatever the crash left.
    EXPECT_TRUE(ExportHf(c, dir / "again", o).ok());
  }
  TempDir dir;
  ckpt::FaultyFileSystem fs(LocalFs());
  fs.FailWriteAt(2);
  const Status st = ExportHf(c, dir / "hf", o, fs);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  Result<std::vector<std::string>> left = LocalFs().ListDir(dir.path());
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << (*left)[0];
}

TEST(HfExport, ParseByteSize) {
  EXPECT_EQ(*ParseByteSize("5GB"), 5000000000);
  EXPECT_EQ(*ParseByteSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("500MB"), 500000000);
  EXPECT_EQ(*ParseByteSize("1.5KiB"), 1536);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  EXPECT_FALSE(ParseByteSize("5 gigs").ok());
  EXPECT_FALSE(ParseByteSize("GB").ok());
  EXPECT_FALSE(ParseByteSize("0").ok());
}

}  // namespace
}  // namespace tenax::model
