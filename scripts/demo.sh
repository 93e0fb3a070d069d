#!/usr/bin/env bash
# The main job: build, start a router and two CPU workers on loopback with a
# built-in synthetic model, send real requests, print what came back.
set -euo pipefail
cd "$(dirname "$0")/.."

MOE_DEPS_TOOLS=0 bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_TESTS=OFF -DMOE_CUDA=OFF >/dev/null
cmake --build build --target moe-router moe-worker moe-cli

deploy/local/moe-local.sh --workers 2 --run 'bash scripts/demo-requests.sh' -- \
  --synthetic --hidden 1024 --inter 512 --experts 32 --top-k 4 \
  --shared-inter 1024 --layers 2 --seed 42 --threads 1
