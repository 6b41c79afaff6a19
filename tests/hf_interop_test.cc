// Hugging Face interop through the CLI, as a user runs it: `tenax export-hf` and `tenax import-hf`
// must round-trip weights bit for bit in both directions (the q/k row permutation and its inverse
// are exact reorderings), write a config.json that transformers can load, narrow to bf16 on
// request, and refuse damaged or mismatched inputs with a message that names what is wrong.
// Non-goals: numerical agreement with a forward pass (tests/reference_test.cc does that), sharded
// HF checkpoints.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/config/model_spec.h"
#include "tenax/config/model_spec_json.h"
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
