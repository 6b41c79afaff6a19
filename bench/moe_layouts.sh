#!/usr/bin/env bash
# Expert parallelism on 4 CPU ranks (Gloo, this machine): the bytes the all-to-alls move per step,
# measured by tenax's communicator on every rank and summed over the ranks, against the analytic
# volume computed from the routing the run logged; the share of token-expert assignments that
# left their rank against (ep - 1) / ep (balanced routing); seconds per step. Prints a Markdown
# table.
#   bench/moe_layouts.sh [preset=debug-moe] [steps=10]
# Analytic volume per step, summed over ranks (parallel/expert_parallel.h): every row (one token's
# choice of one expert) routed to an expert on another rank crosses a link in the forward dispatch
# and combine and again in their backward: 4 x R x C x 4 bytes (6 x with full recomputation,
# which repeats the forward's two), R = moe_remote_rows of metrics.jsonl summed over MoE layers,
# C = model dim, fp32 on CPU. Plus the counts exchange: each forward of each MoE layer sends
# E/ep int64 counts to each of the other ep - 1 ranks of its group, on every rank.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-debug-moe}
steps=${2:-10}
tenax=build/tenax
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
spec=$($tenax model --preset "$preset" --set model.vocab_size=256 --json)
common="--defaults --set data.source=synthetic --set data.synthetic.vocab_size=256 --set data.synthetic.order=1
  --set model.preset=$preset --set model.vocab_size=256 --set training.seq_len=128
  --set training.steps=$steps --set checkpoint.enable=false --set metrics.eval_interval=0
  --set metrics.progress=never --set job.dump_folder=$work"
echo "Expert-parallel layouts on 4 CPU ranks, $preset, global batch 8 x 128 tokens, $steps steps, $(date -u +%F)"
echo
echo "| layout | all-to-all B/step (sum of ranks) | analytic | remote rows / all rows | (ep-1)/ep | s/step |"
echo "|---|---:|---:|---:|---:|---:|"
run() {  # name, local batch, ep, forwards per step per rank (micro-batches), recompute (0/1), pp, extra
  local out
  out=$($tenax launch --nproc-per-node 4 -- train $common --set job.name=$1 \
        --set training.local_batch_size=$2 --set parallelism.expert_parallel=$3 \
        --set parallelism.pipeline_parallel=$6 $7 2>&1) || {
    echo "$out" | tail -20 >&2
    exit 1
  }
  echo "$out" | python3 -c "
import json, re, sys
spec = json.loads('''$spec''')['spec']
name, ep, forwards, recompute, pp = '$1', $3, $4, $5, $6
c, e = spec['dim'], spec['moe']['n_experts']
lines = [l for l in sys.stdin if 'communication per step on this rank' in l]
assert len(lines) == 4, lines
measured = sum(float(re.search(r'all-to-all ([0-9.]+) B', l).group(1)) for l in lines)
sps = max(float(re.search(r'([0-9.]+) s/step', l).group(1)) for l in lines)
rows = [json.loads(l) for l in open('$work/$1/metrics.jsonl') if '\"loss\"' in l]
remote = sum(sum(r['moe_remote_rows'].values()) for r in rows) / len(rows)
total = sum(sum(sum(t) for t in r['moe_expert_tokens'].values()) for r in rows) / len(rows)
moe_layers = len(rows[0]['moe_expert_tokens'])
passes = 6 if recompute else 4
# Each rank exchanges counts for the MoE layers of its pipeline stage.
counts = 4 * moe_layers // pp * forwards * (2 if recompute else 1) * (ep - 1) * (e // ep) * 8
analytic = passes * remote * c * 4 + counts
same = 'equal' if abs(measured - analytic) < 0.05 else 'DIFFERENT'
print(f'| {name} | {measured:.1f} | {analytic:.1f} ({same}) | {remote / total:.3f} | {(ep - 1) / ep:.3f} | {sps:.3f} |')
"
}
run ep2_fsdp4 2 2 1 0 1 ""
run ep4 2 4 1 0 1 ""
run ep4_full_ac 2 4 1 1 1 "--set parallelism.activation_checkpoint=full"
run ep2_accum2 1 2 2 0 1 "--set training.grad_accum_steps=2"
run ep2_pp2 4 2 1 0 2 "--set parallelism.pipeline_schedule=gpipe --set parallelism.microbatches=1"
run ep2_tp2 4 2 1 0 1 "--set parallelism.tensor_parallel=2"
