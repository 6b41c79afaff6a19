#!/usr/bin/env bash
# Silent-data-corruption checks (issue 35's evidence), two parts:
#   trials    for each place of corruption (grad, activation, weight) and each layout (DDP and
#             FSDP on 4 CPU ranks, one spare; LAYOUTS="ddp fsdp moe" adds the debug-moe model under
#             FSDP), TRIALS runs with a defective device on a random
#             rank from a random step (seeded): did the check fire within
#             resilience.sdc_check_interval steps, name the right rank, and end with final
#             weights bit-identical to an uncorrupted run with no committed checkpoint differing
#             from it? (tests/sdc_e2e_test.cc runs one of each; this runs many.)
#   overhead  the 29M shape (dim 512, 8 layers, 8/4 heads, FFN 1536, vocab 4000) on 4 DDP ranks,
#             STEPS steps without checks and with sdc_check_interval = 10, 50, 100, interleaved
#             over ROUNDS rounds: the sum of step times from metrics.jsonl (start-up and
#             shut-down left out), its ratio to the unchecked run's, and the cost the trainer
#             printed at start.
# Prints Markdown tables and writes JSON to OUT when given. Overhead is a speed: run it on an
# idle machine.
# Usage: bench/sdc.sh [TRIALS (20)] [STEPS (100)] [ROUNDS (2)] [OUT.json]
# TRIALS 0 or STEPS 0 skips that part.
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-20}"
steps="${2:-100}"
rounds="${3:-2}"
out="${4:-}"
bin="${TENAX_BIN:-$PWD/build/tenax}"  # TENAX_BIN: a copy, to rebuild while this runs
work="$(mktemp -d /tmp/tenax-sdc-bench-XXXXXX)"
trap 'rm -rf "$work"' EXIT
interval=5

small() {  # train args of the trials' runs: name, layout flags
  echo "train --defaults --set data.source=synthetic --set model.preset=debug-tiny" \
       "--set training.seq_len=32 --set data.synthetic.train_tokens=40000" \
       "--set data.synthetic.val_tokens=4000 --set data.synthetic.vocab_size=32" \
       "--set data.synthetic.order=1 --set metrics.eval_tokens=2048 --set metrics.progress=never" \
       "--set optimizer.lr=3e-3 --set checkpoint.interval=4 --set training.steps=16" \
       "--set training.local_batch_size=4 --set resilience.sdc_check_interval=$interval" \
       "--set job.dump_folder=$work --set job.name=$1 $2"
}
declare -A layouts=(
  [ddp]="--set parallelism.data_parallel_replicate=4 --set parallelism.data_parallel_shard=1"
  [fsdp]="--set parallelism.data_parallel_replicate=1 --set parallelism.data_parallel_shard=4"
  [moe]="--set parallelism.data_parallel_replicate=1 --set parallelism.data_parallel_shard=4 --set model.preset=debug-moe"
)

echo "sdc: $trials trials per place and layout" >&2
RANDOM=35
: > "$work/trials.jsonl"
for layout in $([ "$trials" -gt 0 ] && echo "${LAYOUTS:-ddp fsdp}"); do
  # shellcheck disable=SC2046
  "$bin" launch --nproc-per-node 4 -- $(small "clean-$layout" "${layouts[$layout]}") \
    > "$work/clean-$layout.log" 2>&1 || { tail -20 "$work/clean-$layout.log" >&2; exit 1; }
  for where in grad activation weight; do
    for t in $(seq 1 "$trials"); do
      rank=$((RANDOM % 4)) step=$((1 + RANDOM % 15))
      name="$layout-$where-$t"
      rc=0
      # shellcheck disable=SC2046
      "$bin" launch --nproc-per-node 4 --spares 1 --max-restarts 2 \
        --inject "sdc:rank=$rank:step=$step:where=$where" -- \
        $(small "$name" "${layouts[$layout]}") > "$work/$name.log" 2>&1 || rc=$?
      python3 - "$work" "$name" "clean-$layout" "$layout" "$where" "$rank" "$step" "$rc" \
        "$interval" >> "$work/trials.jsonl" <<'PY'
import filecmp, json, os, sys
work, name, clean, layout, where, rank, step, rc, n = sys.argv[1:]
rank, step, rc, n = int(rank), int(step), int(rc), int(n)
run = f"{work}/{name}"
sdc = json.load(open(f"{run}/sdc.json"))["detections"] if os.path.exists(f"{run}/sdc.json") else []
ckpt, ref = f"{run}/checkpoints", f"{work}/{clean}/checkpoints"
identical, compared = True, 0
for d in sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []:
    if not os.path.exists(f"{ckpt}/{d}/COMMITTED"):
        continue
    for f in os.listdir(f"{ckpt}/{d}"):
        if f.endswith(".safetensors"):
            compared += 1
            identical &= filecmp.cmp(f"{ckpt}/{d}/{f}", f"{ref}/{d}/{f}", shallow=False)
final = os.path.exists(f"{ckpt}/step_00000016/COMMITTED")
print(json.dumps({
    "layout": layout, "where": where, "rank": rank, "step": step, "exit_code": rc,
    "detected_at": sdc[0]["step"] if sdc else None,
    "named": [d["rank"] for d in sdc],
    "detected_within_interval": bool(sdc) and 0 <= sdc[0]["step"] - step < n,
    "right_rank": [d["rank"] for d in sdc] == [rank],
    "checkpoints_identical": identical and final and compared > 0,
    "checkpoints_compared": compared}))
