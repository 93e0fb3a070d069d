#!/usr/bin/env bash
# Offline checks of everything that ships besides the binaries: YAML style,
# shell scripts, the Dockerfile, every Kubernetes layout rendered, validated
# against the API schemas and checked for dangling references, and the
# compose file. Running the layouts is scripts/check-k8s.sh's (the
# Kubernetes base, with probes and Services simulated) and
# scripts/check-image.sh's (the compose file under podman-compose).
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
install() {
  local sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@"
}
missing=()
need yamllint || missing+=(yamllint)
need shellcheck || missing+=(shellcheck)
need node || missing+=(nodejs)
need npm || missing+=(npm)
need kubectl || missing+=(kubernetes-client)
python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
need promtool || missing+=(prometheus)
((${#missing[@]} == 0)) || install "${missing[@]}"

echo "== yamllint"
yamllint -s -c .yamllint deploy/ .yamllint
echo "== shellcheck"
shellcheck scripts/*.sh deploy/local/*.sh bench/*.sh .ci/run
echo "== npm validators"
(cd deploy/validate && npm ci --no-audit --no-fund --loglevel=error)
echo "== Dockerfile"
deploy/validate/node_modules/.bin/dockerfile-utils lint Dockerfile
echo "Dockerfile: no problems"
echo "== Kubernetes"
for layout in overlays/cpu overlays/gpu overlays/api-auth lws; do
  printf '%s: ' "$layout"
  kubectl kustomize "deploy/k8s/$layout" | node deploy/validate/validate.mjs k8s -
  # Every ConfigMap, Secret, PVC and Service a pod names is in the render;
  # one setting for the number of workers.
  printf '%s ' "$layout"
  kubectl kustomize "deploy/k8s/$layout" | python3 deploy/validate/k8s_refs.py -
done
echo "== compose"
node deploy/validate/validate.mjs compose deploy/compose/docker-compose.yaml
echo "== monitoring"
promtool check rules deploy/monitoring/alerts.yaml
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("grafana dashboard:", len(d["panels"]), "panels")' \
  deploy/monitoring/grafana-dashboard.json
