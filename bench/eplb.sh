#!/usr/bin/env bash
# Expert-parallel load balancing, back to back in one session: a router and
# two CPU workers (--threads 1 each) serving a Zipf-skewed synthetic model
# (H=1024, I=512, E=32, k=4, --synthetic-zipf S), 64 concurrent clients
# sending 32 tokens each. First without replicas; its expert load, saved with
# `moe-cli stats --save`, then places R=4 redundant experts (EPLB) for the
# second run. Prints, per run, the most loaded worker's rows over the mean
# per step (averaged over the measured steps), tokens/s and errors, then the
# bits of one request compared between the two. A third run starts with
# the replicas on the coldest experts (the first run's load reversed: as if
# the skew had moved) and --rebalance-every-steps 4 under the same load,
# printing the per-second worker max/mean as live rebalancing catches up,
# its errors, and its bits against the first run.
#   bench/eplb.sh [BUILD_DIR] [SECONDS] [ZIPF] [R]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
seconds="${2:-10}"
zipf="${3:-1.0}"
redundant="${4:-4}"
model=(--synthetic --hidden 1024 --inter 512 --experts 32 --top-k 4
       --synthetic-zipf "$zipf" --threads 1)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {  # name, extra router flags...
  local name="$1"; shift
  # Warm up, zero the stats, measure, save the stats and one request's y.
  deploy/local/moe-local.sh --build-dir "$build" --workers 2 --port 0 --run \
    "\"\$MOE_BIN/client/moe-loadtest\" --target \"\$MOE_TARGET\" -c 64 --tokens 32 -z 2s >/dev/null &&
     \"\$MOE_BIN/client/moe-cli\" stats --target \"\$MOE_TARGET\" --reset >/dev/null &&
     \"\$MOE_BIN/client/moe-loadtest\" --target \"\$MOE_TARGET\" -c 64 --tokens 32 \
       -z ${seconds}s --server-timing --format json > $out/$name.json &&
     \"\$MOE_BIN/client/moe-cli\" stats --target \"\$MOE_TARGET\" --save $out/$name.stats.json >/dev/null &&
     \"\$MOE_BIN/client/moe-cli\" forward --target \"\$MOE_TARGET\" --random 256 \
       --output $out/$name.y.safetensors >/dev/null" \
    -- "${model[@]}" "$@" >/dev/null
}
run plain
run replicas --redundant-experts "$redundant" --expert-load "$out/plain.stats.json"

python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
stats = json.load(open(f"{d}/plain.stats.json"))
for s in stats:
    s["tokens_per_expert"] = list(reversed(s["tokens_per_expert"]))
json.dump(stats, open(f"{d}/reversed.json", "w"))
PY
deploy/local/moe-local.sh --build-dir "$build" --workers 2 --port 0 --run \
  "\"\$MOE_BIN/client/moe-loadtest\" --target \"\$MOE_TARGET\" -c 64 --tokens 32 \
     -z ${seconds}s --no-retry --format json > $out/live.json 2>/dev/null &
   for t in \$(seq 1 ${seconds}); do
     sleep 1
     \"\$MOE_BIN/client/moe-cli\" stats --target \"\$MOE_TARGET\" --reset |
       sed -n 's/.*per step max\/mean \(.*\)/\1/p' | sed \"s/^/t=\${t}s /\" >> $out/live.timeline
   done
   wait
   \"\$MOE_BIN/client/moe-cli\" forward --target \"\$MOE_TARGET\" --random 256 \
     --output $out/live.y.safetensors >/dev/null" \
  -- "${model[@]}" --redundant-experts "$redundant" \
     --expert-load "$out/reversed.json" --rebalance-every-steps 4 >/dev/null

python3 - "$out" "$zipf" "$redundant" <<'PY'
import json, sys
d, zipf, R = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {}
for name, label in (("plain", "no replicas"), ("replicas", f"R={R}       ")):
    r = json.load(open(f"{d}/{name}.json"))
    s = json.load(open(f"{d}/{name}.stats.json"))[0]
    imb = float(s["worker_max_over_mean"])
    rows[name] = (r["tokens_per_s"], imb)
    print(f"zipf {zipf}, {label}: worker max/mean {imb:.3f} per step "
          f"(rows per worker {s['rows_per_worker']}), expert max/mean "
          f"{float(s['max_over_mean']):.2f}, {r['tokens_per_s']:8.1f} tokens/s, "
          f"p50 {r['latency_ms']['p50']:6.1f} ms, errors {r['errors']}")
    st = r.get("server_stage_us", {})
    print(f"    server stages per step (us, slowest worker): " +
          ", ".join(f"{k} {v:.0f}" for k, v in st.items()))
(t0, i0), (t1, i1) = rows["plain"], rows["replicas"]
print(f"imbalance {i0:.3f} -> {i1:.3f}; tokens/s x{t1 / t0:.2f} "
      f"(the imbalance cost: x{i0 / i1:.2f} at most)")
y0 = open(f"{d}/plain.y.safetensors", "rb").read()
y1 = open(f"{d}/replicas.y.safetensors", "rb").read()
print("one request's y, bit for bit:", "identical" if y0 == y1 else "DIFFERENT")
live = json.load(open(f"{d}/live.json"))
timeline = open(f"{d}/live.timeline").read().split("\n")
print(f"live rebalancing from replicas on the coldest experts, worker max/mean "
      f"per second: {', '.join(t for t in timeline if t)}")
y2 = open(f"{d}/live.y.safetensors", "rb").read()
print(f"live: {live['tokens_per_s']:.1f} tokens/s, {live['requests']} requests, "
      f"errors {live['errors']} (no retries); y bit for bit: "
      f"{'identical' if y2 == y0 else 'DIFFERENT'}")
PY