PY
      rm -rf "${work:?}/$name"
    done
  done
done

echo "sdc: overhead, $steps steps x $rounds rounds" >&2
big() {  # train args of the overhead runs: name, interval
  echo "train --defaults --set data.source=synthetic --set model.dim=512 --set model.n_layers=8" \
       "--set model.n_heads=8 --set model.n_kv_heads=4 --set model.ffn_hidden_dim=1536" \
       "--set model.vocab_size=4000 --set data.synthetic.vocab_size=4000 --set data.synthetic.order=1" \
       "--set training.seq_len=128 --set training.local_batch_size=1" \
       "--set data.synthetic.train_tokens=$((steps * 4 * 130 + 100000))" \
       "--set metrics.eval_interval=0 --set metrics.progress=never --set checkpoint.enable=false" \
       "--set training.steps=$steps --set parallelism.data_parallel_replicate=4" \
       "--set parallelism.data_parallel_shard=1 --set resilience.sdc_check_interval=$2" \
       "--set job.dump_folder=$work --set job.name=$1"
}
: > "$work/overhead.jsonl"
for r in $([ "$steps" -gt 0 ] && seq 1 "$rounds"); do
  for n in 0 10 50 100; do
    name="big-$n-$r"
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 -- $(big "$name" "$n") > "$work/$name.log" 2>&1 || {
      tail -20 "$work/$name.log" >&2; exit 1; }
    python3 - "$work/$name" "$n" "$r" "$work/$name.log" >> "$work/overhead.jsonl" <<'PY'
import json, re, sys
run, n, r, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"step_time_s"' in l]
m = re.search(r"check took ([0-9.]+)s .*?against ([0-9.]+)s for the step itself: about ([0-9.]+)%", open(log).read())
print(json.dumps({"interval": n, "round": r, "steps": len(steps),
                  "train_s": sum(s["step_time_s"] for s in steps),
                  "printed_check_s": float(m.group(1)) if m else None,
                  "printed_step_s": float(m.group(2)) if m else None,
                  "printed_overhead_pct": float(m.group(3)) if m else None}))
PY
    rm -rf "${work:?}/$name"
  done
done

python3 - "$work" "$out" "$trials" "$steps" "$rounds" "$interval" <<'PY'
import json, os, platform, statistics, subprocess, sys, time
work, out, trials, steps, rounds, interval = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
t = [json.loads(l) for l in open(f"{work}/trials.jsonl")]
o = [json.loads(l) for l in open(f"{work}/overhead.jsonl")]
if t:
    print(f"\n### Detection: {trials} trials per place and layout, random rank and step, "
          f"sdc_check_interval = {interval}\n")
    print("| layout | where | detected within the interval | right rank named | checkpoints and final weights identical |")
    print("|---|---|---|---|---|")
rows = []
for layout in dict.fromkeys(x["layout"] for x in t):  # as run (LAYOUTS)
    for where in ("grad", "activation", "weight"):
        s = [x for x in t if x["layout"] == layout and x["where"] == where]
        row = {"layout": layout, "where": where, "trials": len(s),
               "detected": sum(x["detected_within_interval"] for x in s),
               "right_rank": sum(x["right_rank"] for x in s),
               "identical": sum(x["checkpoints_identical"] for x in s)}
        rows.append(row)
        print(f"| {layout} | {where} | {row['detected']}/{len(s)} | {row['right_rank']}/{len(s)} | {row['identical']}/{len(s)} |")
base = {x["round"]: x["train_s"] for x in o if x["interval"] == 0}
if o: print(f"\n### Overhead: 29M shape, 4 DDP ranks, {steps} steps, {rounds} interleaved rounds\n")
if o: print("| sdc_check_interval | checks | training time (s), per round | overhead, per round | printed at start |")
if o: print("|---|---|---|---|---|")
over = []
for n in (0, 10, 50, 100) if o else ():
    s = [x for x in o if x["interval"] == n]
    checks = 0 if n == 0 else len({k for k in range(1, steps + 1) if k % n == 0 or k == 2})
    pct = [100 * (x["train_s"] / base[x["round"]] - 1) for x in s]
    printed = [x["printed_overhead_pct"] for x in s if x["printed_overhead_pct"] is not None]
    over.append({"interval": n, "checks": checks, "train_s": [x["train_s"] for x in s],
                 "overhead_pct": pct, "printed_overhead_pct": printed})
    times = ", ".join("%.1f" % x["train_s"] for x in s)
    pcts = "-" if n == 0 else ", ".join("%+.1f%%" % p for p in pct)
    said = ", ".join("%.1f%%" % p for p in printed) or "-"
    print(f"| {n or 'off'} | {checks} | {times} | {pcts} | {said} |")
if out:
    cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    json.dump({"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.node()}, {cores} cores",
               "command": (f"LAYOUTS='{os.environ['LAYOUTS']}' " if os.environ.get("LAYOUTS") else "")
                          + f"bench/sdc.sh {trials} {steps} {rounds}",
               "trials": rows, "trial_runs": t, "overhead": over}, open(out, "w"), indent=2)
PY
