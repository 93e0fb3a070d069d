#!/usr/bin/env bash
# Dynamic batching gain, measured with moe-loadtest in one session: a router
# and two CPU workers serving H=1024, I=512, E=32, k=4, shared 1024; 64
# concurrent clients sending 8 tokens each, with batching on (defaults) and
# off (--max-batch-tokens 8: one request per step).
#   bench/batching-gain.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
seconds="${2:-10}"
model=(--synthetic --hidden 1024 --inter 512 --experts 32 --top-k 4
       --shared-inter 1024 --threads 1)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # name, extra router flags...
  local name="$1"; shift
  deploy/local/moe-local.sh --build-dir "$build" --workers 2 --port 0 --run \
    "\"\$MOE_BIN/client/moe-loadtest\" --target \"\$MOE_TARGET\" -c 64 --tokens 8 \
       -z ${seconds}s --warmup 2s --server-timing --format json > $out/$name.json" \
    -- "${model[@]}" "$@" >/dev/null
}
run batched
# Room for every client in the queue: the run measures one request per
# step, not admission control.
run unbatched --max-batch-tokens 8 --max-queue-tokens 512

python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
on = json.load(open(f"{d}/batched.json"))
off = json.load(open(f"{d}/unbatched.json"))
for name, r in (("batching on ", on), ("batching off", off)):
    print(f"{name}: {r['tokens_per_s']:8.1f} tokens/s, {r['requests_per_s']:7.1f} req/s, "
          f"p50 {r['latency_ms']['p50']:7.1f} ms, p99 {r['latency_ms']['p99']:7.1f} ms, "
          f"{r['mean_batch_requests']:.1f} requests per step, errors {r['errors']}")
print(f"gain: {on['tokens_per_s'] / off['tokens_per_s']:.2f}x tokens/s")
PY
