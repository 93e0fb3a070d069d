#!/usr/bin/env bash
# Starts the Kubernetes CPU layout as an operator would and checks that it
# runs: `kubectl kustomize deploy/k8s/overlays/cpu`, then every pod of the
# render run by deploy/validate/kube_sim.py with this build's binaries, its
# startup, readiness and liveness probes applied with the kubelet's
# semantics, and Services that route only to Ready pods unless they publish
# not-ready addresses. Passes when every pod turns Ready, a forward through
# the public Service is answered, and a worker killed mid-run is restarted by
# its pod and the group serves again, with no other restart, over 60 s.
#   scripts/check-k8s.sh BUILD_DIR [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 1)); then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 64
fi
bin_dir="$(cd "$1" && pwd)"
seconds="${2:-60}"
command -v kubectl >/dev/null || {
  echo "check-k8s: kubectl missing (scripts/check-deploy.sh installs it)" >&2
  exit 1
}
render="$(mktemp /tmp/moe-k8s-render.XXXXXX.yaml)"
trap 'rm -f "$render"' EXIT
kubectl kustomize deploy/k8s/overlays/cpu >"$render"
bash client/python/gen_stubs.sh >/dev/null
PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 deploy/validate/kube_sim.py \
  --render "$render" --bin-dir "$bin_dir" --seconds "$seconds"
