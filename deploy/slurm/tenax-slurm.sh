#!/usr/bin/env bash
# What tenax.sbatch and tenax-spare.sbatch share (sourced by both; deploy/slurm/README.md): the
# job's settings, read once here from TENAX_* and SLURM_* variables, the job's state folder on
# shared storage, the etcd members and their certificates, and the command that starts one node
# agent (`tenax_slurm agent`, run by srun on each node).
#
# Settings (environment variables; sbatch passes them on with its default --export=ALL):
#   TENAX              the tenax binary, on every node (default: tenax in PATH)
#   TENAX_TRAIN        the command the ranks run, e.g. "train --config /shared/llama3_8b.toml"
#                      (words split on spaces; required)
#   TENAX_NPROC        ranks per node (default: SLURM_GPUS_ON_NODE, else 1)
#   TENAX_NNODES       active nodes; the allocation's other nodes are spare nodes
#                      (default: the allocation's node count minus TENAX_SPARES)
#   TENAX_SPARES       spare nodes in the allocation when TENAX_NNODES is not given (default 1)
#   TENAX_MIN_SPARES   keep this many spare nodes: when failures leave fewer, each missing one is
#                      asked of Slurm as a tenax-spare.sbatch job (default 0: never)
#   TENAX_DRAIN        1: drain the nodes tenax stops trusting (needs Slurm operator rights);
#                      0 (default): leave them
#   TENAX_ETCD         host:port[,host:port...] of an existing etcd (then also TENAX_ETCD_CA,
#                      TENAX_ETCD_CERT, TENAX_ETCD_KEY for TLS); default: the job starts its own
#   TENAX_ETCD_MEMBERS members of the job's own etcd, on the allocation's first nodes (default: 3
#                      when the allocation has 3 nodes or more, else 1)
#   TENAX_ETCD_PORT    the job's etcd client port (peer port: one above; default 23790)
#   TENAX_STATE_ROOT   where job folders go, on storage every node sees (default:
#                      $SLURM_SUBMIT_DIR/tenax-slurm); the job's is <root>/<job id>
#   TENAX_SOCKET_IFNAME the network interface the ranks' Gloo uses (default: the one that
#                      routes to etcd's first member)
#   TENAX_LAUNCH_ARGS  more `tenax launch` flags, e.g. "--rdzv-lease 10 --hang-timeout 600"
set -euo pipefail

tenax_die() {
  echo "tenax-slurm: $*" >&2
  exit 2
}

# The address Slurm reaches node $1 at (its NodeAddr: the node name itself on most clusters).
tenax_node_addr() {
  local addr
  addr=$(scontrol show node "$1" -o | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
  echo "${addr:-$1}"
}

# Settings every part of the job needs, with defaults; exported for the srun steps and for the
# spare jobs that the agents submit (they inherit this environment).
tenax_settings() {
  : "${TENAX_TRAIN:?set TENAX_TRAIN to the command the ranks run, e.g. \"train --config c.toml\"}"
  export TENAX=${TENAX:-tenax}
  command -v "$TENAX" >/dev/null || tenax_die "TENAX=$TENAX is not an executable; set TENAX to the tenax binary's path (on storage every node sees)"
  export TENAX_NPROC=${TENAX_NPROC:-${SLURM_GPUS_ON_NODE:-1}}
  export TENAX_ETCD_PORT=${TENAX_ETCD_PORT:-23790}
  export TENAX_DRAIN=${TENAX_DRAIN:-0}
  export TENAX_STATE_ROOT=${TENAX_STATE_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}/tenax-slurm}
}

# The main job's folder on shared storage and its job id for tenax (the spare jobs join it).
tenax_main_job() {
  export TENAX_JOB_ID=${TENAX_JOB_ID:-tenax-$SLURM_JOB_ID}
  export TENAX_STATE=$TENAX_STATE_ROOT/$TENAX_JOB_ID
  mkdir -p "$TENAX_STATE"
}

