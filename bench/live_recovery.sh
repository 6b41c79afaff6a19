#!/usr/bin/env bash
# Live recovery against restarts on the same faults (issue 34's evidence): 4 data-parallel CPU
# ranks, STEPS steps, K ranks killed (SIGKILL, by --inject crash) at evenly spaced steps, rotating
# over the ranks; once with resilience.mode = "restart" (every failure: stop every rank, resume from
# the newest checkpoint, redo the steps since) and once with "live" (the others train on, a
# replacement heals from them), plus an unfailed run of each mode. Prints a Markdown table: wall
# time, the goodput split's effective training ratio, the effective time measured against the
# unfailed run of the same mode (its failure-free computation over the time the run took, both
# without the start-up and shut-down every run has; the modes' unfailed runs differ: restart mode
# also keeps memory replicas of its checkpoints), `tenax simulate`'s prediction for both recoveries from the costs the
# runs measured (detection, restart, healing), steps redone, restarts, replacements healed; and
# writes it as JSON to OUT when given. Effective time, not speed: run it on an idle machine.
# SHAPE=29m trains the 29M shape (dim 512, 8 layers, 8/4 heads, FFN 1536, vocab 4000, sequences
# of 128, 2 per rank: about 1.3 s a step on this 2-core VM) instead of debug-tiny (tens of ms),
# so that a kill costs what it would beside steps of a realistic length.
# LAYOUT=hsdp runs HSDP 2x2 (two replicas of two ranks: a kill takes its rank's replica out and
# both of its ranks heal) instead of DDP 4 (four replicas of one rank).
# RANKS=N (4 by default, even under LAYOUT=hsdp) runs N ranks: RANKS=8 LAYOUT=hsdp is HSDP 4x2,
# four replicas of two ranks, as many replica groups as DDP 4 (give it CAP=0.25 on 2 cores).
# CAP=F gives every rank process a CPU quota of F cores of its own (a cgroup v1 cpu controller,
# as root): with CAP=0.5 on 2 cores a rank cannot take a lost rank's share of the CPU, as a GPU
# cannot take another GPU's, so the short-handed steps cost what they would on GPUs (without it
# the three survivors share the 2 cores that four ranks shared, and a short-handed step is no
# slower per sample than a full one). CAP_PERIOD_US=P sets the quota's period: F x P of CPU time
# in every P microseconds (100000, the kernel's default, unless given).
# DATA=tokens (the default) trains on token shards of random ids written once, memory-mapped at
# every process's start as a real job's data is; DATA=synthetic on the synthetic Markov source,
# which every process builds at its start (about 1.9 s of CPU for the 29M shape's 4000-token
# vocabulary): a standby started to refill the pool after a heal then took that CPU from the capped
# ranks for two steps (about +0.3 to +0.6 s each). The results in bench/results/ before
# 2026-12-07 ran with the synthetic source.
# SPARES=N passes --spares N to every run: N standby processes started in advance (their
# libraries loaded) take the lost ranks' places, so a replacement's start-up is shorter.
# No slot is faulty here (the kills are injected, rotating over the ranks), so every run passes
# --quarantine-after KILLS+1: with the default (2 failures within an hour) the kills would
# quarantine the 4+N slots one after another (10 kills over 5 slots: all of them by the 7th),
# and once no healthy slot is left each replacement starts cold in its own slot (spares.h),
# which measures the quarantine policy, not the recovery.
# Beside it, each live kill's cost from the live run's own step times ("per kill, within the
# run"): the wall time of the 6 steps from the kill's step on against the median of the 12 steps
# before it that no kill touched (a step right after a save counted apart, less the run's median
# save), so that a day-to-day or run-to-run drift of this VM's speed (the two unfailed runs may
# differ by several percent) does not count as the recovery's; "effective, within the run" is the
# live run's step time less those costs, over its step time. The same windows of the unfailed
# live-mode run, where nothing happened, show the estimate's noise.
# MODES=live runs the live mode's two runs only (its unfailed run and the one with kills), for
# the within-run figure when the restart side was measured before: about half the time. Its
# prediction then takes the healing time for the restart cost (a restart needs every replica out
# at once, which 4 replicas do not meet at these rates), and says so.
# KEEP=DIR copies each run's launcher log, metrics.jsonl and goodput.json into DIR, with a sample
# every second of the CPU time of every rank process and of the launcher (<run>.cpu: wall time,
# pid, user and system clock ticks, threads, name; from /proc), so that where a run's time went
# can be looked at afterwards.
# Usage: [SHAPE=tiny|29m] [LAYOUT=ddp|hsdp] [RANKS=N] [CAP=F [CAP_PERIOD_US=P]] [SPARES=N] [DATA=tokens|synthetic] [MODES=all|live] [KEEP=DIR] bench/live_recovery.sh [STEPS (400)] [KILLS (8)] [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-400}"
kills="${2:-8}"
out="${3:-}"
bin="${TENAX_BIN:-$PWD/build/tenax}"  # TENAX_BIN: a copy, to rebuild while this runs
work="$(mktemp -d /tmp/tenax-live-bench-XXXXXX)"
cap="${CAP:-}"
spares="${SPARES:-0}"
ranks="${RANKS:-4}"
cgroup=""
capper=""
ours() {  # this bench's processes named NAME...: their command lines hold its folder (not a CI's)
  local pid comm
  for pid in $(pgrep -f -- "job.dump_folder=$work"); do  # one process, then shell builtins only
    { read -r comm < "/proc/$pid/comm"; } 2>/dev/null || continue
    [[ " $* " == *" $comm "* ]] && echo "$pid"
  done
  return 0
}
cleanup() {
  if [ -n "$capper" ]; then kill "$capper" 2>/dev/null || true; wait "$capper" 2>/dev/null || true; fi
  if [ -n "$cgroup" ]; then
    for g in "$cgroup"/*/; do rmdir "$g" 2>/dev/null || true; done
    rmdir "$cgroup" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "$cap" ]; then
  cgroup=/sys/fs/cgroup/cpu/tenax-live-bench-$$
  mkdir "$cgroup" || { echo "live_recovery.sh: CAP needs a writable cgroup v1 cpu controller (/sys/fs/cgroup/cpu, as root)" >&2; exit 2; }
  period="${CAP_PERIOD_US:-100000}"
  quota=$(python3 -c "print(int(float('$cap') * $period))")
  # Every rank process (tenax-torch), replacements and standbys too, in a cgroup of its own as
  # soon as it appears (its threads follow it).
  (
    while :; do
      for pid in $(ours tenax-torch); do
        [ -d "$cgroup/$pid" ] && continue
        mkdir "$cgroup/$pid" 2>/dev/null || continue
        echo "$period" > "$cgroup/$pid/cpu.cfs_period_us"
        echo "$quota" > "$cgroup/$pid/cpu.cfs_quota_us"
        echo "$pid" > "$cgroup/$pid/cgroup.procs" 2>/dev/null || true
      done
      # Emptied groups of ranks that ended.
      for g in "$cgroup"/*/; do [ -s "$g/cgroup.procs" ] || rmdir "$g" 2>/dev/null || true; done
      sleep 0.05
    done
  ) &
  capper=$!
