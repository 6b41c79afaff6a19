#!/usr/bin/env bash
# Communication volume and speed per data-parallel layout on 4 CPU ranks (Gloo, this machine):
# bytes each collective moves per step on one rank, measured by tenax's communicator, against
# the layout's analytic volume; seconds per step and tokens/s. Prints a Markdown table.
#   bench/parallel_layouts.sh [preset=debug-small] [steps=10]
# Analytic volumes per rank and step for P fp32 parameters in FSDP units (one per block plus a
# root unit; Pp: the units' sizes each padded to a multiple of the shard degree n; Pb: the padded
# blocks except the last, which stays gathered for backward): DDP all-reduce payload 4P; FSDP
# all-gather received (n-1)/n * 4 (Pp + Pb) (forward, then the re-gather in backward),
# reduce-scatter sent (n-1)/n * 4Pp; HSDP the same within a replica plus an all-reduce of the
# 4Pp/n gradient shards across replicas. Plus 8-16 B of scalars (loss, gradient norm).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-debug-small}
steps=${2:-10}
tenax=build/tenax
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P=$($tenax model --preset "$preset" --set model.vocab_size=256 --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["params"]["total"])')
common="--set data.source=synthetic --set data.synthetic.vocab_size=256 --set data.synthetic.order=1
  --set model.preset=$preset --set model.vocab_size=256 --set training.seq_len=128
  --set training.steps=$steps --set checkpoint.enable=false --set metrics.eval_interval=0
  --set metrics.progress=never --set job.dump_folder=$work"
echo "Data-parallel layouts on 4 CPU ranks, $preset ($P parameters), global batch 8 x 128 tokens, $steps steps, $(date -u +%F)"
echo
echo "| layout | all-reduce B/step | all-gather B/step | reduce-scatter B/step | analytic (AR / AG / RS) | s/step | tokens/s |"
echo "|---|---|---|---|---|---|---|"
run() {  # name, ranks, local batch, extra settings, analytic string
  local out
  if [ "$2" = 1 ]; then
    out=$($tenax train --defaults $common --set job.name=$1 --set training.local_batch_size=$3 $4 2>&1)
    local tps=$(echo "$out" | grep -o 'throughput [0-9.k]* tokens/s' | awk '{print $2}')
    echo "| $1 | - | - | - | $5 | - | $tps |"
    return
  fi
  out=$($tenax launch --nproc-per-node "$2" -- train --defaults $common --set job.name=$1 \
        --set training.local_batch_size=$3 $4 2>&1)
  local line=$(echo "$out" | grep '^\[rank 0\] communication per step')
  local ar=$(echo "$line" | sed -E 's/.*all-reduce ([0-9]+) B.*/\1/')
  local ag=$(echo "$line" | sed -E 's/.*all-gather ([0-9]+) B.*/\1/')
  local rs=$(echo "$line" | sed -E 's/.*reduce-scatter ([0-9]+) B.*/\1/')
  local sps=$(echo "$line" | sed -E 's/.* ([0-9.]+) s\/step.*/\1/')
  local tps=$(python3 -c "print(f'{8*128/$sps:.0f}')")
  echo "| $1 | $ar | $ag | $rs | $5 | $sps | $tps |"
}
spec=$($tenax model --preset "$preset" --set model.vocab_size=256 --json)
# units(n, which): padded size of every unit ("all") or of the blocks re-gathered in backward.
units() {
  echo "$spec" | python3 -c "
import json, sys
s = json.load(sys.stdin)['spec']; n, which = $1, '$2'
c, f, L, hd = s['dim'], s['ffn_hidden_dim'], s['n_layers'], s['dim'] // s['n_heads']
block = 2 * c + c * hd * (2 * s['n_heads'] + 2 * s['n_kv_heads']) + 3 * c * f
root = s['vocab_size'] * c * (1 if s['tie_embeddings'] else 2) + c
pad = lambda x: (x + n - 1) // n * n
print(pad(root) + L * pad(block) if which == 'all' else (L - 1) * pad(block))"
}
P4=$(units 4 all); B4=$(units 4 back); P2=$(units 2 all); B2=$(units 2 back)
run single 1 8 "" "- / - / -"
run ddp4 4 2 "--set parallelism.data_parallel_replicate=4" "$((4*P)) / 0 / 0"
run fsdp4 4 2 "" "16 / $((3*(P4+B4))) / $((3*P4))"
run hsdp2x2 4 2 "--set parallelism.data_parallel_replicate=2" "$((2*P2)) / $((2*(P2+B2))) / $((2*P2))"
