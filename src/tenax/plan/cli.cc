#include "tenax/plan/cli.h"

#include <memory>

#include "tenax/plan/commands.h"

namespace tenax::plan {

void AddCommands(CLI::App& app, cli::Commands& commands) {
  auto p = std::make_shared<PlanFlags>();
  auto s = std::make_shared<SimulateFlags>();

  CLI::App* plan = app.add_subcommand(
      "plan", "choose a parallel layout: predicted step time, throughput, memory, days and cost");
  plan->add_option("--model", p->model,
                   "model preset (llama3-405b, ...) or a tenax TOML config; the shape flags below "
                   "override it or replace it");
  plan->add_option("--gpus", p->gpus, "number of GPUs");
  plan->add_option("--gpu", p->gpu,
                   "hardware profile: h100-sxm | h200 | a100-80g | b200 | ... | FILE.toml "
                   "(configs/hardware/)");
  plan->add_option("--seq-len", p->seq_len, "tokens per sequence (default: the config's)");
  plan->add_option("--global-batch-tokens", p->global_batch_tokens,
                   "tokens per optimizer step, e.g. 16Mi or 4M (a whole number of sequences; "
                   "default with a config: its batch on --gpus)");
  plan->add_option("--tokens", p->tokens, "training tokens, e.g. 15T: prints days and cost");
  plan->add_option("--price-per-gpu-hour", p->price_per_gpu_hour, "dollars per GPU-hour");
  plan->add_option("--top", p->top, "how many layouts to print (default 5)");
  plan->add_flag("--json", p->json, "print JSON");
  plan->add_flag("--explain", p->explain, "show the time and memory breakdown of the best layout");
  plan->add_flag("--all", p->all,
                 "rank every layout, also those tenax train cannot run yet (context "
                 "parallelism, fp8, ZeRO-1/2, ...); by default they are listed apart");
  plan->add_option("--fix", p->fix,
                   "pin parts of the layout: tp=8,pp=16,v=4,dp=64,dp_shard=64,cp=1,mbs=1,"
                   "ac=none|selective|op|alternate|full,fp8=yes|no,reshard=yes|no,first=N,last=N");
  plan->add_option("--layers", p->layers, "model shape: transformer layers");
  plan->add_option("--hidden", p->hidden, "model shape: model (hidden) dimension");
  plan->add_option("--heads", p->heads, "model shape: attention heads");
  plan->add_option("--kv-heads", p->kv_heads, "model shape: key/value heads (default --heads)");
  plan->add_option("--ffn", p->ffn, "model shape: feed-forward width");
  plan->add_option("--vocab", p->vocab, "model shape: vocabulary size");
  plan->add_option("--arch", p->arch,
                   "llama (SwiGLU, RMSNorm, rotary; default) | gpt (GELU, LayerNorm, biases, "
                   "learned positions, output tied to the embedding)");
  plan->add_option("--mlp", p->mlp, "swiglu | gelu");
  plan->add_option("--norm", p->norm, "rmsnorm | layernorm");
  plan->add_option("--biases", p->biases, "yes | no: biases on the linear layers");
  plan->add_option("--learned-positions", p->learned_positions,
                   "yes | no: a learned position table instead of rotary embeddings");
  plan->add_option("--tie-embeddings", p->tie_embeddings,
                   "yes | no: the output projection shares the embedding's weights");
  plan->add_option("--kernels", p->kernels,
                   "eager (tenax, torchtitan without compile; default) | fused (torch.compile, "
                   "Megatron / Transformer Engine)");
  plan->add_option("--attention", p->attention,
                   "flash2 (default; PyTorch SDPA) | flash3 (FlashAttention-3 / cuDNN, Hopper) | "
                   "materialized (scores in memory: baddbmm + softmax + dropout)");
  plan->add_option("--dropout", p->dropout, "dropout probability (default 0)");
  plan->add_option("--sequence-parallel", p->sequence_parallel,
                   "yes (default) | no: shard norms and dropout over tensor-parallel ranks");
  plan->add_option("--tp-overlap", p->tp_overlap,
                   "none (default) | backward (Megatron's async input-gradient all-reduce) | full "
                   "(userbuffers) | async-tp (torchtitan's AsyncTP)");
  plan->add_option("--cp-attention", p->cp_attention,
                   "all-gather (default; Llama 3's) | ring (PyTorch's ring attention, torchtitan)");
  plan->add_option("--complex-rotary", p->complex_rotary,
                   "no (default) | yes: rotary as complex multiplication (torchtitan's), which "
                   "torch.compile leaves unfused");
  plan->add_option("--dp-overlap", p->dp_overlap,
                   "yes (default) | no: overlap gradient reduction and gathers with compute");
  plan->add_option("--pp-overlap", p->pp_overlap,
                   "no (default) | yes: overlap steady-state pipeline sends with compute");
  plan->add_option("--failure-rate", p->failure_rate,
                   "add failures to the training time: 0.0004/node-hour, 2e-5/gpu-hour, "
                   "\"419 in 54d on 16384 gpus\"");
  plan->add_option("--checkpoint-bandwidth", p->checkpoint_bandwidth,
                   "with --failure-rate: the checkpoint cost from the model's size (12 B per "
                   "parameter, every expert of an MoE model) at this many bytes/s, e.g. 10G");
  plan->add_option("--checkpoint-cost", p->checkpoint_cost,
                   "training stall per checkpoint, with --failure-rate (default 30s)");
  plan->add_option("--restart-cost", p->restart_cost,
                   "failure to training again, with --failure-rate (default 10m)");
  plan->add_flag("--validate", p->validate,
                 "compare predictions with published numbers (docs/planner.md's table)");
  plan->add_option("--calibrate", p->calibrate,
                   "fit --gpu's efficiencies to measurements: a tenax run folder or a JSON-lines "
                   "file (repeatable)");
  plan->add_option("--fit", p->fit,
                   "efficiencies to fit, comma-separated (default matmul): matmul, attention, "
                   "memory_bound, fp8_matmul, collective_nvlink, allreduce_nvlink, "
                   "collective_network, comm_interference");
  plan->add_option("--out", p->out, "with --calibrate: write the fitted profile here");
  plan->add_option("--sdc-check-interval", p->sdc_check_interval,
                   "steps between silent-data-corruption checks (resilience.sdc_check_interval): "
                   "their replays are counted in the training time (default 0: none)");
  plan->add_option("--from-run", p->from_run,
                   "a finished run folder of tenax launch: its measured step, checkpoint, "
                   "detection and restart costs against the failure model's prediction, and a "
                   "re-plan of the checkpoint interval (--failure-rate: at another rate)");

  CLI::App* sim = app.add_subcommand(
      "simulate", "Monte-Carlo of a training job under node failures: effective time and cost");
  sim->add_option("--gpus", s->gpus, "number of GPUs")->required();
  sim->add_option("--gpus-per-node", s->gpus_per_node, "GPUs per node (default 8)");
  sim->add_option("--failure-rate", s->failure_rate,
                  "0.0004/node-hour, 0.04%/instance-hour, 2e-5/gpu-hour, or "
                  "\"419 in 54d on 16384 gpus\"")
      ->required();
  sim->add_option("--checkpoint-cost", s->checkpoint_cost,
                  "training stall per checkpoint, e.g. 30s (or --model with "
                  "--checkpoint-bandwidth)");
  sim->add_option("--model", s->model,
                  "preset or TOML config: with --checkpoint-bandwidth, the checkpoint cost is its "
                  "size (12 B per parameter, every expert of an MoE model) / bandwidth");
  sim->add_option("--checkpoint-bandwidth", s->checkpoint_bandwidth,
                  "bytes per second the checkpoint is written at, e.g. 10G or 10GB/s");
  sim->add_option("--restart-cost", s->restart_cost,
                  "detection + relaunch + loading once a node is ready, e.g. 10m")
      ->required();
  sim->add_option("--detect-time", s->detect_time,
                  "from a failure until the job notices it (default 0s: part of --restart-cost)");
  sim->add_option("--spares", s->spares, "spare nodes (default 0: wait for repairs)");
  sim->add_option("--swap-time", s->swap_time, "bringing in a spare node (default 2m)");
  sim->add_option("--repair-time", s->repair_time, "until a failed node is back (default 8h)");
  sim->add_option("--interval", s->interval,
                  "computation between checkpoints: auto (= daly) | young | DURATION");
  sim->add_option("--duration", s->duration, "failure-free training time, e.g. 54d")->required();
  sim->add_option("--replica-groups", s->replica_groups,
                  "live recovery: the nodes form this many data-parallel replica groups; a "
                  "failure takes one group out while the others go on, until its replacement "
                  "healed from a live peer (default 0: restart recovery only; the restart "
                  "prediction is printed beside)");
  sim->add_option("--heal-time", s->heal_time,
                  "live recovery: a replacement node's copy of the state from a live peer and "
                  "its joining, e.g. 2m (default 2m)");
  sim->add_option("--short-handed-share", s->short_handed_share,
                  "live recovery: the throughput with one group out, as a share of the full "
                  "quorum's, e.g. 0.9 (default 0: the groups' share, (R-1)/R, as when compute "
                  "bound; tenax plan --from-run prints a run's own)");
  sim->add_option("--sdc-overhead", s->sdc_overhead,
                  "silent-data-corruption checks' cost as a share of the computation, e.g. 7.5% "
                  "(what tenax train prints at start, or tenax plan --sdc-check-interval)");
  sim->add_option("--runs", s->runs, "simulated jobs (default 1000)");
  sim->add_option("--seed", s->seed, "random seed (default 1)");
  sim->add_option("--price-per-gpu-hour", s->price_per_gpu_hour, "dollars per GPU-hour");
  sim->add_flag("--json", s->json, "print JSON");

  commands.Add(plan, cli::FromStatus([p] { return RunPlan(*p); }));
  commands.Add(sim, cli::FromStatus([s] { return RunSimulate(*s); }));
}

}  // namespace tenax::plan