fi

shape="${SHAPE:-tiny}"
case "$shape" in
  tiny) model="--set model.preset=debug-tiny --set training.seq_len=64 --set training.local_batch_size=8"
        vocab=32 train_tokens=400000 ;;
  29m) model="--set model.dim=512 --set model.n_layers=8 --set model.n_heads=8 --set model.n_kv_heads=4
              --set model.ffn_hidden_dim=1536 --set model.vocab_size=4000
              --set training.seq_len=128 --set training.local_batch_size=2"
       vocab=4000 train_tokens=$((steps * 275 * ranks + 100000)) ;;
  *) echo "live_recovery.sh: SHAPE is tiny or 29m, not '$shape'" >&2; exit 2 ;;
esac

data_kind="${DATA:-tokens}"
case "$data_kind" in
  tokens)
    # Token shards (docs/data_format.md) of uniformly random ids, written once: opened by a memory
    # map, as a real job's are, in a rank's or a standby's start-up.
    # Written by gpu_check.py's write_tokens, with the setup's Python.
    mkdir -p "$work/data"
    .deps/venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from gpu_check import write_tokens
write_tokens('$work/data/train.bin', $train_tokens, $vocab, 1234)
write_tokens('$work/data/val.bin', 100000, $vocab, 1235)"
    data="--set data.source=tokens --set data.path=$work/data/train.bin --set data.val_path=$work/data/val.bin" ;;
  synthetic)
    data="--set data.source=synthetic --set data.synthetic.vocab_size=$vocab
          --set data.synthetic.train_tokens=$train_tokens --set data.synthetic.order=1" ;;
  *) echo "live_recovery.sh: DATA is tokens or synthetic, not '$data_kind'" >&2; exit 2 ;;
