// Reference tests: tenax's Llama forward pass against tests/reference/llama_reference.py, an
// independent float64 implementation written in Hugging Face's conventions (Llama and Mixtral:
// for mixture-of-experts models also the load-balancing loss). The reference reads
// what `tenax export-hf` writes (run as a user runs it), so one agreement checks the model (RoPE
// layout and Llama 3.1 scaling, GQA, RMSNorm, SwiGLU, tied output) and the exporter (names,
// config.json, the q/k row permutation between Meta's interleaved and HF's half-split RoPE).
// A negative test proves the comparison has teeth: a wrong layout or a dropped rope scaling must
// move the reference's logits far outside the tolerance.
// Non-goals: gradients (model/layers_test.cc checks them by finite differences), GPU numerics.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "tenax/checkpoint/safetensors.h"
#include "tenax/config/model_spec.h"
#include "tenax/model/llama.h"
#include "tenax/model/model_checkpoint.h"
#include "tenax/model/tensor_io.h"
#include "test_util.h"

namespace tenax {
namespace {

using testing::Python;
using testing::ReadFile;
using testing::Run;
using testing::RunTenax;
using testing::SourceDir;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeqLen = 24;
constexpr int64_t kVocab = 96;

// tenax computes in fp32, the reference in fp64 from the same fp32 weights. Logits (up to ~10
// here) come out of a few matmuls of width <= 192 and two RMSNorms per layer, so fp32 rounding
// leaves ~1e-5 (observed: 7e-6 .. 1.1e-5); 1e-4 leaves headroom while a layout or formula error
// (the negative test below) moves logits by ~1 or more. The loss is a mean over 48 positions and
// lands within an fp32 ulp or two of the reference (observed <= 5e-7).
constexpr double kLogitsTolerance = 1e-4;
constexpr double kLossTolerance = 1e-5;

bool PythonHasTorch() {
  static const bool ok = Run(Python() + " -c 'import torch'").exit_code == 0;
  return ok;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Debug-tiny's structure (dim 64, 2 layers, SwiGLU 192), with the head layout under test.
ModelSpec SmallSpec(int64_t n_heads, int64_t n_kv_heads, bool tied, bool rope_scaling) {
  ModelOptions o;
  o.preset = "debug-tiny";
  o.n_heads = n_heads;
  o.n_kv_heads = n_kv_heads;
  o.vocab_size = kVocab;
  o.tie_embeddings = tied;
  o.rope_scaling = rope_scaling;
  // Large enough that logits are O(1): with 0.02 they are ~0 and every layout would "agree".
  o.init_std = 0.2;
  Result<ModelSpec> spec = ResolveModelSpec(o, kVocab);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());  // gtest reports it
  ModelSpec s = *spec;
  // With head_dim 16 and theta 10000 the RoPE wavelengths are 2*pi*10^(i/2) = 6.3, 19.9, 62.8,
  // ... positions. original_max_position 32 (low/high freq factors 1 and 4) puts the first pair
  // in the high-frequency band (< 8, kept), the second in the smoothed band (8..32) and the rest
  // in the low-frequency band (> 32, divided by 8), so one short sequence exercises all three.
  s.rope_scaling.original_max_position = 32;
  s.rope_scaling.factor = 8.0;
  return s;
}

// A seeded random model whose norm weights are perturbed away from 1, so a reference that
// ignored (or misnamed) a norm weight would disagree.
std::unique_ptr<model::Llama> RandomModel(const ModelSpec& spec, uint64_t seed) {
  auto m = std::make_unique<model::Llama>(spec, seed, at::kCPU);
  at::Generator gen = at::detail::createCPUGenerator(seed + 1);
  at::NoGradGuard no_grad;
  for (auto& p : m->params()) {
    if (p.tensor.dim() == 1) p.tensor.add_(at::normal(0.0, 0.2, p.tensor.sizes(), gen));
  }
  return m;
}

std::map<std::string, at::Tensor> ReadSafetensors(const std::string& path) {
  Result<std::map<std::string, at::Tensor>> tensors = model::ReadTensorFile(path);
  EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
  return tensors.ok() ? std::move(*tensors) : std::map<std::string, at::Tensor>{};
}

void WriteSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<model::NamedTensor> list;
  for (const auto& [name, t] : tensors) list.push_back({name, t});
  WriteFile(path, model::SerializeTensors(list));
}

struct ReferenceOutput {
  at::Tensor logits;                   // (B, T, V) fp32
  at::Tensor loss;                     // () fp32
  at::Tensor aux_loss, router_margin;  // () fp64, Mixtral only
};

// Runs the Python reference on `hf_dir`; fails the test (and returns empty tensors) on error.
ReferenceOutput RunReference(const TempDir& dir, const std::string& hf_dir,
                             const std::string& tokens_file) {
  const std::string out = dir / "reference_out.safetensors";
  const auto r = Run(Python() + " " + Quote(SourceDir() + "/tests/reference/llama_reference.py") +
                     " " + Quote(hf_dir) + " " + Quote(tokens_file) + " " + Quote(out));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return {};
  auto tensors = ReadSafetensors(out);
  return {tensors["logits"], tensors["loss"], tensors["aux_loss"], tensors["router_margin"]};
}

// The full check for one model shape: export with the CLI, run the reference, compare.
void ExpectMatchesReference(const ModelSpec& spec, uint64_t seed) {
  if (!PythonHasTorch()) GTEST_SKIP() << Python() << " cannot import torch";
  TempDir dir;
  auto model = RandomModel(spec, seed);
  const std::string ckpt = dir / "ckpt";
  const Status written = model::WriteModelCheckpoint(ckpt, 0, spec, model->params(), {});
  ASSERT_TRUE(written.ok()) << written.ToString();
  const auto exported =
      RunTenax("export-hf " + Quote(ckpt) + " --out " + Quote(dir / "hf"), dir.path());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  at::Generator gen = at::detail::createCPUGenerator(seed + 2);
  const at::Tensor tokens = at::randint(0, spec.vocab_size, {kBatch, kSeqLen}, gen, at::kLong);
  const at::Tensor targets = at::randint(0, spec.vocab_size, {kBatch, kSeqLen}, gen, at::kLong);
  WriteSafetensors(dir / "tokens.safetensors", {{"tokens", tokens}, {"targets", targets}});

  const ReferenceOutput ref = RunReference(dir, dir / "hf", dir / "tokens.safetensors");
  ASSERT_TRUE(ref.logits.defined() && ref.loss.defined());
  ASSERT_EQ(ref.logits.sizes().vec(), (std::vector<int64_t>{kBatch, kSeqLen, spec.vocab_size}));
  ASSERT_EQ(ref.loss.numel(), 1);

  at::NoGradGuard no_grad;
  const at::Tensor logits = model->Logits(tokens);
  const double loss = model->Loss(tokens, targets).item<double>();
  // Guard the tolerance's meaning: near-zero logits would agree under any layout.
  ASSERT_GT(ref.logits.std().item<double>(), 0.5);
  const double max_diff = (logits - ref.logits).abs().max().item<double>();
  const double loss_diff = std::abs(loss - ref.loss.item<double>());
  std::printf("max |logits diff| = %.3g, |loss diff| = %.3g (loss %.6f)\n", max_diff, loss_diff,
              loss);
  EXPECT_LT(max_diff, kLogitsTolerance) << "max |tenax - reference| logits";
  EXPECT_LT(loss_diff, kLossTolerance) << "tenax loss " << loss;
}

TEST(Reference, UntiedGqaNoRopeScaling) {
  ExpectMatchesReference(SmallSpec(4, 2, /*tied=*/false, /*rope_scaling=*/false), 11);
}

TEST(Reference, TiedGqaWithLlama31RopeScaling) {
  ExpectMatchesReference(SmallSpec(4, 2, /*tied=*/true, /*rope_scaling=*/true), 12);
}

TEST(Reference, MultiHeadAttention) {
  ExpectMatchesReference(SmallSpec(4, 4, /*tied=*/false, /*rope_scaling=*/true), 13);
}

TEST(Reference, MultiQueryAttention) {
  // 8 heads sharing one kv head, head_dim 8: repeat_kv's broadcast at its widest.
  ExpectMatchesReference(SmallSpec(8, 1, /*tied=*/true, /*rope_scaling=*/false), 14);
}

// The comparison must fail when the layout or the config is wrong; otherwise the tests above
// could pass for a reason other than correctness (e.g. logits insensitive to RoPE).
TEST(Reference, DetectsWrongRopeLayoutAndMissingScaling) {
  if (!PythonHasTorch()) GTEST_SKIP() << Python() << " cannot import torch";
  const ModelSpec spec = SmallSpec(4, 2, /*tied=*/true, /*rope_scaling=*/true);
  TempDir dir;
  auto model = RandomModel(spec, 21);
  ASSERT_TRUE(model::WriteModelCheckpoint(dir / "ckpt", 0, spec, model->params(), {}).ok());
  const auto exported =
      RunTenax("export-hf " + Quote(dir / "ckpt") + " --out " + Quote(dir / "hf"), dir.path());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  at::Generator gen = at::detail::createCPUGenerator(22);
  const at::Tensor tokens = at::randint(0, kVocab, {kBatch, kSeqLen}, gen, at::kLong);
  WriteSafetensors(dir / "tokens.safetensors", {{"tokens", tokens}, {"targets", tokens}});
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->Logits(tokens);

  // The correct export agrees (the baseline for the two broken variants).
  const ReferenceOutput good = RunReference(dir, dir / "hf", dir / "tokens.safetensors");
  ASSERT_TRUE(good.logits.defined());
  EXPECT_LT((logits - good.logits).abs().max().item<double>(), kLogitsTolerance);

  // (1) An exporter that forgot the q/k permutation: HF folder with tenax's interleaved rows.
  std::filesystem::copy(dir / "hf", dir / "hf_unpermuted");
  auto hf = ReadSafetensors(dir / "hf/model.safetensors");
  ASSERT_FALSE(hf.empty());
  for (const auto& p : model->params()) {
    for (const auto& [tenax_name, hf_name] : {std::pair{"attention.wq.weight", "q_proj.weight"},
                                              std::pair{"attention.wk.weight", "k_proj.weight"}}) {
      const std::string suffix = tenax_name;
      if (p.name.size() > suffix.size() && p.name.substr(p.name.size() - suffix.size()) == suffix) {
        const std::string layer = p.name.substr(0, p.name.size() - suffix.size());  // layers.i.
        const std::string key = "model." + layer + "self_attn." + hf_name;
        ASSERT_TRUE(hf.count(key)) << key;
        hf[key] = p.tensor.detach().clone();
      }
    }
  }
  WriteSafetensors(dir / "hf_unpermuted/model.safetensors", hf);
  const ReferenceOutput unpermuted =
      RunReference(dir, dir / "hf_unpermuted", dir / "tokens.safetensors");
  ASSERT_TRUE(unpermuted.logits.defined());
  const double unpermuted_diff = (logits - unpermuted.logits).abs().max().item<double>();
  std::printf("unpermuted q/k rows: max |logits diff| = %.3g\n", unpermuted_diff);
  EXPECT_GT(unpermuted_diff, 1e-3)
      << "the reference cannot tell interleaved from half-split q/k rows";

  // (2) A config without rope_scaling: at T = 24 the scaled bands change the rotation angles.
  std::filesystem::copy(dir / "hf", dir / "hf_unscaled");
  nlohmann::json config = nlohmann::json::parse(ReadFile(dir / "hf/config.json"));
  ASSERT_TRUE(config["rope_scaling"].is_object()) << config.dump(2);
  config["rope_scaling"] = nullptr;
  WriteFile(dir / "hf_unscaled/config.json", config.dump(2));
  const ReferenceOutput unscaled =
      RunReference(dir, dir / "hf_unscaled", dir / "tokens.safetensors");
  ASSERT_TRUE(unscaled.logits.defined());
  const double unscaled_diff = (logits - unscaled.logits).abs().max().item<double>();
  std::printf("rope_scaling dropped: max |logits diff| = %.3g\n", unscaled_diff);
  EXPECT_GT(unscaled_diff, 1e-3) << "rope scaling does not affect logits at this sequence length";
}

}  // namespace
}  // namespace tenax

