#!/usr/bin/env bash
# Repeated fault experiments on `tenax launch`, from outside the program (issue 11's evidence):
#   attribution: N runs of 4 ranks; after training starts, one random rank is aborted (SIGABRT),
#                segfaulted (SIGSEGV), killed (SIGKILL) or made to exit (an injected exit with
#                code 1); counts how often goodput.json names that rank as the failure.
#   orphans:     N runs of 2 ranks + 1 spare; after training starts the launcher is killed with
#                SIGKILL; counts the runs where no process of the job is left 10 s later.
#   live:        N runs of 4 data-parallel ranks with resilience.mode = "live" (docs/resilience.md);
#                after training starts one random rank is aborted, segfaulted or killed; counts
#                the runs that finish with exit 0, no restart, and that rank's live recovery
#                recorded (healed, with steps_short_handed not negative, or the run ended before
#                its replacement could join).
#   hsdp:        the same with HSDP 2x2 (two replicas of two ranks): the failed rank's replica
#                partner goes with it (peer-lost), and both recoveries are recorded.
#   tp, pp, cp:  the same with DDP 2 around tensor, pipeline or context parallelism 2 (two
#                replicas of two ranks).
#   moe:         hsdp's layout with a mixture-of-experts model, its experts split over each
#                replica's two ranks (expert_parallel 2), sigmoid router biases.
#   heal:        N live runs where a random rank crashes at a random step and its first
#                replacement fails while healing (--inject heal-fail, at a random point of
#                form, transfer or warmup, killed
#                or stopped); counts the runs that finish with exit 0, no restart, the first
#                replacement discarded and the second one healed.
#   frozen:      N live HSDP 2x2 runs where, after training starts, both ranks of a random replica
#                are stopped (SIGSTOP from outside, as a frozen node's): counts the runs that
#                finish with exit 0, no restart, one rank's recovery of kind hang and the other's
#                peer-lost (either order: when one stops first, the other waits for it in a
#                collective and the records name the first; stopped at once, neither leaves a
#                record and the two silent ranks of one replica are the culprit).
#   frozen2:     N live DDP 4 runs where, after training starts, two random ranks (two replicas)
#                are stopped at once from outside (two frozen nodes'): counts the runs that
#                finish with exit 0, no restart, and both ranks' recoveries of kind hang (neither
#                leaves a flight record, the other two train on, both are taken out together).
#   spike:       N live HSDP 2x2 runs where a random rank's loss spikes at a random step (skipped)
#                and a random rank is killed there, after the spike's record and before the
#                ranks confirm it (--inject crash:...:at=spike); counts the runs that finish with
#                exit 0, no restart, one spike record for that step, and the killed rank's and its
#                replica partner's recoveries.
#   between:     N live runs (DDP 4 or HSDP 2x2 at random) where a random rank is killed between
#                two steps: in a random evaluation, once it evaluated its windows (--inject
#                crash:...:at=eval), or inside a random checkpoint save, after writing its files
#                (--inject kill-in-ckpt); counts the runs that finish with exit 0, no restart, the
#                killed rank's recovery (and its replica partner's) recorded, that evaluation and
#                save done again, and every evaluation logged exactly once.
#   nodes:       N live runs across nodes (network namespaces and an etcd, as the multi-node
#                suite makes them; needs root): each runs one of the multi-node suite's live cases
#                at random (a rank killed, a rank hung, a whole node lost, cut off or stopped with a
#                spare to take its place or with none), which checks no restart, the unfailed run's trajectory and the recovery
#                records; counts the runs that pass.
# Usage: bench/supervision_faults.sh [attribution|orphans|live|hsdp|tp|pp|cp|moe|heal|frozen|frozen2|spike|between|nodes|all] [N]
#        (default: all 50; `all` leaves out nodes, which needs root)
# Needs build/tenax (scripts/build) and python3. Prints one line per run and a summary; exits 1
# when any run went wrong.
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
runs="${2:-50}"
bin="$PWD/build/tenax"
work="$(mktemp -d /tmp/tenax-faults-XXXXXX)"
trap 'rm -rf "$work"' EXIT

train() {  # train args for a run named $1 in $work
  echo "train --defaults --set data.source=synthetic --set model.preset=debug-tiny --set training.seq_len=32" \
       "--set data.synthetic.train_tokens=200000 --set data.synthetic.vocab_size=32" \
       "--set data.synthetic.order=1 --set metrics.eval_interval=0 --set metrics.progress=never" \
       "--set training.steps=100000 --set training.local_batch_size=2 --set checkpoint.interval=50" \
       "--set job.dump_folder=$work --set job.name=$1"
}

