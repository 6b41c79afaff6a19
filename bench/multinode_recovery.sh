#!/usr/bin/env bash
# Node loss to detection, and detection to training again, on several nodes of 2 ranks (each node
# a host in its own network namespace, etcd on the bridge, a spare node waiting; one active node
# killed whole with SIGKILL after checkpoint 8), as goodput.json records them. Needs root (the
# namespaces) and a build (scripts/build). Runs the disabled bench test of
# tests/multinode_e2e_test.cc once per node count and prints a table.
# Usage: bench/multinode_recovery.sh [RUNS] [NODES...]   (default: 3 runs of 2 and 3 nodes)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
shift || true
nodes=("$@")
[ ${#nodes[@]} -eq 0 ] && nodes=(2 3)
printf '%-6s %-6s %-4s %12s %12s\n' nodes ranks run detection_s recovery_s
for n in "${nodes[@]}"; do
  for r in $(seq 1 "$runs"); do
    line=$(TENAX_BENCH_NODES="$n" build/tests/multinode_e2e_test --gtest_also_run_disabled_tests \
      --gtest_filter='*RecoveryBench*' 2>&1 | grep '^BENCH' || true)
    if [ -z "$line" ]; then echo "nodes $n run $r: failed (run the test by hand for its output)"; continue; fi
    d=$(sed -E 's/.*detection_s=([0-9.]+).*/\1/' <<< "$line")
    v=$(sed -E 's/.*recovery_s=([0-9.]+).*/\1/' <<< "$line")
    printf '%-6s %-6s %-4s %12s %12s\n' "$n" "$((2 * n))" "$r" "$d" "$v"
  done
done
