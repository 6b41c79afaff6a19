#!/usr/bin/env bash
# Prints the Secret tenax-etcd-tls (a CA, the etcd members' server certificate, the agents' client
# certificate) for etcd.yaml and tenax-job.yaml, made with openssl as deploy/slurm/ makes a job's:
#   deploy/kubernetes/make-tls-secret.sh > tls-secret.yaml && kubectl apply -f tls-secret.yaml
# NAMESPACE (default: default) sets the members' DNS names in the server certificate.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../slurm/tenax-slurm.sh
source "$here/../slurm/tenax-slurm.sh"
ns=${NAMESPACE:-default}
TENAX_STATE=$(mktemp -d)
TENAX_JOB_ID=kubernetes
trap 'rm -rf "$TENAX_STATE"' EXIT
sans="DNS:localhost,IP:127.0.0.1"
for i in 0 1 2; do
  sans+=",DNS:tenax-etcd-$i.tenax-etcd,DNS:tenax-etcd-$i.tenax-etcd.$ns.svc,DNS:tenax-etcd-$i.tenax-etcd.$ns.svc.cluster.local"
done
tenax_certificates "$sans"
echo "apiVersion: v1"
echo "kind: Secret"
echo "metadata:"
echo "  name: tenax-etcd-tls"
echo "  namespace: $ns"
echo "type: Opaque"
echo "data:"
for f in ca.crt server.crt server.key client.crt client.key; do
  echo "  $f: $(base64 -w0 "$TENAX_STATE/tls/$f")"
done