json() {  # json FILE PYTHON-EXPRESSION-ON-j
  python3 -c "import json,sys
try: j=json.load(open(sys.argv[1]))
except Exception: sys.exit(1)
print($2)" "$1" 2>/dev/null
}

# Waits until every rank of the status file trained a step; prints the pid of rank $2.
wait_training() {
  local status="$1" rank="$2"
  for _ in $(seq 1 1500); do
    local pid
    pid=$(json "$status" "j['ranks'][$rank]['pid'] if all(r['phase']=='train' and r['alive'] for r in j['ranks']) else ''")
    if [ -n "$pid" ] && [ "$pid" != "-1" ]; then echo "$pid"; return 0; fi
    sleep 0.02
  done
  return 1
}

attribution() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local rank=$((RANDOM % 4)) how
    case $((RANDOM % 4)) in 0) how=ABRT ;; 1) how=SEGV ;; 2) how=KILL ;; 3) how=exit ;; esac
    local name="attr$i" status="$work/attr$i-status.json" inject=""
    [ "$how" = exit ] && inject="--inject crash:rank=$rank:time=4:how=exit"
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 --max-restarts 0 --status-file "$status" $inject -- \
      $(train "$name") \
      > "$work/$name.log" 2>&1 &
    local launcher=$!
    if [ "$how" != exit ]; then
      local pid
      pid=$(wait_training "$status" "$rank") || { echo "run $i: training never started"; kill -9 $launcher; continue; }
      kill -s "$how" "$pid"
    fi
    wait $launcher
    local got
    got=$(json "$work/$name/goodput.json" "j['failures'][0]['rank']")
    if [ "$got" = "$rank" ]; then ok=$((ok + 1)); verdict=ok; else verdict="WRONG (named $got)"; fi
    echo "attribution run $i: rank $rank $how -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "attribution: $ok of $runs named the failed rank"
  [ "$ok" -eq "$runs" ]
}

orphans() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local name="orph$i" status="$work/orph$i-status.json"
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 2 --spares 1 --status-file "$status" -- $(train "$name") \
      > "$work/$name.log" 2>&1 &
    local launcher=$!
    wait_training "$status" 0 > /dev/null || { echo "run $i: training never started"; kill -9 $launcher; continue; }
    kill -9 $launcher
    wait $launcher 2> /dev/null
    local left=""
    for _ in $(seq 1 500); do  # up to 10 s
      left=$(pgrep -f "job[.]name=$name( |$)" || true)
      [ -z "$left" ] && break
      sleep 0.02
    done
    if [ -z "$left" ]; then ok=$((ok + 1)); echo "orphans run $i: none left"; else
      echo "orphans run $i: LEFT BEHIND: $left"; pkill -9 -f "job[.]name=$name( |$)"; fi
    rm -rf "${work:?}/$name"
  done
  echo "orphans: $ok of $runs left no process behind"
  [ "$ok" -eq "$runs" ]
}