esac

layout="${LAYOUT:-ddp}"
case "$layout" in
  ddp) shard=1 ;;
  hsdp) shard=2 ;;
  *) echo "live_recovery.sh: LAYOUT is ddp or hsdp, not '$layout'" >&2; exit 2 ;;
esac
if [ $((ranks % shard)) -ne 0 ] || [ $((ranks / shard)) -lt 2 ]; then
  echo "live_recovery.sh: RANKS=$ranks needs at least two replicas of $shard rank(s)" >&2; exit 2
fi
replicas=$((ranks / shard))

train() {  # train args for a run named $1
  # shellcheck disable=SC2086
  echo "train --defaults" $data $model \
       "--set metrics.eval_interval=0 --set metrics.progress=never --set optimizer.lr=3e-3" \
       "--set training.steps=$steps --set checkpoint.interval=25" \
       "--set parallelism.data_parallel_replicate=$replicas --set parallelism.data_parallel_shard=$shard" \
       "--set job.dump_folder=$work --set job.name=$1"
}

# The same kills for both modes: at steps spaced evenly (never the first or last tenth), on
# ranks 1, 2, ..., RANKS-1, 0, 1, ...; restarts need each in its own generation.
live_spec="" restart_spec=""
for i in $(seq 0 $((kills - 1))); do
  step=$((steps / 10 + i * (steps * 8 / 10) / kills))
  rank=$(((i + 1) % ranks))
  live_spec+="${live_spec:+,}crash:rank=$rank:step=$step"
  restart_spec+="${restart_spec:+,}crash:rank=$rank:step=$step:gen=$i"
done

keep="${KEEP:-}"
[ -z "$keep" ] || mkdir -p "$keep"
run() {  # run NAME EXTRA-LAUNCH-FLAGS... -- EXTRA-TRAIN-ARGS
  local name="$1"; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  local sampler=""
  if [ -n "$keep" ]; then
    (  # KEEP: every rank process's and the launcher's CPU time, once a second
      while :; do
        now=$(date +%s.%N)
        for pid in $(ours tenax-torch tenax); do
          { read -r -a f < "/proc/$pid/stat"; } 2>/dev/null || continue
          echo "$now $pid ${f[13]} ${f[14]} ${f[19]} ${f[1]}"
        done
        sleep 1
      done
    ) > "$work/$name.cpu" &
    sampler=$!
  fi
  # shellcheck disable=SC2046
  "$bin" launch --nproc-per-node "$ranks" --spares "$spares" --quarantine-after $((kills + 1)) "${flags[@]}" -- $(train "$name") "$@" > "$work/$name.log" 2>&1 || {
    echo "$name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true
    cp "$work/$name.log" "$work/$name.cpu" "$keep/"
    cp "$work/$name/metrics.jsonl" "$keep/$name.metrics.jsonl"
    cp "$work/$name/goodput.json" "$keep/$name.goodput.json"
  fi
}

modes="${MODES:-all}"
case "$modes" in
  all) ;;
  live) ;;
  *) echo "live_recovery.sh: MODES is all or live, not '$modes'" >&2; exit 2 ;;
esac
[ "$modes" = live ] || run clean --
run clean-live -- --set resilience.mode=live
[ "$modes" = live ] || run restart --max-restarts $((kills + 2)) --inject "$restart_spec" --
run live --inject "$live_spec" -- --set resilience.mode=live

python3 - "$work" "$steps" "$kills" "$out" "$bin" "$shape" "$layout" "$replicas" "$cap" "$spares" "$data_kind" "$ranks" "$modes" <<'PY'
import json, os, statistics, subprocess, sys
work, steps, kills, out, tenax = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]


WINDOW = 6  # the steps from a kill's on that its cost is taken from (within_run)


