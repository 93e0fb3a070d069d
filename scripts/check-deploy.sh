#!/usr/bin/env bash
# Offline checks of everything that ships besides the binaries: YAML style,
# shell scripts, the Dockerfile, every Kubernetes layout rendered and
# validated against the API schemas, and the compose file.
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
for layout in overlays/cpu overlays/gpu lws; do
  printf '%s: ' "$layout"
  kubectl kustomize "deploy/k8s/$layout" | node deploy/validate/validate.mjs k8s -
done
echo "== compose"
node deploy/validate/validate.mjs compose deploy/compose/docker-compose.yaml