live() {  # live [LABEL [SHARD [INNER-AXIS [MORE]]]]: 4 ranks as replicas of SHARD x 2 (INNER-AXIS
          # given: tensor_parallel, pipeline_parallel or context_parallel) or SHARD ranks (live:
          # DDP 4, hsdp 2: HSDP 2x2, tp 1 tensor_parallel: DDP 2 x TP 2); MORE: train flags
  local label="${1:-live}" shard="${2:-1}" axis="${3:-}" ok=0 k inner="${4:-}"
  k=$shard
  if [ -n "$axis" ]; then k=$((shard * 2)); inner+=" --set parallelism.$axis=2"; fi
  [ "$axis" = pipeline_parallel ] && inner+=" --set parallelism.microbatches=2"
  for i in $(seq 1 "$runs"); do
    local rank=$((RANDOM % 4)) how name="$label$i" status="$work/$label$i-status.json"
    case $((RANDOM % 3)) in 0) how=ABRT ;; 1) how=SEGV ;; 2) how=KILL ;; esac
    # shellcheck disable=SC2046,SC2086
    "$bin" launch --nproc-per-node 4 --status-file "$status" -- $(train "$name") \
      --set training.steps=400 --set parallelism.data_parallel_replicate=$((4 / k)) \
      --set parallelism.data_parallel_shard="$shard" $inner --set resilience.mode=live \
      > "$work/$name.log" 2>&1 &
    local launcher=$!
    local pid
    pid=$(wait_training "$status" "$rank") || { echo "run $i: training never started"; kill -9 $launcher; continue; }
    kill -s "$how" "$pid"
    wait $launcher
    local code=$?
    # The failed rank's recovery first, then those of the ranks of its replica that went with it
    # (HSDP: peer-lost); each healed, or the run ended before its replacement could join.
    local got want
    # Fields apart by '|': an outcome ("discarded while healing: ...") has spaces in it.
    got=$(json "$work/$name/goodput.json" "'%d|%s|%s' % (len(j['generations']), ','.join('%d:%s' % (r['rank'], r['kind'] if r['kind'] == 'peer-lost' else 'own') for r in j['live_recoveries']), ','.join(('healed' if r['steps_short_handed'] >= 0 else 'healed-negative-steps_short_handed=%d' % r['steps_short_handed']) if r['healed_at_s'] >= 0 else r.get('outcome', 'open') for r in j['live_recoveries']))")
    want="1|$rank:own"
    for r in $(seq $((rank / k * k)) $((rank / k * k + k - 1))); do
      [ "$r" = "$rank" ] || want+=",$r:peer-lost"
    done
    # (A healed record counts the steps the others trained short-handed from the step of the state
    # its replacement received: never negative, which a beat's stale step once made it.)
    if [ "$code" = 0 ] && [ "${got%|*}" = "$want" ] && [[ "$got" != *negative* ]]; then ok=$((ok + 1)); verdict="ok (${got##*|})"; else
      verdict="WRONG (exit $code; generations, recoveries, outcomes: $got; wanted $want)"; fi
    echo "$label run $i: rank $rank $how -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "$label: $ok of $runs trained on without a restart and recorded the failed rank (and its replica)"
  [ "$ok" -eq "$runs" ]
}

heal() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local rank=$((RANDOM % 4)) step=$((5 + RANDOM % 30)) at how name="heal$i"
    case $((RANDOM % 3)) in 0) at=form ;; 1) at=transfer ;; 2) at=warmup ;; esac
    case $((RANDOM % 2)) in 0) how=kill ;; 1) how=stop ;; esac
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 --hang-timeout 4 \
      --inject "crash:rank=$rank:step=$step,heal-fail:rank=$rank:at=$at:how=$how" -- \
      $(train "$name") --set training.steps=400 --set parallelism.data_parallel_replicate=4 \
      --set parallelism.data_parallel_shard=1 --set resilience.mode=live \
      > "$work/$name.log" 2>&1
    local code=$? got
    got=$(json "$work/$name/goodput.json" "'%d %d %s %s' % (len(j['generations']), len(j['live_recoveries']), j['live_recoveries'][0].get('outcome', 'open').startswith('discarded while healing'), j['live_recoveries'][-1]['healed_at_s'] >= 0)")
    if [ "$code" = 0 ] && [ "$got" = "1 2 True True" ]; then ok=$((ok + 1)); verdict=ok; else
      verdict="WRONG (exit $code; generations, recoveries, first discarded, second healed: $got)"; fi
    echo "heal run $i: rank $rank at step $step, replacement fails at=$at how=$how -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "heal: $ok of $runs discarded the failed replacement, healed the next and never restarted"
  [ "$ok" -eq "$runs" ]
}

frozen() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local replica=$((RANDOM % 2)) name="frozen$i" status="$work/frozen$i-status.json"
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 --hang-timeout 4 --status-file "$status" -- $(train "$name") \
      --set training.steps=400 --set parallelism.data_parallel_replicate=2 \
      --set parallelism.data_parallel_shard=2 --set resilience.mode=live \
      > "$work/$name.log" 2>&1 &
    local launcher=$! a b
    a=$(wait_training "$status" $((2 * replica))) && b=$(wait_training "$status" $((2 * replica + 1))) ||
      { echo "run $i: training never started"; kill -9 $launcher; continue; }
    kill -STOP "$a" "$b"
    wait $launcher
    local code=$? got
    got=$(json "$work/$name/goodput.json" "'%d|%s' % (len(j['generations']), ','.join('%d:%s' % (r['rank'], r['kind']) for r in sorted(j['live_recoveries'], key=lambda r: r['rank'])))")
    local r0=$((2 * replica)) r1=$((2 * replica + 1))
    if [ "$code" = 0 ] && { [ "$got" = "1|$r0:hang,$r1:peer-lost" ] || [ "$got" = "1|$r0:peer-lost,$r1:hang" ]; }; then
      ok=$((ok + 1)); verdict=ok; else
      verdict="WRONG (exit $code; generations, recoveries: $got)"; fi
    echo "frozen run $i: replica $replica (ranks $r0,$r1) stopped -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "frozen: $ok of $runs took the stopped replica out and trained on without a restart"
  [ "$ok" -eq "$runs" ]
}