def within_run(metrics, kill_steps, interval, window=WINDOW, before=12):
    """Each kill's cost from the run's own step times (see the header)."""
    rows = [json.loads(line) for line in open(metrics)]
    t = {r["step"]: r["time"] for r in rows if "step_time_s" in r}
    wall = {s: t[s] - t[s - 1] for s in t if s - 1 in t}  # the step's end to the next one's
    hit = {s for k in kill_steps for s in range(k, k + window)}
    after_save = {s for s in wall if (s - 1) % interval == 0}  # its wall time holds the save
    calm = {s: w for s, w in wall.items() if s not in hit}
    plain = [w for s, w in calm.items() if s not in after_save]
    saved = [w for s, w in calm.items() if s in after_save]
    save_s = statistics.median(saved) - statistics.median(plain) if saved else 0.0
    lost = []
    for k in kill_steps:
        base = statistics.median([calm[s] for s in range(k - before, k)
                                  if s in calm and s not in after_save])
        span = [s for s in range(k, k + window) if s in wall]
        lost.append(sum(wall[s] for s in span) - len(span) * base
                    - save_s * sum(1 for s in span if s in after_save))
    total = t[max(t)] - t[min(t)]
    # The calm steps' median between one kill and the next (before the first, after each): whether
    # a run's steps stay slower once replacements train in it.
    bounds = [min(wall)] + list(kill_steps) + [max(wall) + 1]
    segments = [statistics.median([w for s, w in calm.items() if lo <= s < hi and s not in after_save])
                for lo, hi in zip(bounds, bounds[1:])]
    return {"per_kill_s": lost, "mean_s": statistics.mean(lost), "steps_wall_s": total,
            "effective": (total - sum(lost)) / total, "calm_step_s_between_kills": segments}


