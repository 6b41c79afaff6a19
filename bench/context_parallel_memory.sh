#!/usr/bin/env bash
# Peak memory per rank with context parallelism (issue 36): debug-small, batch B (4), no
# activation recomputation, 2 steps, at sequence length L on one rank (the "one-rank limit": the
# longest sequence one rank holds in that much memory), and at 4L and 8L both on one rank and
# with context_parallel 4 and 8. Each CP rank prints its peak RSS ("peak memory of this rank";
# the table shows the largest), a single process reports its own in metrics.jsonl. A run at 64
# tokens gives the process's floor (libtorch's mapped code and the model, ~0.6 GiB here), and
# the "above floor" column is what the sequence costs.
# Usage: bench/context_parallel_memory.sh [L=1024] [out.json] [B=4] (the results: 2048 out.json 2). Run after ./scripts/build.
# On CPU no allocator fails at a limit the way a GPU's does (and a cgroup limit only evicts
# libtorch's code pages), so the limit is shown by the measured peaks, not enforced.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:-1024}
OUT=${2:-}
B=${3:-4}
TENAX_BIN=${TENAX_BIN:-build/tenax}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

args() {  # name seq_len [extra...]
  local name=$1 seq=$2
  shift 2
  echo "train --defaults --set model.preset=debug-small --set data.source=synthetic" \
    "--set data.synthetic.vocab_size=256 --set data.synthetic.train_tokens=400000" \
    "--set data.synthetic.val_tokens=40000 --set training.seq_len=$seq --set model.max_seq_len=$seq" \
    "--set training.local_batch_size=$B --set training.steps=2 --set metrics.eval_interval=0" \
    "--set checkpoint.enable=false --set metrics.progress=never --set metrics.tensorboard=false" \
    "--set job.dump_folder=$work --set job.name=$name $*"
}

# Runs one configuration; prints "name seq cp max_peak_bytes ok|failed".
run() {  # name seq cp
  local name=$1 seq=$2 cp=$3
  local status=ok peak
  if [ "$cp" = 1 ]; then
    # shellcheck disable=SC2046
    "$TENAX_BIN" $(args "$name" "$seq") >"$work/$name.log" 2>&1 || status=failed
    peak=$(grep -o '"mem_peak_bytes":[0-9]*' "$work/$name/metrics.jsonl" 2>/dev/null |
      tail -1 | cut -d: -f2)
  else
    # shellcheck disable=SC2046
    "$TENAX_BIN" launch --nproc-per-node "$cp" --max-restarts 0 -- $(args "$name" "$seq" \
      --set parallelism.context_parallel="$cp" --set parallelism.data_parallel_shard=1) \
      >"$work/$name.log" 2>&1 || status=failed
    peak=$(grep -o 'peak memory of this rank: [^(]*([0-9]* bytes' "$work/$name.log" |
      grep -o '([0-9]*' | tr -d '(' | sort -n | tail -1)
  fi
  echo "$name $seq $cp ${peak:-0} $status"
}

rows=()
rows+=("$(run floor 64 1)")
rows+=("$(run one_L "$L" 1)")
rows+=("$(run one_4L $((4 * L)) 1)")
rows+=("$(run one_8L $((8 * L)) 1)")
rows+=("$(run cp4_4L $((4 * L)) 4)")
rows+=("$(run cp8_8L $((8 * L)) 8)")
floor=$(echo "${rows[0]}" | cut -d' ' -f4)

printf '%-8s %8s %4s %16s %18s %8s\n' run seq_len cp "peak/rank (MiB)" "above floor (MiB)" status
for r in "${rows[@]}"; do
  read -r name seq cp peak status <<<"$r"
  printf '%-8s %8s %4s %16.0f %18.0f %8s\n' "$name" "$seq" "$cp" "$(echo "$peak / 1048576" | bc -l)" \
    "$(echo "($peak - $floor) / 1048576" | bc -l)" "$status"
done
if [ -n "$OUT" ]; then
  {
    printf '{"bench": "context_parallel_memory", "date": "%s", "host": "%s", "cores": %s,\n' \
      "$(date -u +%F)" "$(hostname)" "$(nproc)"
    printf ' "command": "bench/context_parallel_memory.sh %s OUT %s", "model": "debug-small",\n' "$L" "$B"
    printf ' "batch": %s, "steps": 2, "activation_checkpoint": "none", "floor_bytes": %s, "runs": [\n' "$B" "$floor"
    sep=""
    for r in "${rows[@]}"; do
      read -r name seq cp peak status <<<"$r"
      printf '%s  {"run": "%s", "seq_len": %s, "context_parallel": %s, "peak_bytes_per_rank": %s, "status": "%s"}' \
        "$sep" "$name" "$seq" "$cp" "$peak" "$status"
      sep=$',\n'
    done
    printf '\n]}\n'
  } >"$OUT"
  echo "wrote $OUT"
fi