frozen2() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local r0=$((RANDOM % 4)) r1 name="frozen2_$i" status="$work/frozen2_$i-status.json"
    r1=$(( (r0 + 1 + RANDOM % 3) % 4 ))
    if [ "$r1" -lt "$r0" ]; then local t=$r0; r0=$r1; r1=$t; fi
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 --hang-timeout 4 --status-file "$status" -- $(train "$name") \
      --set training.steps=400 --set parallelism.data_parallel_replicate=4 \
      --set resilience.mode=live > "$work/$name.log" 2>&1 &
    local launcher=$! a b
    a=$(wait_training "$status" "$r0") && b=$(wait_training "$status" "$r1") ||
      { echo "run $i: training never started"; kill -9 $launcher; continue; }
    kill -STOP "$a" "$b"
    wait $launcher
    local code=$? got
    got=$(json "$work/$name/goodput.json" "'%d|%s' % (len(j['generations']), ','.join('%d:%s' % (r['rank'], r['kind']) for r in sorted(j['live_recoveries'], key=lambda r: r['rank'])))")
    if [ "$code" = 0 ] && [ "$got" = "1|$r0:hang,$r1:hang" ]; then
      ok=$((ok + 1)); verdict=ok; else
      verdict="WRONG (exit $code; generations, recoveries: $got)"; fi
    echo "frozen2 run $i: ranks $r0,$r1 stopped -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "frozen2: $ok of $runs took both stopped replicas out and trained on without a restart"
  [ "$ok" -eq "$runs" ]
}

spike() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local rank=$((RANDOM % 4)) spiker=$((RANDOM % 4)) step=$((10 + RANDOM % 30)) name="spike$i"
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 \
      --inject "spike:rank=$spiker:step=$step,crash:rank=$rank:step=$step:at=spike" -- \
      $(train "$name") --set training.steps=60 --set parallelism.data_parallel_replicate=2 \
      --set parallelism.data_parallel_shard=2 --set resilience.mode=live \
      --set training.loss_spike_factor=3 --set training.on_loss_spike=skip \
      > "$work/$name.log" 2>&1
    local code=$? got want partner=$((rank ^ 1))
    got=$(json "$work/$name/goodput.json" "'%d %s %s' % (len(j['generations']), ','.join(str(s['step']) for s in j['loss_spikes']), ','.join('%d:%s' % (r['rank'], r['kind']) for r in sorted(j['live_recoveries'], key=lambda r: r['rank'])))")
    want="1 $step $(( rank < partner ? rank : partner )):$([ $rank -lt $partner ] && echo crash || echo peer-lost),$(( rank < partner ? partner : rank )):$([ $rank -lt $partner ] && echo peer-lost || echo crash)"
    if [ "$code" = 0 ] && [ "$got" = "$want" ]; then ok=$((ok + 1)); verdict=ok; else
      verdict="WRONG (exit $code; generations, spike steps, recoveries: $got; wanted $want)"; fi
    echo "spike run $i: rank $spiker spikes at step $step, rank $rank killed there -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "spike: $ok of $runs recovered live from a failure at a loss spike, one record each"
  [ "$ok" -eq "$runs" ]
}