shape, layout, replicas, cap, spares = sys.argv[6], sys.argv[7], int(sys.argv[8]), sys.argv[9], int(sys.argv[10])
data_kind, ranks = sys.argv[11], int(sys.argv[12])
modes = ("clean", "restart", "clean-live", "live") if sys.argv[13] == "all" else ("clean-live", "live")
g = {m: json.load(open(f"{work}/{m}/goodput.json")) for m in modes}
clean = g.get("clean", g["clean-live"])  # MODES=live: the live mode's unfailed run
# The failure-free computation, and what the two runs measured per failure: the inputs of
# `tenax simulate`, whose prediction is printed beside the measurement.
duration = clean["time_s"]["productive"]
fixed = clean["wall_s"] - duration  # start-up, evaluation, shut-down: in every run
# A failure's own record: under HSDP the ranks killed with their replica have records of their
# own (peer-lost), which are no failures of their own.
live = [r for r in g["live"]["live_recoveries"] if r.get("kind") != "peer-lost"]
measured_in = {
    "duration_s": duration,
    "failure_rate_per_node_hour": kills / (ranks * duration) * 3600,
    "checkpoint_s": clean["time_s"]["checkpoint"] / max(1, steps // 25),
    "interval_s": duration * 25 / steps,
    "detect_s": sum(r["detection_s"] for r in live) / max(1, len(live)),
    "heal_s": sum(r["healed_at_s"] - r["time_s"] for r in live if r["healed_at_s"] >= 0)
              / max(1, sum(1 for r in live if r["healed_at_s"] >= 0)),
    # Of which the replacement's start-up (until the launcher saw it ready to join).
    "ready_s": sum(r["ready_at_s"] - r["time_s"] for r in live if r.get("ready_at_s", -1) >= 0)
               / max(1, sum(1 for r in live if r.get("ready_at_s", -1) >= 0)),
}
# MODES=live measured no restart: the healing time stands in for it (see the header).
measured_in["restart_s"] = (g["restart"]["time_s"]["restart"] / max(1, g["restart"]["restarts"])
                            if "restart" in g else measured_in["heal_s"])
if "restart" not in g:
    print("MODES=live: no restart-mode runs; the prediction takes the healing time for a restart's cost")
cmd = [tenax, "simulate", "--gpus", str(ranks), "--gpus-per-node", "1",
       "--failure-rate", f"{measured_in['failure_rate_per_node_hour']:.3f}/node-hour",
       "--duration", f"{duration:.3f}s", "--checkpoint-cost", f"{measured_in['checkpoint_s']:.4f}s",
       "--interval", f"{measured_in['interval_s']:.3f}s",
       "--restart-cost", f"{measured_in['restart_s']:.3f}s",
       "--detect-time", f"{measured_in['detect_s']:.3f}s",
       "--spares", "16", "--swap-time", "0s", "--repair-time", "1s",  # a process, not a node
       "--replica-groups", str(replicas), "--heal-time", f"{measured_in['heal_s']:.3f}s",
       "--runs", "2000", "--json"]
sim = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
predicted = {"live": sim["effective"]}
if "restart" in g:
    predicted["restart"] = sim["restart_recovery"]["effective"]
rows = []
print(f"| mode ({shape}, {data_kind} data, {layout}, {steps} steps, {kills} kills, {ranks} ranks{', ' + cap + ' core each' if cap else ''}{f', {spares} spare(s)' if spares else ''}) | wall s | effective ratio (goodput.json) "
      "| effective, measured | predicted (5th-95th pct) | steps redone | restarts | replacements healed |")
print("|---|---|---|---|---|---|---|---|")
for m in modes:
    j = g[m]
    healed = sum(1 for r in j.get("live_recoveries", []) if r.get("healed_at_s", -1) >= 0)
    # The failure-free computation over the time it took, against the same mode's unfailed run.
    base = g["clean-live" if "live" in m else "clean"]
    base_duration = base["time_s"]["productive"]
    effective = base_duration / (j["wall_s"] - (base["wall_s"] - base_duration))
    p = predicted.get(m)
    row = {"mode": m, "wall_s": j["wall_s"], "effective_ratio": j["effective_training_ratio"],
           "effective_measured": effective, "predicted": p, "steps_redone": j["steps_redone"],
           "restarts": j["restarts"], "live_recoveries": len(j.get("live_recoveries", [])),
           "healed": healed, "step": j["step"]}
    # Each live recovery's own times, from its failure: when its replacement was ready, when it
    # had healed (-1: never), so that a mean can be explained afterwards.
    row["recoveries"] = [
        {"rank": r["rank"], "kind": r["kind"], "time_s": r["time_s"],
         "ready_after_s": r["ready_at_s"] - r["time_s"] if r.get("ready_at_s", -1) >= 0 else -1,
         "healed_after_s": r["healed_at_s"] - r["time_s"] if r.get("healed_at_s", -1) >= 0 else -1,
         "steps_short_handed": r.get("steps_short_handed", 0)}
        for r in j.get("live_recoveries", [])]
    rows.append(row)
    pred = f"{p['mean']:.3f} ({p['p05']:.3f}-{p['p95']:.3f})" if p else "-"
    print(f"| {m} | {row['wall_s']:.1f} | {row['effective_ratio']:.3f} | {effective:.3f} | {pred} "
          f"| {row['steps_redone']} | {row['restarts']} | {healed} |")
kill_steps = [steps // 10 + i * (steps * 8 // 10) // kills for i in range(kills)]  # as injected
within = within_run(f"{work}/live/metrics.jsonl", kill_steps, 25)
# The same windows in the unfailed live-mode run: what the estimate says where nothing happened
# (this VM's noise).
within["control"] = within_run(f"{work}/clean-live/metrics.jsonl", kill_steps, 25)
print(f"live, per kill within the run: {within['mean_s']:.2f} s on average "
      f"({', '.join(f'{x:.2f}' for x in within['per_kill_s'])}); effective, within the run: "
      f"{within['effective']:.3f}; the same windows of the unfailed run (noise): "
      f"{within['control']['mean_s']:.2f} s on average "
      f"({', '.join(f'{x:.2f}' for x in within['control']['per_kill_s'])})")
print("calm step (median, s) before the first kill and after each: live "
      + ", ".join(f"{x:.3f}" for x in within["calm_step_s_between_kills"]) + "; unfailed run "
      + ", ".join(f"{x:.3f}" for x in within["control"]["calm_step_s_between_kills"]))
print("measured inputs: " + ", ".join(f"{k} {v:.3f}" for k, v in measured_in.items()))
print("prediction: " + " ".join(cmd))
if out:
    json.dump({"steps": steps, "kills": kills, "modes": list(modes), "ranks": ranks, "shape": shape, "data": data_kind, "layout": layout,
               "replicas": replicas, "cap_cores_per_rank": float(cap) if cap else None,
               "cap_period_us": int(os.environ.get("CAP_PERIOD_US", 100000)) if cap else None,
               "spares": spares,
               "kill_steps": kill_steps, "kill_window_steps": WINDOW,
               "rows": rows,
               "live_within_run": within,
               "inputs": measured_in,
               "simulate": cmd[1:]}, open(out, "w"), indent=1)
PY