# A CA, a server certificate for the etcd members' addresses and a client certificate for the
# agents, in $TENAX_STATE/tls (keys readable by the job's user only).
tenax_certificates() {
  local t=$TENAX_STATE/tls sans=$1
  mkdir -p "$t" && chmod 700 "$t"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout "$t/ca.key" -out "$t/ca.crt" -days 60 \
    -subj "/CN=tenax-$TENAX_JOB_ID-ca" 2>/dev/null
  # etcd's gateway dials its own gRPC port with the server certificate, hence clientAuth too.
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"$t/server.ext"
  printf 'extendedKeyUsage=clientAuth\n' >"$t/client.ext"
  local who
  for who in server client; do
    openssl req "${ec[@]}" -keyout "$t/$who.key" -out "$t/$who.csr" -subj "/CN=tenax-$who" 2>/dev/null
    openssl x509 -req -in "$t/$who.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" -CAcreateserial \
      -out "$t/$who.crt" -days 60 -extfile "$t/$who.ext" 2>/dev/null
  done
  chmod 600 "$t"/*.key
}

# Starts the job's etcd members on the allocation's first nodes (srun steps beside the agents),
# waits until each serves clients, and exports TENAX_ETCD and its TLS files.
TENAX_ETCD_PIDS=()
tenax_start_etcd() {
  local nodes=("$@") members=${TENAX_ETCD_MEMBERS:-}
  if [ -z "$members" ]; then
    members=1
    ((${#nodes[@]} >= 3)) && members=3
  fi
  ((members <= ${#nodes[@]})) || tenax_die "TENAX_ETCD_MEMBERS=$members but the allocation has ${#nodes[@]} node(s)"
  command -v "${TENAX_ETCD_BIN:-etcd}" >/dev/null || tenax_die "etcd not found: install etcd-server (Debian) on the nodes, set TENAX_ETCD_BIN, or give an existing cluster in TENAX_ETCD"
  local i addr cluster="" endpoints="" sans="DNS:localhost,IP:127.0.0.1" addrs=()
  local c=$TENAX_ETCD_PORT p=$((TENAX_ETCD_PORT + 1))
  for ((i = 0; i < members; i++)); do
    addr=$(tenax_node_addr "${nodes[$i]}")
    addrs+=("$addr")
    cluster+="${cluster:+,}m$i=https://$addr:$p"
    endpoints+="${endpoints:+,}$addr:$c"
    if [[ "$addr" =~ ^[0-9.]+$ ]]; then sans+=",IP:$addr"; else sans+=",DNS:$addr"; fi
    [ "$addr" = "${nodes[$i]}" ] || sans+=",DNS:${nodes[$i]}"
  done
  tenax_certificates "$sans"
  local t=$TENAX_STATE/tls
  for ((i = 0; i < members; i++)); do
    addr=${addrs[$i]}
    srun --overlap -N1 -n1 -w "${nodes[$i]}" --kill-on-bad-exit=0 \
      --output="$TENAX_STATE/etcd-m$i.log" "${TENAX_ETCD_BIN:-etcd}" --name "m$i" \
      --data-dir "$TENAX_STATE/etcd-m$i.data" \
      --listen-client-urls "https://$addr:$c" --advertise-client-urls "https://$addr:$c" \
      --listen-peer-urls "https://$addr:$p" --initial-advertise-peer-urls "https://$addr:$p" \
      --initial-cluster "$cluster" --initial-cluster-state new \
      --initial-cluster-token "$TENAX_JOB_ID" --logger zap --log-outputs stderr \
      --client-cert-auth --trusted-ca-file "$t/ca.crt" --cert-file "$t/server.crt" \
      --key-file "$t/server.key" --peer-client-cert-auth --peer-trusted-ca-file "$t/ca.crt" \
      --peer-cert-file "$t/server.crt" --peer-key-file "$t/server.key" &
    TENAX_ETCD_PIDS+=($!)
  done
  local tries
  for ((i = 0; i < members; i++)); do
    for ((tries = 0; ; tries++)); do
      grep -q "serving client traffic\|ready to serve client requests" "$TENAX_STATE/etcd-m$i.log" 2>/dev/null && break
      if ! kill -0 "${TENAX_ETCD_PIDS[$i]}" 2>/dev/null || ((tries > 1200)); then
        tail -5 "$TENAX_STATE/etcd-m$i.log" >&2 || true
        tenax_die "etcd member m$i on ${nodes[$i]} did not start (log: $TENAX_STATE/etcd-m$i.log)"
      fi
      sleep 0.1
    done
  done
  export TENAX_ETCD=$endpoints TENAX_ETCD_CA=$t/ca.crt TENAX_ETCD_CERT=$t/client.crt TENAX_ETCD_KEY=$t/client.key
}

tenax_stop_etcd() {
  local pid
  for pid in "${TENAX_ETCD_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${TENAX_ETCD_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# Starts one node agent on node $1 as a step of this allocation, in the background; its output
# goes to $TENAX_STATE/agent-<node>-<slurm job>.log (named here: srun's %N is the host name).
# The step has the node's CPUs (and GPUs): the agent's ranks are its children.
tenax_start_agent() {
  local gpus=()
  [ -n "${SLURM_GPUS_ON_NODE:-}" ] && gpus=(--gpus="$SLURM_GPUS_ON_NODE")
  srun --overlap -N1 -n1 -w "$1" --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" "${gpus[@]}" \
    --kill-on-bad-exit=0 --output="$TENAX_STATE/agent-$1-%j.log" \
    bash "$TENAX_SLURM_DIR/tenax-slurm.sh" agent &
}

# On the node (srun's task): the agent itself.
tenax_agent() {
  local first=${TENAX_ETCD%%,*}
  local ifname=${TENAX_SOCKET_IFNAME:-}
  if [ -z "$ifname" ] && command -v ip >/dev/null; then
    local addr=${first%:*}
    [[ "$addr" =~ ^[0-9.]+$ ]] || addr=$(getent ahostsv4 "$addr" | awk '{print $1; exit}')
    ifname=$(ip -o route get "$addr" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -1)
    # etcd's first member on this very node: the route is loopback; take the interface that
    # holds the address.
    if [ "$ifname" = lo ]; then
      ifname=$(ip -o addr show to "$addr" 2>/dev/null | awk '{print $2; exit}')
    fi
  fi
  [ -n "$ifname" ] && export GLOO_SOCKET_IFNAME=$ifname
  local tls=()
  [ -n "${TENAX_ETCD_CA:-}" ] && tls=(--rdzv-ca "$TENAX_ETCD_CA" --rdzv-cert "$TENAX_ETCD_CERT" --rdzv-key "$TENAX_ETCD_KEY")
  local scheduler=()
  ((TENAX_DRAIN)) && scheduler+=(--drain-bad-nodes)
  if ((${TENAX_MIN_SPARES:-0} > 0)); then
    scheduler+=(--min-spares "$TENAX_MIN_SPARES" --spare-job "$TENAX_SLURM_DIR/tenax-spare.sbatch")
  fi
  local extra=() train=()
  read -ra extra <<<"${TENAX_LAUNCH_ARGS:-}"
  read -ra train <<<"$TENAX_TRAIN"
  exec "$TENAX" launch --nproc-per-node "$TENAX_NPROC" --nnodes "$TENAX_NNODES" \
    --rdzv "etcd://$TENAX_ETCD" --job-id "$TENAX_JOB_ID" "${tls[@]}" "${scheduler[@]}" \
    "${extra[@]}" -- "${train[@]}"
}

# Waits for the agents' steps; 0 when any agent saw the job finish (an agent exits 0 only then;
# a node tenax lost exits otherwise), else the first agent's code.
tenax_wait_agents() {
  local pid code first="" ok=0
  for pid in "$@"; do
    code=0
    wait "$pid" || code=$?
    if ((code == 0)); then ok=1; elif [ -z "$first" ]; then first=$code; fi
  done
  ((ok)) && return 0
  return "${first:-0}"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    agent) tenax_agent ;;
    *) tenax_die "usage: tenax-slurm.sh agent (run by srun from tenax.sbatch; see deploy/slurm/README.md)" ;;
  esac
fi
