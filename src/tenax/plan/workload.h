// What is being trained and how, as the planner sees it: the model's shape (a Llama-style or a
// GPT-style transformer of any size), the sequence length and global batch, the software features
// of the run (attention kernel, dropout, overlaps, fused kernels), and the per-GPU widths of a
// layer once tensor parallelism has cut it. Mixture-of-experts layers (ModelSpec::moe) are
// counted here (total vs active parameters); their per-GPU costs are in plan/moe_model.h.
// Non-goals: the data pipeline, optimizer hyper-parameters (only AdamW's state size matters).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tenax/config/model_spec.h"
#include "tenax/core/status.h"

namespace tenax::plan {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How the elementwise work between matmuls runs: it changes the bytes those kernels move.
enum class Kernels {
  kEager,  // one kernel per op: tenax's trainer, torchtitan without torch.compile
  kFused,  // fused add+norm, rotary, activation, bias+dropout+add: torch.compile, Megatron / TE
};
const char* KernelsName(Kernels k);
Result<Kernels> ParseKernels(const std::string& text);

// The attention kernel. The flash kernels' speeds come from the hardware profile's measured
// tables; materialized attention is costed from its parts (two batched GEMMs, softmax, dropout).
enum class AttentionKind {
  kFlash2,        // FlashAttention-2 (PyTorch SDPA's flash backend: tenax, torchtitan)
  kFlash3,        // FlashAttention-3 / cuDNN-class Hopper kernels (Transformer Engine)
  kMaterialized,  // scores materialized: baddbmm + fused scale-mask-softmax + dropout + bmm
};
const char* AttentionName(AttentionKind a);
Result<AttentionKind> ParseAttention(const std::string& text);

// Tensor-parallel communication overlap (a software feature of the run, not of the hardware).
enum class TpOverlap {
  kNone,      // every tensor-parallel collective waits (tenax; torchtitan without AsyncTP)
  kBackward,  // Megatron's asynchronous input-gradient all-reduce, hidden behind the weight
              // gradient GEMM in backward
  kFull,      // every collective decomposed and overlapped with its neighbouring GEMM
              // (Transformer Engine userbuffers)
  kAsyncTp,   // torchtitan's AsyncTP: TorchInductor's micro-pipeline TP pass
              // (torch/_inductor/fx_passes/micro_pipeline_tp.py) fuses an all-gather with the
              // matmuls that consume it and a reduce-scatter with the one matmul that produces
              // it. The input-gradient reduce-scatters of the attention and MLP blocks reduce a
              // sum of matmuls (wq + wk + wv, w1 + w3), which the pattern does not match: they
              // stay exposed; the other six are overlapped as with kFull
};
const char* TpOverlapName(TpOverlap t);
Result<TpOverlap> ParseTpOverlap(const std::string& text);

// How context parallelism runs attention (a software feature of the run).
enum class CpAttention {
  kAllGather,  // Llama 3's: gather K and V (their own heads), one causal kernel per rank
  kRing,       // PyTorch's ring attention (torchtitan): K and V with every query head (repeat_kv
               // runs before SDPA), one flash kernel per ring step, the outputs merged in fp32,
               // K/V gradients accumulated in fp32 and passed around the ring
};
const char* CpAttentionName(CpAttention c);
Result<CpAttention> ParseCpAttention(const std::string& text);

// The transformer's building blocks. Llama: RMSNorm, SwiGLU, rotary, no biases. GPT (Megatron's
// GPT-2/3 models): LayerNorm, GELU MLP, learned positions, biases on every linear layer.
struct Architecture {
  bool gated_mlp = true;           // SwiGLU (3 matrices) vs GELU (2)
  bool layer_norm = false;         // LayerNorm (weight + bias) vs RMSNorm
  bool biases = false;             // biases on the linear layers
  bool learned_positions = false;  // a learned position embedding table (seq_len x dim)
};
// Megatron's GPT-2/3 blocks (`--arch gpt`): GELU MLP, LayerNorm, biases, learned positions.
constexpr Architecture kGptArchitecture = {/*gated_mlp=*/false, /*layer_norm=*/true,
                                           /*biases=*/true, /*learned_positions=*/true};

// Software features of the run. Defaults are tenax train's.
struct Software {
  Kernels kernels = Kernels::kEager;
  AttentionKind attention = AttentionKind::kFlash2;
  double dropout = 0;             // probability on attention probabilities and residual branches
  bool sequence_parallel = true;  // norms and dropout sharded over tensor-parallel ranks
  TpOverlap tp_overlap = TpOverlap::kNone;
  bool dp_overlap = true;   // gradient reduction / parameter gathers overlap compute
  bool pp_overlap = false;  // steady-state pipeline sends overlap compute
  CpAttention cp_attention = CpAttention::kAllGather;
  // Rotary embeddings as complex multiplication (torchtitan's apply_rotary_emb: view_as_complex,
  // multiply, view_as_real). TorchInductor generates no code for complex operators and runs them
  // as eager fallback kernels (its "does not support code generation for complex operators"
  // warning, pytorch/torchtitan#15), so under torch.compile the rotary and what surrounds it stay
  // unfused. Eager kernels are unaffected.
  bool complex_rotary = false;
};

// Parameter counts of the model as the planner sizes it (biases and position tables included).
struct ModelParams {
  double embedding = 0;  // token (+ position) embedding tables
  double per_layer = 0;  // one transformer layer (MoE: the mean over layers of what a token uses)
  double layers = 0;     // all layers
  double output = 0;     // output projection (0 when tied to the embedding)
  double total = 0;
  double matmul = 0;   // parameters a token runs through in matmuls: layers' projections (MoE:
                       // top_k of the routed experts) + output (6N's N)
  double experts = 0;  // routed experts of every MoE layer (0 for dense models)
  double active = 0;   // total minus the routed experts a token does not use
};

struct Workload {
  ModelSpec model;
  Architecture arch;
  Software sw;
  std::string shape_name;  // what reports print: the preset, or the shape when it differs
  int64_t seq_len = 0;
  int64_t global_batch_tokens = 0;  // a whole number of sequences
  ModelParams params;
  // Model FLOPs per token: 6 x matmul parameters + 12 L H d S (attention counted without the
  // causal half), the convention of Megatron-LM, torchtitan and the Llama 3 paper, which every
  // TFLOP/s and MFU figure the planner prints uses. Hardware FLOPs add recomputation.
  double flops_per_token = 0;

