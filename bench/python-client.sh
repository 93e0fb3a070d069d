#!/usr/bin/env bash
# Python client overhead: the async Python client (AsyncMoeClient, 64 requests
# in flight) against moe-loadtest -c 64, same size (8 tokens per request), in
# one session of a router and two CPU workers serving H=1024, I=512, E=32, k=4,
# shared 1024. Prints tokens/s of both.
#   bench/python-client.sh [BUILD_DIR] [SECONDS]
# $PYTHON: an interpreter with grpc, protobuf and numpy (default python3, else
# /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
seconds="${2:-10}"
python="${PYTHON:-python3}"
if ! "$python" -c 'import grpc, google.protobuf, numpy' 2>/dev/null; then
  python=/usr/bin/python3
fi
bash client/python/gen_stubs.sh >/dev/null
model=(--synthetic --hidden 1024 --inter 512 --experts 32 --top-k 4
       --shared-inter 1024 --threads 1)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

deploy/local/moe-local.sh --build-dir "$build" --workers 2 --port 0 --run \
  "\"\$MOE_BIN/client/moe-loadtest\" --target \"\$MOE_TARGET\" -c 64 --tokens 8 \
     -z ${seconds}s --warmup 2s --format json > $out/loadtest.json &&
   \"$python\" bench/python-client-bench.py \"\$MOE_TARGET\" -c 64 --tokens 8 \
     -z $seconds --warmup 2 > $out/python.json" \
  -- "${model[@]}" >/dev/null

"$python" - "$out" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/loadtest.json"))
p = json.load(open(f"{d}/python.json"))
for name, r in (("moe-loadtest -c 64     ", c), ("python AsyncMoeClient 64", p)):
    print(f"{name}: {r['tokens_per_s']:8.1f} tokens/s, {r['requests_per_s']:7.1f} req/s, "
          f"p50 {r['latency_ms']['p50']:7.1f} ms, p99 {r['latency_ms']['p99']:7.1f} ms, "
          f"errors {r['errors']}")
print(f"python / C++: {p['tokens_per_s'] / c['tokens_per_s']:.2f}x tokens/s")
PY
