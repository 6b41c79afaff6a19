#!/usr/bin/env bash
# Failure to training again, measured by the launcher itself (goodput.json): a 2-rank run on CPU
# with one injected crash (SIGKILL of rank 1 at step 6) or one hang (rank 1 blocks before its
# gradient reduction at step 6, --hang-timeout 2), restarted once. For each run it prints the
# failure's detection time (failure to the launcher acting on it) and recovery time (from then
# until the next generation is ready to train), and the median of each over the runs.
# Usage: bench/recovery_time.sh [crash|hang] [RUNS] [TENAX_BINARY...]
#   With several binaries (e.g. an older build), runs alternate between them, so each gets the
#   same machine load; compare medians.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-crash}"
runs="${2:-5}"
shift $(($# > 2 ? 2 : $#))
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$PWD/build/tenax")
work="$(mktemp -d /tmp/tenax-recovery-XXXXXX)"
trap 'rm -rf "$work"' EXIT

case "$kind" in
  crash) inject="crash:rank=1:step=6" flags="" ;;
  hang) inject="hang:rank=1:step=6" flags="--hang-timeout 2" ;;
  *) echo "usage: $0 [crash|hang] [RUNS] [TENAX_BINARY...]" >&2; exit 2 ;;
esac

declare -A det rec
for i in $(seq 1 "$runs"); do
  for b in "${!bins[@]}"; do
    bin="${bins[$b]}"
    name="r${i}b${b}"
    # shellcheck disable=SC2086
    "$bin" launch --nproc-per-node 2 --max-restarts 1 $flags --inject "$inject" \
      --goodput-file "$work/$name.json" -- train --defaults --set data.source=synthetic \
      --set model.preset=debug-tiny --set training.seq_len=32 \
      --set data.synthetic.train_tokens=40000 --set data.synthetic.vocab_size=32 \
      --set metrics.progress=never --set training.steps=12 --set checkpoint.interval=3 \
      --set training.local_batch_size=4 --set job.dump_folder="$work" --set job.name="$name" \
      > "$work/$name.log" 2>&1 || { echo "run failed: $bin"; tail -5 "$work/$name.log"; exit 1; }
    read -r d r < <(python3 -c "import json,sys
f=json.load(open(sys.argv[1]))['failures'][0]
print(f['detection_s'], f['recovery_s'])" "$work/$name.json")
    printf '%-40s run %2d: detection %6.2f s  recovery %6.2f s\n' "$bin" "$i" "$d" "$r"
    det[$b]+="$d "
    rec[$b]+="$r "
  done
done
for b in "${!bins[@]}"; do
  python3 -c "import statistics,sys
d=[float(x) for x in sys.argv[2].split()]; r=[float(x) for x in sys.argv[3].split()]
print(f'{sys.argv[1]}: $kind, {len(d)} runs: median detection {statistics.median(d):.2f} s, '
      f'median recovery {statistics.median(r):.2f} s (min {min(r):.2f}, max {max(r):.2f}), '
      f'failure to training again {statistics.median([a+b for a,b in zip(d,r)]):.2f} s')" \
    "${bins[$b]}" "${det[$b]}" "${rec[$b]}"
done