  int64_t sequences() const { return global_batch_tokens / seq_len; }
};

ModelParams CountModelParams(const ModelSpec& m, const Architecture& a, int64_t seq_len);

// Checks that the batch is a whole number of sequences and the sizes are positive.
Result<Workload> MakeWorkload(const ModelSpec& model, int64_t seq_len, int64_t global_batch_tokens,
                              Kernels kernels = Kernels::kEager);
Result<Workload> MakeWorkload(const ModelSpec& model, const Architecture& arch, const Software& sw,
                              int64_t seq_len, int64_t global_batch_tokens);

// `preset_or_config` is a preset name (llama3-405b) or a tenax TOML config whose [model] section
// is used. Debug presets take their vocabulary from the data; the byte tokenizer's 256 stands in.
// When it is a config, *config_seq_len receives its training.seq_len (else 0).
Result<ModelSpec> LoadPlanModel(const std::string& preset_or_config, int64_t* config_seq_len);
// Whether LoadPlanModel reads `preset_or_config` as a config file (a path, a .toml name, or a
// file that exists) rather than a preset name.
bool IsPlanConfigFile(const std::string& preset_or_config);

// Shape flags of `tenax plan` (--layers --hidden --heads --kv-heads --ffn --vocab): each set one
// overrides the base; with no base, all of layers, hidden, heads, ffn and vocab are required.
struct ShapeOverrides {
  std::optional<int64_t> layers, hidden, heads, kv_heads, ffn, vocab;
  bool any() const { return layers || hidden || heads || kv_heads || ffn || vocab; }
};
// Applies `o` to `base` (nullptr: no base) and checks the result; `label` names the base.
Result<ModelSpec> ApplyShape(const ModelSpec* base, const ShapeOverrides& o);
// "llama3-8b", or "custom: 48 layers, hidden 6144, 64 heads (64 kv), ffn 24576, vocab 51200, gelu,
// layernorm" when the shape is not a preset's.
std::string ShapeName(const ModelSpec& m, const Architecture& a, bool from_preset);

// One transformer layer on one tensor-parallel rank. Key/value heads are replicated when tp
// exceeds n_kv_heads (each rank then holds one kv head).
struct LayerWidths {
  int64_t h = 0;      // model dim (the full width: sequence-parallel regions shard tokens)
  int64_t q = 0;      // query / attention-output columns on this rank: dim / tp
  int64_t kv = 0;     // key (= value) columns on this rank
  int64_t f = 0;      // feed-forward columns on this rank: ffn_hidden_dim / tp
  int64_t heads = 0;  // query heads on this rank
  int64_t head_dim = 0;
  double params = 0;  // parameters of one layer on this rank (norms replicated)
};
LayerWidths WidthsFor(const ModelSpec& m, int64_t tp, const Architecture& a = {});

// Whether `tp` can cut this model: heads split evenly, kv heads split or replicated evenly,
// the feed-forward width splits evenly. Returns the reason when not.
std::string TensorParallelProblem(const ModelSpec& m, int64_t tp);

}  // namespace tenax::plan
