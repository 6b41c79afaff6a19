// Typed options, one struct per component, filled from TOML once and validated there
// (config/config.cc). Components receive only their own struct, never the whole Config, so that
// adding a section never changes a component's interface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tenax/core/run_paths.h"

namespace tenax {

struct JobOptions {
  std::string name = "tenax";
  std::string dump_folder = "runs";  // the run folder is dump_folder/name
  uint64_t seed = 0;
  std::string description;
};

// Model shape: a preset plus optional per-field overrides (e.g. llama3-8b with n_layers = 8).
struct ModelOptions {
  std::string preset = "debug-small";
  std::optional<int64_t> dim;
  std::optional<int64_t> n_layers;
  std::optional<int64_t> n_heads;
  std::optional<int64_t> n_kv_heads;
  std::optional<int64_t> ffn_hidden_dim;
  std::optional<int64_t> vocab_size;  // 0 or unset on debug presets: take it from the data
  std::optional<double> norm_eps;
  std::optional<double> rope_theta;
  std::optional<bool> rope_scaling;  // Llama 3.1 frequency scaling
  std::optional<bool> tie_embeddings;
  std::optional<int64_t> max_seq_len;
  double init_std = 0.02;
  // Mixture of experts (model/moe.h; all unset on dense presets). n_experts > 0 puts an MoE block
  // in place of the dense SwiGLU on the layers moe_layer_start, moe_layer_start +
  // moe_layer_interval, ...
  std::optional<int64_t> n_experts;            // routed experts per MoE layer
  std::optional<int64_t> n_experts_per_token;  // top-k
  std::optional<int64_t> n_shared_experts;     // always applied to every token
  std::optional<int64_t> moe_ffn_hidden_dim;   // each expert's SwiGLU width
  std::optional<std::string> moe_router;       // softmax (Mixtral) | sigmoid (DeepSeek-V3)
  std::optional<double> moe_aux_loss_coef;     // load-balancing loss weight; 0 = off
  // sigmoid router: step size of the per-expert selection bias (DeepSeek-V3's auxiliary-loss-free
  // balancing); 0 = no bias
  std::optional<double> moe_bias_update_rate;
  std::optional<int64_t> moe_layer_start;     // first MoE layer
  std::optional<int64_t> moe_layer_interval;  // every k-th layer from moe_layer_start
};

struct SyntheticOptions {
  int64_t vocab_size = 64;
  int64_t order = 2;  // tokens of context the next token depends on
  int64_t train_tokens = 2000000;
  int64_t val_tokens = 100000;
  uint64_t seed = 1234;
  // Each context puts its probability mass on a few next tokens: lower means lower entropy.
  double concentration = 0.3;
};

struct DataOptions {
  std::string source = "brown";  // brown | synthetic | shards | tokens
  // shards: a folder written by `tenax prepare`; tokens: the training token file(s), a path or a
  // glob (tenax shard, llm.c or nanoGPT .bin; data/token_file.h)
  std::string path;
  std::string val_path;               // tokens: the validation token file(s), a path or a glob
  std::string token_format = "auto";  // tokens: auto | tenax | llmc | nanogpt
  int64_t vocab_size = 0;             // tokens: 0 = from the files; required for nanogpt
  // brown: byte | tiktoken:FILE | hf:FILE | sentencepiece:MODEL_FILE
  std::string tokenizer = "byte";
  std::string brown_dir;  // empty: search the usual places (see data/brown.h)
  std::string cache_dir = "data/cache";
  SyntheticOptions synthetic;
};

struct OptimizerOptions {
  std::string name = "adamw";
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; applied to matrices only (see train/adamw.h)
};

struct LrSchedulerOptions {
  std::string name = "cosine";  // cosine | wsd | constant
  int64_t warmup_steps = 10;
  double min_lr_ratio = 0.1;          // final lr as a fraction of optimizer.lr
  double decay_ratio = 0.2;           // wsd: fraction of steps spent decaying
  std::string decay_type = "linear";  // wsd: linear | sqrt | cosine
};

struct TrainingOptions {
  int64_t steps = 100;
  int64_t local_batch_size = 8;  // sequences per micro-batch
  int64_t seq_len = 256;
  int64_t grad_accum_steps = 1;  // micro-batches per optimizer step
  // Sequences per optimizer step over all data-parallel ranks. 0: local_batch_size x
  // grad_accum_steps x data-parallel ranks. Set: grad_accum_steps is derived from it (and must be
  // left at 1), so a run resumed on another number of ranks keeps its batch (config/batch.h).
  int64_t global_batch_size = 0;
  double max_norm = 1.0;                 // global gradient-norm clip; 0 disables
  std::string mixed_precision = "auto";  // auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32
  std::string device = "auto";           // auto | cpu | cuda
  int64_t threads = 0;                   // CPU intra-op threads; 0 = chosen from the machine
  // GPU: tenax's fused paths (so far the loss head's fp32-output GEMMs in larger chunks:
  // model/fused_cross_entropy.h; PyTorch's fused AdamW kernel: train/adamw.h); false runs the
  // plain libtorch composition, for A/B.
  bool fused_kernels = true;
  // Stop (after checkpointing) once this step is done; the schedule still spans `steps`. For
  // time-boxed jobs: the next run with resume = "latest" continues the same trajectory. 0 = off.
  int64_t stop_at = 0;
  // A NaN/Inf loss or gradient norm: "stop" (exit code 7: lower the learning rate) or "restart"
  // (exit code 8, so `tenax launch --max-restarts` resumes from the last good checkpoint; for
  // transient faults such as a flipped bit, the rerun is bitwise the uninterrupted trajectory).
  std::string on_nonfinite = "stop";
  // Loss spikes: a step whose loss (mean over ranks) exceeds loss_spike_factor x the median loss
  // of the previous loss_spike_window steps. 0 = off. Detection starts once 8 previous steps (or
  // the whole window, when smaller) are known; a restarted process starts its window afresh.
  double loss_spike_factor = 0;
  int64_t loss_spike_window = 20;
  // What a spike does: "warn" (log it, apply the update), "skip" (log it, drop the step's update:
  // the batch is consumed, the weights and the optimizer state stay as they were), "restart"
  // (exit code 8 so that `tenax launch` rolls back to the newest checkpoint and retries; a spike
  // that comes back at the same step after the rollback is caused by the data, not a transient
  // fault, and that step's update is then skipped), "stop" (exit code 7). Every spike is
  // recorded in <run folder>/loss_spikes.json and in goodput.json.
  std::string on_loss_spike = "skip";
};

// How the world of ranks is laid out (torchtitan's names). The product of the degrees must equal
// the world size; -1 for data_parallel_shard means "whatever is left". TP is innermost in the mesh
// (neighbouring ranks, the fastest links), then PP, then the data-parallel axes.
struct ParallelismOptions {
  int64_t data_parallel_replicate = 1;  // replicas (DDP; HSDP together with sharding)
  int64_t data_parallel_shard = -1;     // FSDP / ZeRO-3 shards
  int64_t tensor_parallel = 1;
  int64_t pipeline_parallel = 1;
  // Every sequence split over this many ranks (ring attention, parallel/context_parallel.h):
  // rank r holds chunks r and 2N-1-r of 2N, so causal work is balanced.
  int64_t context_parallel = 1;
  // Experts of MoE layers split over this many ranks, borrowed from data_parallel_shard (each
  // group of expert_parallel consecutive shard ranks holds every expert once; expert weights are
  // FSDP-sharded over the remaining data_parallel_shard / expert_parallel ranks).
  int64_t expert_parallel = 1;
  std::string pipeline_schedule = "1f1b";  // gpipe | 1f1b | interleaved_1f1b
  int64_t virtual_stages = 1;
  int64_t microbatches = 1;
  std::string activation_checkpoint = "none";  // none | selective | full
  // c10d's backend: auto (NCCL on GPU ranks, Gloo on CPU ranks) | nccl | gloo.
  std::string backend = "auto";
  // The dtype FSDP gathers parameters in: auto (bf16 when training in bf16 on GPUs) | fp32 | bf16.
  // Gradients are reduced in fp32 either way.
  std::string fsdp_param_dtype = "auto";
  // A collective still pending after this many seconds dumps the flight record and ends the
  // rank with exit code 9 (restartable; docs/flight_recorder.md). 0: never.
  double collective_timeout_s = 600;
};

// data_parallel_shard in a world of `world` ranks: -1 resolved to the ranks the other degrees
// leave, or 0 when they do not divide the world (parallel::Mesh::Create says why).
inline int64_t ResolvedDataParallelShard(const ParallelismOptions& p, int64_t world) {
  if (p.data_parallel_shard != -1) return p.data_parallel_shard;
  const int64_t others =
      p.data_parallel_replicate * p.tensor_parallel * p.pipeline_parallel * p.context_parallel;
  return others > 0 && world % others == 0 ? world / others : 0;
}

struct CheckpointOptions {
  bool enable = true;
  std::string folder =
      RunPaths::kDefaultCheckpointFolder;  // relative to the run folder unless absolute
  int64_t interval = 100;                  // steps; the final step is always saved
  // interval = "auto": Young/Daly optimum from the measured checkpoint cost and the failure rate
  // (train/checkpoint_interval.h); `interval` is then only the interval until the first save
  // has been measured.
  bool interval_auto = false;
  // Prior failure rate of the whole job (failures per hour) for interval = "auto"; updated with
  // the failures observed in the run (restarts by the launcher).
  double failure_rate_per_hour = 0.05;
  // Write checkpoints in the background: training blocks only while state is copied to host
  // memory (checkpoint/async_writer.h).
  bool async = false;
  // Distributed: each rank also keeps its newest checkpoint files, and its peer's, in tmpfs (the
  // launcher's RAM folder, else /dev/shm/tenax-<job.name>-<CRC-32 of the checkpoint folder>), so
  // damaged or missing files of one rank are restored without storage
  // (checkpoint/memory_replica.h).
  bool memory_replicas = false;
  int64_t keep_latest = 3;        // 0 keeps all
  std::string resume = "latest";  // latest | none | PATH to a step folder
};

struct MetricsOptions {
  int64_t log_interval = 1;
  int64_t eval_interval = 50;   // 0 disables periodic validation
  int64_t eval_tokens = 65536;  // validation tokens per evaluation
  bool tensorboard = true;
  std::string progress = "auto";  // auto (live line on a TTY) | always | never
  // Steps profile_step .. profile_step + profile_steps - 1 run under libtorch's profiler (0:
  // never): a Chrome trace and a table of where the time went per rank, in the run folder's
  // profile/ (train/profiler.h).
  int64_t profile_step = 0;
  int64_t profile_steps = 2;
};

// [resilience]: how the job lives through a failure (docs/resilience.md).
struct ResilienceOptions {
  // restart: every rank restarts from the newest checkpoint (tenax launch's generations).
  // live: a failed data-parallel replica leaves the step's group, the others go on with its
  // samples, and a replacement heals from a live replica (parallel/live_group.h; DDP on CPU
  // ranks under tenax launch, one node, so far).
  std::string mode = "restart";
  // Every N steps (0: never), each data-parallel rank replays another's step and the digests are
  // compared bit for bit, to find a rank that computes wrong results (train/sdc_check.h).
  int64_t sdc_check_interval = 0;
  // 0: the checks compare bit for bit (CPU ranks). > 0: they compare the loss, the gradients'
  // norm and a random projection of them within this fraction (where bitwise equality cannot
  // hold: GPU kernels that are not deterministic); a corruption smaller than it goes unseen.
  double sdc_tolerance = 0;
};

struct Config {
  JobOptions job;
  ModelOptions model;
  DataOptions data;
  OptimizerOptions optimizer;
  LrSchedulerOptions lr_scheduler;
  TrainingOptions training;
  ParallelismOptions parallelism;
  CheckpointOptions checkpoint;
  MetricsOptions metrics;
  ResilienceOptions resilience;
};

}  // namespace tenax
