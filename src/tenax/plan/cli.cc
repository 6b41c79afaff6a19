#include "tenax/plan/cli.h"

#include <memory>

#include "tenax/plan/commands.h"

namespace tenax::plan {

std::function<Status(bool* ran)> AddCommands(CLI::App& app) {
  auto p = std::make_shared<PlanFlags>();
  auto s = std::make_shared<SimulateFlags>();

  CLI::App* plan = app.add_subcommand(
      "plan", "choose a parallel layout: predicted step time, throughput, memory, days and cost");
  plan->add_option("--model", p->model, "model preset (llama3-405b, ...) or a tenax TOML config");
  plan->add_option("--gpus", p->gpus, "number of GPUs");
  plan->add_option("--gpu", p->gpu,
                   "hardware profile: h100-sxm | h200 | a100-80g | b200 | ... | FILE.toml "
                   "(configs/hardware/)");
  plan->add_option("--seq-len", p->seq_len, "tokens per sequence (default: the config's)");
  plan->add_option("--global-batch-tokens", p->global_batch_tokens,
                   "tokens per optimizer step, e.g. 16Mi or 4M (a whole number of sequences)");
  plan->add_option("--tokens", p->tokens, "training tokens, e.g. 15T: prints days and cost");
  plan->add_option("--price-per-gpu-hour", p->price_per_gpu_hour, "dollars per GPU-hour");
  plan->add_option("--top", p->top, "how many layouts to print (default 5)");
  plan->add_flag("--json", p->json, "print JSON");
  plan->add_flag("--explain", p->explain, "show the time and memory breakdown of the best layout");
  plan->add_option("--fix", p->fix,
                   "pin parts of the layout: tp=8,pp=16,v=4,dp=64,dp_shard=64,cp=1,mbs=1,"
                   "ac=none|selective|full,fp8=yes|no,reshard=yes|no");
  plan->add_option("--kernels", p->kernels,
                   "eager (tenax, torchtitan without compile; default) | fused (torch.compile, "
                   "Megatron)");
  plan->add_option("--failure-rate", p->failure_rate,
                   "add failures to the training time: 0.0004/node-hour, 2e-5/gpu-hour, "
                   "\"419 in 54d on 16384 gpus\"");
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
                   "memory_bound, fp8_matmul, collective_nvlink, collective_network, dp_overlap");
  plan->add_option("--out", p->out, "with --calibrate: write the fitted profile here");

  CLI::App* sim = app.add_subcommand(
      "simulate", "Monte-Carlo of a training job under node failures: effective time and cost");
  sim->add_option("--gpus", s->gpus, "number of GPUs")->required();
  sim->add_option("--gpus-per-node", s->gpus_per_node, "GPUs per node (default 8)");
  sim->add_option("--failure-rate", s->failure_rate,
                  "0.0004/node-hour, 0.04%/instance-hour, 2e-5/gpu-hour, or "
                  "\"419 in 54d on 16384 gpus\"")
      ->required();
  sim->add_option("--checkpoint-cost", s->checkpoint_cost,
                  "training stall per checkpoint, e.g. 30s")
      ->required();
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
  sim->add_option("--runs", s->runs, "simulated jobs (default 1000)");
  sim->add_option("--seed", s->seed, "random seed (default 1)");
  sim->add_option("--price-per-gpu-hour", s->price_per_gpu_hour, "dollars per GPU-hour");
  sim->add_flag("--json", s->json, "print JSON");

  return [plan, sim, p, s](bool* ran) -> Status {
    *ran = plan->parsed() || sim->parsed();
    if (plan->parsed()) return RunPlan(*p);
    if (sim->parsed()) return RunSimulate(*s);
    return Status::Ok();
  };
}

}  // namespace tenax::plan