namespace tenax {
namespace {

// Mixtral: debug-moe's shape (8 experts, 2 per token) and a top-1 variant with 4 experts. tenax's
// MoE runs in fp32 against the reference's fp64; the expert choice is the same only where the
// router's k-th and (k+1)-th probabilities differ by more than fp32 rounding, which the
// reference reports (router_margin) and the test requires (> 1e-5, against ~1e-7 rounding), so
// the tolerances above keep their meaning. The aux loss is a mean of products of counts and
// probabilities (observed 3.2e-8 apart; logits 8.6e-6 and 2.2e-5, loss <= 4.8e-7); 1e-5.
constexpr double kAuxTolerance = 1e-5;

ModelSpec MixtralSpec(int64_t experts, int64_t top_k, bool tied) {
  ModelOptions o;
  o.preset = "debug-moe";
  o.vocab_size = kVocab;
  o.n_experts = experts;
  o.n_experts_per_token = top_k;
  o.tie_embeddings = tied;
  o.init_std = 0.2;
  Result<ModelSpec> spec = ResolveModelSpec(o, kVocab);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  return *spec;
}

double CppAuxLoss(model::Llama& model, const at::Tensor& tokens) {
  model::MoeState& moe = *model.moe();
  moe.EndStep(false);
  { (void)model.Loss(tokens, tokens); }  // with gradients on: the statistics are recorded
  double sum = 0;
  int layers = 0;
  for (const auto& s : moe.step_stats()) {
    if (s.forwards == 0) continue;
    sum += s.aux_sum;
    ++layers;
  }
  moe.EndStep(false);
  return sum / layers;
}

void ExpectMixtralMatchesReference(const ModelSpec& spec, uint64_t seed) {
  if (!PythonHasTorch()) GTEST_SKIP() << Python() << " cannot import torch";
  TempDir dir;
  auto model = RandomModel(spec, seed);
  ASSERT_TRUE(model::WriteModelCheckpoint(dir / "ckpt", 0, spec, model->params(), {}).ok());
  const auto exported =
      RunTenax("export-hf " + Quote(dir / "ckpt") + " --out " + Quote(dir / "hf"), dir.path());
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const nlohmann::json config = nlohmann::json::parse(ReadFile(dir / "hf/config.json"));
  EXPECT_EQ(config["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(config["num_local_experts"], spec.moe.n_experts);
  at::Generator gen = at::detail::createCPUGenerator(seed + 2);
  const at::Tensor tokens = at::randint(0, spec.vocab_size, {kBatch, kSeqLen}, gen, at::kLong);
  const at::Tensor targets = at::randint(0, spec.vocab_size, {kBatch, kSeqLen}, gen, at::kLong);
  WriteSafetensors(dir / "tokens.safetensors", {{"tokens", tokens}, {"targets", targets}});
  const ReferenceOutput ref = RunReference(dir, dir / "hf", dir / "tokens.safetensors");
  ASSERT_TRUE(ref.logits.defined() && ref.aux_loss.defined() && ref.router_margin.defined());
  ASSERT_GT(ref.router_margin.item<double>(), 1e-5) << "choose another seed: a near tie";
  ASSERT_GT(ref.logits.std().item<double>(), 0.5);
  const double aux = CppAuxLoss(*model, tokens);
  at::NoGradGuard no_grad;
  const double max_diff = (model->Logits(tokens) - ref.logits).abs().max().item<double>();
  const double loss_diff =
      std::abs(model->Loss(tokens, targets).item<double>() - ref.loss.item<double>());
  const double aux_diff = std::abs(aux - ref.aux_loss.item<double>());
  std::printf(
      "max |logits diff| = %.3g, |loss diff| = %.3g, |aux diff| = %.3g (aux %.6f, "
      "router margin %.3g)\n",
      max_diff, loss_diff, aux_diff, aux, ref.router_margin.item<double>());
  EXPECT_LT(max_diff, kLogitsTolerance);
  EXPECT_LT(loss_diff, kLossTolerance);
  EXPECT_LT(aux_diff, kAuxTolerance);
  EXPECT_GT(aux, 1.0) << "a random router is not perfectly balanced";
}

TEST(Reference, MixtralEightExpertsTopTwo) {
  ExpectMixtralMatchesReference(MixtralSpec(8, 2, false), 31);
}

TEST(Reference, MixtralFourExpertsTopOneTied) {
  ExpectMixtralMatchesReference(MixtralSpec(4, 1, true), 32);
}

// Experts are named by global index on both sides: an HF folder whose experts 0 and 1 trade
// places (routers unchanged) must disagree, or the MoE comparison could not see a wrong order.
TEST(Reference, DetectsSwappedExperts) {
  if (!PythonHasTorch()) GTEST_SKIP() << Python() << " cannot import torch";
  const ModelSpec spec = MixtralSpec(8, 2, false);
  TempDir dir;
  auto model = RandomModel(spec, 41);
  ASSERT_TRUE(model::WriteModelCheckpoint(dir / "ckpt", 0, spec, model->params(), {}).ok());
  ASSERT_EQ(RunTenax("export-hf " + Quote(dir / "ckpt") + " --out " + Quote(dir / "hf"), dir.path())
                .exit_code,
            0);
  at::Generator gen = at::detail::createCPUGenerator(42);
  const at::Tensor tokens = at::randint(0, kVocab, {kBatch, kSeqLen}, gen, at::kLong);
  WriteSafetensors(dir / "tokens.safetensors", {{"tokens", tokens}, {"targets", tokens}});
  std::filesystem::copy(dir / "hf", dir / "hf_swapped");
  auto hf = ReadSafetensors(dir / "hf/model.safetensors");
  for (const char* w : {"w1", "w2", "w3"}) {
    const std::string a = std::string("model.layers.0.block_sparse_moe.experts.0.") + w + ".weight";
    const std::string b = std::string("model.layers.0.block_sparse_moe.experts.1.") + w + ".weight";
    ASSERT_TRUE(hf.count(a) && hf.count(b)) << a;
    std::swap(hf[a], hf[b]);
  }
  WriteSafetensors(dir / "hf_swapped/model.safetensors", hf);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->Logits(tokens);
  const ReferenceOutput good = RunReference(dir, dir / "hf", dir / "tokens.safetensors");
  const ReferenceOutput swapped = RunReference(dir, dir / "hf_swapped", dir / "tokens.safetensors");
  ASSERT_TRUE(good.logits.defined() && swapped.logits.defined());
  EXPECT_LT((logits - good.logits).abs().max().item<double>(), kLogitsTolerance);
  const double diff = (logits - swapped.logits).abs().max().item<double>();
  std::printf("experts 0 and 1 swapped: max |logits diff| = %.3g\n", diff);
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace tenax