between() {
  local ok=0
  for i in $(seq 1 "$runs"); do
    local rank=$((RANDOM % 4)) step=$((5 * (2 + RANDOM % 10))) name="between$i" layout where inject kind
    local replicate=4 shard=1 want
    if ((RANDOM % 2)); then replicate=2; shard=2; fi
    layout="DDP 4"; [ "$shard" = 2 ] && layout="HSDP 2x2"
    if ((RANDOM % 2)); then where="evaluation"; inject="crash:rank=$rank:step=$step:at=eval"; kind=crash
    else where="save"; inject="kill-in-ckpt:rank=$rank:step=$step"; kind=crash-in-checkpoint; fi
    # shellcheck disable=SC2046
    "$bin" launch --nproc-per-node 4 --inject "$inject" -- \
      $(train "$name") --set training.steps=60 --set metrics.eval_interval=5 \
      --set checkpoint.interval=5 --set parallelism.data_parallel_replicate=$replicate \
      --set parallelism.data_parallel_shard=$shard --set resilience.mode=live \
      > "$work/$name.log" 2>&1
    local code=$? got partner=$((rank ^ 1)) evals again
    got=$(json "$work/$name/goodput.json" "'%d %s' % (len(j['generations']), ','.join('%d:%s' % (r['rank'], r['kind']) for r in sorted(j['live_recoveries'], key=lambda r: r['rank'])))")
    if [ "$shard" = 1 ]; then want="1 $rank:$kind"
    elif [ "$rank" -lt "$partner" ]; then want="1 $rank:$kind,$partner:peer-lost"
    else want="1 $partner:peer-lost,$rank:$kind"; fi
    evals=$(python3 -c "import json,sys
steps=[json.loads(l)['step'] for l in open(sys.argv[1]) if 'val_loss' in l]
print('ok' if steps == list(range(5, 61, 5)) else steps)" "$work/$name/metrics.jsonl" 2>/dev/null)
    again=$(grep -c "step $step: evaluated and saved again" "$work/$name.log")
    if [ "$code" = 0 ] && [ "$got" = "$want" ] && [ "$evals" = ok ] && [ "$again" -ge 1 ]; then
      ok=$((ok + 1)); verdict=ok
    else
      verdict="WRONG (exit $code; generations, recoveries: $got, wanted $want; evaluations: $evals; done again: $again)"
    fi
    echo "between run $i: $layout, rank $rank killed in step $step's $where -> $verdict"
    rm -rf "${work:?}/$name"
  done
  echo "between: $ok of $runs recovered live from a failure in an evaluation or a save, each done again once"
  [ "$ok" -eq "$runs" ]
}

nodes() {
  local ok=0
  local cases=(LiveRecoveryAcrossNodesTrainsThroughAKilledRank LiveRecoveryAcrossNodesKillsAHungRankAlone
               LiveRecoveryFromALostNodeTheSpareTakesItsPlace
               LiveRecoveryFromALostNodeWithNoSpareTrainsToTheEndShortHanded
               LiveRecoveryFromLosingNode0TheSpareTakesItsPlace
               LiveRecoveryFromLosingNode0WithNoSpareNode1TrainsToTheEnd
               LiveRecoveryFromLosingANodeRankTwiceTheOtherSpareTakesItsPlace
               LiveRecoveryFromACutOffNodeTheSpareTakesItsPlace
               LiveRecoveryFromAStoppedNodeTheSpareTakesItsPlace)
  for i in $(seq 1 "$runs"); do
    local c=${cases[$((RANDOM % ${#cases[@]}))]}
    if build/tests/multinode_live_e2e_test --gtest_filter="MultiNodeLive.$c" > "$work/nodes$i.log" 2>&1; then
      ok=$((ok + 1)); verdict="ok ($(grep -o 'healed [0-9.]* s after the failure\|full quorum again [0-9.]* s' "$work/nodes$i.log" | head -1))"
    else
      verdict="WRONG: $(grep -m3 'Failure\|Expected\|Which is' "$work/nodes$i.log" | tr '\n' ' ')"
    fi
    echo "nodes run $i: $c -> $verdict"
  done
  echo "nodes: $ok of $runs live runs across nodes trained on without a restart and recorded it"
  [ "$ok" -eq "$runs" ]
}

# HSDP 2x2 with a mixture of experts split over each replica's two ranks, sigmoid router biases.
moe="--set model.preset=debug-moe --set parallelism.expert_parallel=2 --set model.moe_router=sigmoid
  --set model.moe_bias_update_rate=0.01"

status=0
case "$what" in
  attribution) attribution || status=1 ;;
  orphans) orphans || status=1 ;;
  live) live || status=1 ;;
  hsdp) live hsdp 2 || status=1 ;;
  tp) live tp 1 tensor_parallel || status=1 ;;
  pp) live pp 1 pipeline_parallel || status=1 ;;
  cp) live cp 1 context_parallel || status=1 ;;
  moe) live moe 2 "" "$moe" || status=1 ;;
  heal) heal || status=1 ;;
  frozen) frozen || status=1 ;;
  frozen2) frozen2 || status=1 ;;
  spike) spike || status=1 ;;
  between) between || status=1 ;;
  nodes) nodes || status=1 ;;
  all) attribution || status=1; orphans || status=1; live || status=1; live hsdp 2 || status=1
       live tp 1 tensor_parallel || status=1; live pp 1 pipeline_parallel || status=1
       live cp 1 context_parallel || status=1; live moe 2 "" "$moe" || status=1
       heal || status=1; frozen || status=1; frozen2 || status=1; spike || status=1
       between || status=1 ;;
  *) echo "usage: $0 [attribution|orphans|live|hsdp|tp|pp|cp|moe|heal|frozen|frozen2|spike|between|nodes|all] [N]" >&2; exit 2 ;;
esac
exit $status
