#!/usr/bin/env bash
# The Python client's tests (client/python/tests) against the binaries of a
# build: generates the gRPC stubs, then runs pytest with real moe-router and
# moe-worker processes. Usage: scripts/python-test.sh BUILD_DIR
# BUILD_DIR holds server/moe-router, worker/moe-worker, client/... (a build
# tree) or the binaries side by side. $PYTHON picks the interpreter; by default
# the first python3 that imports grpc, google.protobuf, numpy, torch, pytest
# (Debian's /usr/bin/python3 with scripts/install-deps.sh's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# != 1)); then
  echo "usage: $0 BUILD_DIR" >&2
  exit 64
fi
MOE_BIN_DIR="$(cd "$1" && pwd)"
export MOE_BIN_DIR

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null &&
      "$p" -c 'import grpc, google.protobuf, numpy, torch, pytest' 2>/dev/null; then
      python="$p"
      break
    fi
  done
fi
if [[ -z "$python" ]]; then
  echo "python-test: no python3 imports grpc, google.protobuf, numpy, torch and pytest;" \
    "run scripts/install-deps.sh" >&2
  exit 1
fi

bash client/python/gen_stubs.sh
export PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -q -p no:cacheprovider client/python/tests
