#include "tenax/plan/validate_cases.h"

namespace tenax::plan {
namespace {

// Megatron-LM's GPT models: LayerNorm, GELU MLP of 4h, biases, learned positions, output tied to
// the embedding, vocabulary 51,200, sequences of 2,048 (Narayanan et al. 2021, section 5.1).
ModelSpec Gpt(int64_t heads, int64_t hidden, int64_t layers) {
  ModelSpec m;
  m.name = "gpt";
  m.n_layers = layers;
  m.dim = hidden;
  m.n_heads = heads;
  m.n_kv_heads = heads;
  m.ffn_hidden_dim = 4 * hidden;
  m.vocab_size = 51200;
  m.tie_embeddings = true;  // Megatron-LM ties the output projection to the embedding
  return m;
}

// Megatron-LM in 2021: fused kernels (bias+GELU, bias+dropout+add, scale-mask-softmax), scores
// materialized, dropout 0.1, no sequence parallelism, no overlap of tensor-parallel or pipeline
// traffic. Gradients: Megatron's "local" DDP reduces after backward; MegatronRow turns overlap on
// where the run used PyTorch's DDP instead.
Software Megatron2021() {
  Software sw;
  sw.kernels = Kernels::kFused;
  sw.attention = AttentionKind::kMaterialized;
  sw.dropout = 0.1;
  sw.sequence_parallel = false;
  sw.tp_overlap = TpOverlap::kNone;
  sw.dp_overlap = false;
  sw.pp_overlap = false;
  return sw;
}

ModelSpec Llama2(int64_t dim, int64_t layers, int64_t heads, int64_t kv, int64_t ffn) {
  ModelSpec m;
  m.name = "llama2";
  m.dim = dim;
  m.n_layers = layers;
  m.n_heads = heads;
  m.n_kv_heads = kv;
  m.ffn_hidden_dim = ffn;
  m.vocab_size = 32000;
  return m;
}

// torchtitan: FSDP2 with an fp32 gradient reduce-scatter, SDPA flash attention, eager kernels
// unless torch.compile is on, PyTorch's ring attention for context parallelism, rotary embeddings
// as complex multiplication (torchtitan's models/llama/model.py, apply_rotary_emb).
Software Torchtitan(bool compiled) {
  Software sw;
  sw.kernels = compiled ? Kernels::kFused : Kernels::kEager;
  sw.cp_attention = CpAttention::kRing;
  sw.complex_rotary = true;
  return sw;
}
Software TorchtitanAsyncTp() {
  Software sw = Torchtitan(true);
  sw.tp_overlap = TpOverlap::kAsyncTp;
  return sw;
}

// Meta's Llama 3 stack: fused kernels; its attention kernel and overlap settings are not published
// (PyTorch's flash kernel and no tensor-parallel overlap are assumed). Context parallelism as the
// paper describes it: K and V all-gathered, one attention kernel per rank.
Software Meta() {
  Software sw = Torchtitan(true);
  sw.cp_attention = CpAttention::kAllGather;
  sw.complex_rotary = false;  // Meta's kernels are not published: fused as modelled before
  return sw;
}

const char* kMegatron =
    "Narayanan et al. 2021, \"Efficient Large-Scale Language Model Training on GPU Clusters Using "
    "Megatron-LM\" (SC21), Table 1";
const char* kMegatronT2 = "Narayanan et al. 2021 (SC21), Table 2, PTD parallelism";
const char* kTitanA100 = "torchtitan docs/performance.md (2024), Llama 3 / Llama 2 on 64 A100";
const char* kTitanH100 = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md";
const char* kLlama3 = "Meta 2024, \"The Llama 3 Herd of Models\", Table 4";

PublishedRun MegatronRow(int64_t heads, int64_t hidden, int64_t layers, int64_t tp, int64_t pp,
                         int64_t gpus, int64_t batch, double tflops, const char* claim,
                         const char* fix, const char* source) {
  PublishedRun r;
  r.group = "A100, Megatron-LM 2021 (hardware TFLOP/s, full recomputation)";
  r.claim = claim;
  r.source = source;
  r.profile = "a100-80g";
  r.preset = "";
  r.shape = Gpt(heads, hidden, layers);
  r.arch = kGptArchitecture;
  r.sw = Megatron2021();
  r.gpus = gpus;
  r.seq_len = 2048;
  r.batch_seqs = batch;
  r.fix = fix;
  r.metric = Metric::kHardwareTflops;
  r.published = tflops;
  // The SC21 scripts (NVIDIA/Megatron-LM examples/sc21/run_table_1.sh) run DDP=torch without
  // pipelining, which all-reduces gradient buckets during backward, and DDP=local with it.
  r.sw.dp_overlap = pp == 1;
  (void)tp;
  return r;
}

PublishedRun Row(const char* group, const char* claim, const char* source, const char* profile,
                 const char* preset, ModelSpec shape, Software sw, int64_t gpus, int64_t seq,
                 int64_t batch, const char* fix, Metric metric, double published) {
  PublishedRun r;
  r.group = group;
  r.claim = claim;
  r.source = source;
  r.profile = profile;
  r.preset = preset;
  r.shape = shape;
  r.sw = sw;
  r.gpus = gpus;
  r.seq_len = seq;
  r.batch_seqs = batch;
  r.fix = fix;
  r.metric = metric;
  r.published = published;
  return r;
}

std::vector<PublishedRun> Build() {
  std::vector<PublishedRun> v;
  // Megatron-LM 2021, Table 1: tensor and pipeline degrees, micro-batch size and virtual stages
  // (--num-layers-per-virtual-pipeline-stage; none is v=1) as NVIDIA/Megatron-LM's
  // examples/sc21/run_table_1.sh runs them, the rest data parallel (DDP), full activation
  // recomputation (the paper's FLOP formula assumes it).
  const char* t1 = kMegatron;
  v.push_back(MegatronRow(24, 2304, 24, 1, 1, 32, 512, 137, "GPT 1.7B, 32 A100, TP1 PP1",
                          "tp=1,pp=1,cp=1,dp_shard=1,mbs=16,ac=full", t1));
  v.push_back(MegatronRow(32, 3072, 30, 2, 1, 64, 512, 138, "GPT 3.6B, 64 A100, TP2 PP1",
                          "tp=2,pp=1,cp=1,dp_shard=1,mbs=16,ac=full", t1));
  v.push_back(MegatronRow(32, 4096, 36, 4, 1, 128, 512, 142, "GPT 7.5B, 128 A100, TP4 PP1",
                          "tp=4,pp=1,cp=1,dp_shard=1,mbs=16,ac=full", t1));
  v.push_back(MegatronRow(48, 6144, 40, 8, 1, 256, 1024, 135, "GPT 18.4B, 256 A100, TP8 PP1",
                          "tp=8,pp=1,cp=1,dp_shard=1,mbs=8,ac=full", t1));
  v.push_back(MegatronRow(64, 8192, 48, 8, 2, 512, 1536, 138, "GPT 39.1B, 512 A100, TP8 PP2",
                          "tp=8,pp=2,v=1,cp=1,dp_shard=1,mbs=4,ac=full,first=0,last=0", t1));
  v.push_back(MegatronRow(80, 10240, 60, 8, 4, 1024, 1792, 140, "GPT 76.1B, 1024 A100, TP8 PP4",
                          "tp=8,pp=4,v=3,cp=1,dp_shard=1,mbs=2,ac=full,first=0,last=0", t1));
  v.push_back(MegatronRow(96, 12288, 80, 8, 8, 1536, 2304, 148, "GPT 145.6B, 1536 A100, TP8 PP8",
                          "tp=8,pp=8,v=2,cp=1,dp_shard=1,mbs=2,ac=full,first=0,last=0", t1));
  v.push_back(MegatronRow(128, 16384, 96, 8, 16, 1920, 2160, 155, "GPT 310.1B, 1920 A100, TP8 PP16",
                          "tp=8,pp=16,v=2,cp=1,dp_shard=1,mbs=1,ac=full,first=0,last=0", t1));
  v.push_back(MegatronRow(128, 20480, 105, 8, 35, 2520, 2520, 163,
                          "GPT 529.6B, 2520 A100, TP8 PP35",
                          "tp=8,pp=35,v=3,cp=1,dp_shard=1,mbs=1,ac=full,first=0,last=0", t1));
  v.push_back(MegatronRow(160, 25600, 128, 8, 64, 3072, 3072, 163, "GPT 1008B, 3072 A100, TP8 PP64",
                          "tp=8,pp=64,v=1,cp=1,dp_shard=1,mbs=1,ac=full,first=0,last=0", t1));
  // Table 2: GPT-3 175B (model parallel 96 = TP8 x PP12) and 530B (280 = TP8 x PP35), micro-batch
  // 1, batch fixed while the GPUs grow.
  const char* t2 = kMegatronT2;
  const char* fix175 = "tp=8,pp=12,cp=1,dp_shard=1,mbs=1,ac=full,first=0,last=0";
  const char* fix530 = "tp=8,pp=35,cp=1,dp_shard=1,mbs=1,ac=full,first=0,last=0";
  v.push_back(
      MegatronRow(96, 12288, 96, 8, 12, 384, 1536, 153, "GPT-3 174.6B, 384 A100", fix175, t2));
  v.push_back(
      MegatronRow(96, 12288, 96, 8, 12, 768, 1536, 149, "GPT-3 174.6B, 768 A100", fix175, t2));
  v.push_back(
      MegatronRow(96, 12288, 96, 8, 12, 1536, 1536, 141, "GPT-3 174.6B, 1536 A100", fix175, t2));
  v.push_back(
      MegatronRow(128, 20480, 105, 8, 35, 560, 2240, 171, "GPT 529.6B, 560 A100", fix530, t2));
  v.push_back(
      MegatronRow(128, 20480, 105, 8, 35, 1120, 2240, 167, "GPT 529.6B, 1120 A100", fix530, t2));
  v.push_back(
      MegatronRow(128, 20480, 105, 8, 35, 2240, 2240, 159, "GPT 529.6B, 2240 A100", fix530, t2));

  // torchtitan on 64 A100 (FSDP, bf16, local batch 1 or 2): the cluster's network is not
  // published; the a100-80g profile's 200 Gb/s per GPU is assumed.
  const char* ta = "A100, torchtitan 2024 (tokens/s per GPU, FSDP)";
  const ModelSpec none;
  const ModelSpec l2_13b = Llama2(5120, 40, 40, 40, 13824);
  const ModelSpec l2_70b = Llama2(8192, 80, 64, 8, 28672);
  v.push_back(Row(ta, "Llama 3 8B, local batch 1, selective layer AC", kTitanA100, "a100-80g",
                  "llama3-8b", none, Torchtitan(false), 64, 8192, 64,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=1,ac=alternate,reshard=yes",
                  Metric::kTokensPerGpu, 2904));
  v.push_back(Row(ta, "Llama 3 8B, local batch 1, selective op AC", kTitanA100, "a100-80g",
                  "llama3-8b", none, Torchtitan(false), 64, 8192, 64,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=1,ac=op,reshard=yes", Metric::kTokensPerGpu,
                  2973));
  v.push_back(Row(ta, "Llama 3 70B, local batch 1, full AC", kTitanA100, "a100-80g", "llama3-70b",
                  none, Torchtitan(false), 64, 8192, 64,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=1,ac=full,reshard=yes", Metric::kTokensPerGpu,
                  331));
  v.push_back(Row(ta, "Llama 2 13B, local batch 2, no AC", kTitanA100, "a100-80g", "", l2_13b,
                  Torchtitan(false), 64, 4096, 128,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=2,ac=none,reshard=yes", Metric::kTokensPerGpu,
                  2162));
  v.push_back(Row(ta, "Llama 2 13B, local batch 2, selective layer AC", kTitanA100, "a100-80g", "",
                  l2_13b, Torchtitan(false), 64, 4096, 128,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=2,ac=alternate,reshard=yes",
                  Metric::kTokensPerGpu, 1914));
  v.push_back(Row(ta, "Llama 2 13B, local batch 2, selective op AC", kTitanA100, "a100-80g", "",
                  l2_13b, Torchtitan(false), 64, 4096, 128,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=2,ac=op,reshard=yes", Metric::kTokensPerGpu,
                  1904));
  v.push_back(Row(ta, "Llama 2 70B, local batch 1, selective op AC", kTitanA100, "a100-80g", "",
                  l2_70b, Torchtitan(false), 64, 4096, 64,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=1,ac=op,reshard=yes", Metric::kTokensPerGpu,
                  355));
  v.push_back(Row(ta, "Llama 2 70B, local batch 2, full AC", kTitanA100, "a100-80g", "", l2_70b,
                  Torchtitan(false), 64, 4096, 128,
                  "tp=1,pp=1,cp=1,dp_shard=64,mbs=2,ac=full,reshard=yes", Metric::kTokensPerGpu,
                  353));

  // Llama 3 405B (Meta): TP8 PP16, data parallel as FSDP, BF16, 16M-token batches; the rest (micro-
  // batch, virtual stages, pipeline split, resharding, recomputation) is the planner's.
  const char* l3 = "H100, Meta Llama 3 (model TFLOP/s per GPU)";
  v.push_back(Row(l3, "Llama 3 405B, 8,192 H100, TP8 PP16 DP64, 8K sequences", kLlama3, "h100-sxm",
                  "llama3-405b", none, Meta(), 8192, 8192, 2048,
                  "tp=8,cp=1,pp=16,dp=64,dp_shard=64,fp8=no", Metric::kModelTflops, 430));
  v.push_back(Row(l3, "Llama 3 405B, 16,384 H100, TP8 PP16 DP128", kLlama3, "h100-sxm",
                  "llama3-405b", none, Meta(), 16384, 8192, 2048,
                  "tp=8,cp=1,pp=16,dp=128,dp_shard=128,fp8=no", Metric::kModelTflops, 400));
  v.push_back(Row(l3, "Llama 3 405B, 16,384 H100, TP8 CP16 PP16 DP8, 131,072-token sequences",
                  kLlama3, "h100-sxm", "llama3-405b", none, Meta(), 16384, 131072, 128,
                  "tp=8,cp=16,pp=16,dp=8,dp_shard=8,fp8=no", Metric::kModelTflops, 380));

  // torchtitan on H100 (HBM2e, 500 W: the h100-hbm2e-500w profile). "Selective" AC is
  // torchtitan's default per-op policy. Pipelines split the local batch into as many micro-batches
  // as there are pipeline stages (torchtitan's documented default for
  // pipeline_parallel_microbatches): 8 for 1F1B on PP 8, 16 for interleaving with 2 stages a rank.
  // With pipelines torchtitan keeps FSDP's parameters gathered after forward ("for PP, do not
  // reshard after forward to avoid per-microbatch all-gathers", apply_fsdp in
  // parallelize_llama.py) and the pipeline schedule defers gradient sync to the last backward:
  // one gather and one reduce-scatter a step, the planner's reshard=no. FSDP shards over
  // dp_shard x cp (Layout::shard).
  const char* th = "H100, torchtitan Dec 2024 (tokens/s per GPU)";
  const char* h = "h100-hbm2e-500w";
  const Metric tps = Metric::kTokensPerGpu;
  const char* f8 = "tp=1,pp=1,cp=1,dp_shard=8,mbs=2,ac=op,reshard=yes,fp8=no";
  const char* f8x = "tp=1,pp=1,cp=1,dp_shard=8,mbs=2,ac=op,reshard=yes,fp8=yes";
  const char* f128 = "tp=1,pp=1,cp=1,dp_shard=128,mbs=2,ac=op,reshard=yes,fp8=no";
  const char* f128x = "tp=1,pp=1,cp=1,dp_shard=128,mbs=2,ac=op,reshard=yes,fp8=yes";
  v.push_back(Row(th, "Llama 3.1 8B, 8 GPUs, FSDP, local batch 2 (Table 1)", kTitanH100, h,
                  "llama3-8b", none, Torchtitan(false), 8, 8192, 16, f8, tps, 5762));
  v.push_back(Row(th, "... + torch.compile (Table 1)", kTitanH100, h, "llama3-8b", none,
                  Torchtitan(true), 8, 8192, 16, f8, tps, 6667));
  v.push_back(Row(th, "... + torch.compile + Float8 (Table 1)", kTitanH100, h, "llama3-8b", none,
                  Torchtitan(true), 8, 8192, 16, f8x, tps, 8532));
  v.push_back(Row(th, "Llama 3.1 8B, 128 GPUs, FSDP, local batch 2 (Table 3)", kTitanH100, h,
                  "llama3-8b", none, Torchtitan(false), 128, 8192, 256, f128, tps, 5605));
  v.push_back(Row(th, "... + torch.compile (Table 3)", kTitanH100, h, "llama3-8b", none,
                  Torchtitan(true), 128, 8192, 256, f128, tps, 6514));
  v.push_back(Row(th, "... + torch.compile + Float8 (Table 3)", kTitanH100, h, "llama3-8b", none,
                  Torchtitan(true), 128, 8192, 256, f128x, tps, 8380));
  const char* f70 = "tp=8,pp=1,cp=1,dp_shard=32,mbs=16,ac=full,reshard=yes,fp8=yes";
  v.push_back(Row(th,
                  "Llama 3.1 70B, 256 GPUs, FSDP 32 x TP 8, compile, Float8, full AC, local batch "
                  "16 (Table 4)",
                  kTitanH100, h, "llama3-70b", none, Torchtitan(true), 256, 8192, 512, f70, tps,
                  829));
  v.push_back(Row(th, "... + AsyncTP (Table 4)", kTitanH100, h, "llama3-70b", none,
                  TorchtitanAsyncTp(), 256, 8192, 512, f70, tps, 876));
  v.push_back(Row(th,
                  "Llama 3.1 405B, 512 GPUs, FSDP 8 x TP 8 x PP 8, compile, Float8, AsyncTP, full "
                  "AC, 1F1B (Table 5)",
                  kTitanH100, h, "llama3-405b", none, TorchtitanAsyncTp(), 512, 8192, 256,
                  "tp=8,pp=8,cp=1,dp_shard=8,v=1,mbs=4,ac=full,reshard=no,fp8=yes", tps, 100));
  v.push_back(Row(th, "... interleaved 1F1B (Table 5)", kTitanH100, h, "llama3-405b", none,
                  TorchtitanAsyncTp(), 512, 8192, 256,
                  "tp=8,pp=8,cp=1,dp_shard=8,v=2,mbs=2,ac=full,reshard=no,fp8=yes", tps, 128));
  // Context parallelism (Tables 2 and 6): local batch 1 (8B) or 8 (405B), full AC, compile, Float8.
  struct CpRow {
    int64_t shard, cp, seq;
    double tps;
  };
  for (const CpRow& r : {CpRow{8, 1, 32768, 3890}, CpRow{4, 2, 65536, 2540},
                         CpRow{2, 4, 131072, 1071}, CpRow{1, 8, 262144, 548}}) {
    PublishedRun x = Row(th, "", kTitanH100, h, "llama3-8b", none, Torchtitan(true), 8, r.seq,
                         r.shard, "", tps, r.tps);
    x.owned_claim = "Llama 3.1 8B, 8 GPUs, FSDP " + std::to_string(r.shard) + " x CP " +
                    std::to_string(r.cp) + ", " + std::to_string(r.seq) +
                    "-token sequences, compile, Float8, full AC (Table 2)";
    x.owned_fix = "tp=1,pp=1,dp_shard=" + std::to_string(r.shard) + ",cp=" + std::to_string(r.cp) +
                  ",mbs=1,ac=full,reshard=yes,fp8=yes";
    v.push_back(std::move(x));
  }
  for (const CpRow& r : {CpRow{8, 1, 32768, 76}, CpRow{4, 2, 65536, 47}, CpRow{2, 4, 131072, 31},
                         CpRow{1, 8, 262144, 16}}) {
    PublishedRun x = Row(th, "", kTitanH100, h, "llama3-405b", none, TorchtitanAsyncTp(), 512,
                         r.seq, r.shard * 8, "", tps, r.tps);
    x.owned_claim = "Llama 3.1 405B, 512 GPUs, TP 8 x PP 8 x FSDP " + std::to_string(r.shard) +
                    " x CP " + std::to_string(r.cp) + ", " + std::to_string(r.seq) +
                    "-token sequences, local batch 8, 1F1B (Table 6)";
    x.owned_fix = "tp=8,pp=8,v=1,dp_shard=" + std::to_string(r.shard) +
                  ",cp=" + std::to_string(r.cp) + ",mbs=1,ac=full,reshard=no,fp8=yes";
    v.push_back(std::move(x));
  }
  return v;
}

}  // namespace

const std::vector<PublishedRun>& PublishedRuns() {
  static const std::vector<PublishedRun> runs = Build();
  return runs;
}

}  // namespace tenax::plan
