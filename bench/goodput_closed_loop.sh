#!/usr/bin/env bash
# The planner's goodput prediction against the launcher's measurement (issue 40's closed loop):
# 2-rank CPU runs of 4000 steps under `tenax launch --inject poisson:...` (crashes by SIGKILL,
# hangs by SIGSTOP, NaN losses, at known rates), each followed by `tenax plan --from-run`, which
# predicts the effective training time from the run's own measured costs: for the run's own
# failure times (the replay), over 2000 simulated runs at the rate, and by Daly's closed form at
# the rate (what `tenax plan --failure-rate` uses). Prints one Markdown row
# per mix and seed (docs/planner.md "Goodput, closed loop" holds a copy) and exits non-zero when
# a replay is more than 2 percentage points off the measurement.
# The live mixes run resilience.mode = "live" over 2 DDP replicas (a failure is trained through
# by the other replica; crashes and hangs only: a NaN loss restarts every replica), with a
# checkpoint every 100 steps instead of 20.
# Usage: [MODE=restart|live|all (all)] bench/goodput_closed_loop.sh [SEEDS ("1 2 3")] [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-1 2 3}"
out="${2:-}"
bin="${TENAX_BIN:-$PWD/build/tenax}"  # TENAX_BIN: a copy, to rebuild while this runs
work="$(mktemp -d /tmp/tenax-goodput-loop-XXXXXX)"
trap 'rm -rf "$work"' EXIT

# name and schedule; the rates are per hour of exposure (the whole job's: one node).
mode="${MODE:-all}"
restart_mixes=(
  "crash crash=720/h"
  "mixed crash=360/h:hang=120/h:nan=120/h"
  "hang+nan hang=180/h:nan=360/h"
)
live_mixes=(
  "live-crash crash=720/h"
  "live-mixed crash=360/h:hang=180/h"
)
case "$mode" in
  restart) mixes=("${restart_mixes[@]}") ;;
  live) mixes=("${live_mixes[@]}") ;;
  all) mixes=("${restart_mixes[@]}" "${live_mixes[@]}") ;;
  *) echo "goodput_closed_loop.sh: MODE is restart, live or all, not '$mode'" >&2; exit 2 ;;
esac
echo "| mix | seed | failures | measured | predicted, replay | difference | predicted at the rate (5th-95th pct) | Daly's closed form |"
echo "|---|---|---|---|---|---|---|---|"
rows=()
status=0
for mix in "${mixes[@]}"; do
  read -r name spec <<<"$mix"
  for seed in $seeds; do
    run="$name-$seed"
    live=()
    if [[ "$name" == live-* ]]; then
      # A checkpoint every 100 steps: live recovery needs them for disasters only, and a
      # failure while the other replica is inside a save's collectives still restarts.
      live=(--set resilience.mode=live --set parallelism.data_parallel_replicate=2
        --set parallelism.data_parallel_shard=1 --set checkpoint.interval=100)
    fi
    "$bin" launch --nproc-per-node 2 --max-restarts 1000 --hang-timeout 2 \
      --flight-dump-timeout 0.5 --inject "poisson:$spec:seed=$seed" -- train --defaults \
      --set data.source=synthetic --set model.preset=debug-tiny --set training.seq_len=32 \
      --set data.synthetic.train_tokens=400000 --set data.synthetic.vocab_size=32 \
      --set data.synthetic.order=1 --set metrics.eval_interval=0 --set metrics.progress=never \
      --set optimizer.lr=3e-3 --set checkpoint.interval=20 --set training.steps=4000 \
      --set training.local_batch_size=4 --set training.on_nonfinite=restart \
      --set job.dump_folder="$work" --set job.name="$run" "${live[@]}" >"$work/$run.log" 2>&1 ||
      { echo "launch failed: $run"; tail -20 "$work/$run.log"; exit 1; }
    "$bin" plan --from-run "$work/$run" --json >"$work/$run.json"
    row="$(python3 - "$work/$run.json" "$name" "$seed" "$spec" "$work/$run/goodput.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
# The run's failures as goodput.json has them, so that a later change of how --from-run reads
# them (the restart cost, say) can be checked against these runs again.
g = json.load(open(sys.argv[5]))
failures = [{k: f.get(k) for k in ("kind", "time_s", "detection_s", "recovery_s", "scheduled")}
            for f in g.get("failures", [])]
m = j["measured"]
kinds = ", ".join(f"{k} {n}" for k, n in sorted(m["failures_by_kind"].items()))
diff = 100 * (m["effective"] - j["replay"])
p = j["predicted"]
live = m.get("live") or {}
n = m["failures"] + live.get("failures", 0)
if live:
    kinds += f"; {m['failures']} restarted from, {live['heals']} healed"
print(f"| {sys.argv[2]} ({sys.argv[4]}) | {sys.argv[3]} | {n} ({kinds}) | "
      f"{100 * m['effective']:.2f} % | {100 * j['replay']:.2f} % | {diff:+.2f} pp | "
      f"{100 * p['mean']:.2f} % ({100 * p['p05']:.1f} - {100 * p['p95']:.1f}) | "
      f"{100 * j['daly_closed_form']:.2f} % |")
print(json.dumps({"mix": sys.argv[2], "spec": sys.argv[4], "seed": int(sys.argv[3]),
                  "difference_pp": diff, "from_run": j, "failures": failures}))
EOF
)"
    echo "$row" | head -1
    rows+=("$(echo "$row" | tail -1)")
    python3 -c "import sys; sys.exit(abs(float('$(echo "$row" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["difference_pp"])')')) > 2)" ||
      status=1
  done
done
if [ -n "$out" ]; then
  printf '%s\n' "${rows[@]}" | python3 -c "
import json, sys, platform, datetime, os
rows = [json.loads(l) for l in sys.stdin if l.strip()]
json.dump({'date': datetime.date.today().isoformat(), 'machine': platform.node(),
           'cpus': os.cpu_count(), 'command': 'bench/goodput_closed_loop.sh', 'runs': rows},
          open('$out', 'w'), indent=1)"
fi
exit $status
