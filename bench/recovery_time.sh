#!/usr/bin/env bash
# Failure to training again, measured by the launcher itself (goodput.json): a 2-rank run on CPU
# with one injected crash (SIGKILL of rank 1 at step 6) or one hang (rank 1 blocks before its
# gradient reduction at step 6, --hang-timeout 2), or one stopped rank (SIGSTOP from outside to
# rank 1 once checkpoint 6 exists, --hang-timeout 2: the rank can neither dump its flight record
# nor honour SIGTERM), restarted once. For each run it prints the
# failure's detection time (failure to the launcher acting on it) and recovery time (from then
# until the next generation is ready to train), and the median of each over the runs.
# Usage: bench/recovery_time.sh [crash|hang|stop] [RUNS] [TENAX_BINARY...]
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
  stop) inject="" flags="--hang-timeout 2" ;;
  *) echo "usage: $0 [crash|hang|stop] [RUNS] [TENAX_BINARY...]" >&2; exit 2 ;;
esac

steps=12
[ "$kind" = stop ] && steps=40
declare -A det rec
for i in $(seq 1 "$runs"); do
  for b in "${!bins[@]}"; do
    bin="${bins[$b]}"
    name="r${i}b${b}"
    # Newer builds want --defaults for a run without --config; older ones do not know the flag.
    defaults=""
    "$bin" train --help 2>&1 | grep -q -- '--defaults' && defaults="--defaults"
    # shellcheck disable=SC2086
    "$bin" launch --nproc-per-node 2 --max-restarts 1 $flags ${inject:+--inject "$inject"} \
      --goodput-file "$work/$name.json" -- train $defaults --set data.source=synthetic \
      --set model.preset=debug-tiny --set training.seq_len=32 \
      --set data.synthetic.train_tokens=40000 --set data.synthetic.vocab_size=32 \
      --set metrics.progress=never --set training.steps="$steps" --set checkpoint.interval=3 \
      --set training.local_batch_size=4 --set job.dump_folder="$work" --set job.name="$name" \
      > "$work/$name.log" 2>&1 &
    launcher=$!
    if [ "$kind" = stop ]; then
      # Rank 1 is the child started with RANK=1 (older launchers) or in slot 1 (standbys).
      while [ ! -e "$work/$name/checkpoints/step_00000006" ] && kill -0 "$launcher" 2>/dev/null; do
        sleep 0.05
      done
      for c in $(pgrep -P "$launcher"); do
        if tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx 'RANK=1\|TENAX_SLOT=1'; then
          kill -STOP "$c"
        fi
      done
    fi
    wait "$launcher" || { echo "run failed: $bin"; tail -5 "$work/$name.log"; exit 1; }
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
