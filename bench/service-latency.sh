#!/usr/bin/env bash
# One client, one request at a time, against a router with P workers on
# loopback: per (P, N) the service's p50, the server's stage table (mean us)
# with the median step's dispatch + combine,
# and two references timed in the same run: a memcpy of the request's
# activation bytes and a gRPC echo of the same payload (moe-wire-bench).
# bench/data-path.sh and bench/dist-overhead.sh call it with their layers.
#
#   bench/service-latency.sh BUILD_DIR --workers "0 1 2" --tokens "8 512"
#       [--dtype bf16|f32] [--requests R] [--worker-threads T]
#       -- ROUTER-FLAGS...
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$1"
shift
workers="0 1 2"
tokens="8 512 4096"
dtype=bf16
requests=20
worker_threads=1
while (($#)); do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --worker-threads) worker_threads="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "service-latency: unknown option $1" >&2; exit 64 ;;
  esac
done
router_args=("$@")
for b in server/moe-router worker/moe-worker client/moe-cli client/moe-loadtest bench/moe-wire-bench; do
  [[ -x "$build/$b" ]] || { echo "service-latency: build $build/$b first" >&2; exit 1; }
done
hidden=2048
for ((i = 0; i < ${#router_args[@]}; ++i)); do
  [[ "${router_args[$i]}" == --hidden ]] && hidden="${router_args[$((i + 1))]}"
done
width=4
[[ "$dtype" == bf16 || "$dtype" == f16 ]] && width=2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

printf '%-3s %-5s %10s %10s %10s %8s  %s\n' P N "p50 ms" "echo ms" "memcpy ms" "p50/echo" "server stages (mean us)"
for n in $tokens; do
  "$build/bench/moe-wire-bench" --bytes $((n * hidden * width)) --reps "$requests" \
    | tail -1 > "$out/wire.json"
  for p in $workers; do
    run="\$MOE_BIN/client/moe-loadtest --target \$MOE_TARGET -c 1 -n $requests --warmup 0s --tokens $n --dtype $dtype --server-timing --format json > $out/lt.json 2>/dev/null"
    "$here/deploy/local/moe-local.sh" --workers "$p" --port 50081 --build-dir "$build" \
      --worker-threads "$worker_threads" --run "$run" -- "${router_args[@]}" >/dev/null 2>&1
    python3 - "$out/lt.json" "$out/wire.json" "$p" "$n" <<'PY'
import json, sys
lt, wire = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
p, n = sys.argv[3], sys.argv[4]
p50, echo, mc = lt["latency_ms"]["p50"], wire["echo_rtt_ms"], wire["memcpy_ms"]
st = lt.get("server_stage_us", {})
# The router's stages, then the critical worker's own clock (w_*).
keys = ["queue", "route", "plan", "dispatch", "experts", "combine", "shared",
        "wire", "total", "w_decode", "w_gather", "w_dispatch_wait",
        "w_experts", "w_combine_wait", "w_sum"]
stages = " ".join(f"{k} {st[k]:.0f}" for k in keys if k in st)
# The median step's exchange with the workers (dispatch + combine).
dc = lt.get("server_stage_p50_us", {}).get("dispatch+combine")
if dc is not None and p != "0":
    stages += f" | p50 dispatch+combine {dc:.0f}"
print(f"{p:<3} {n:<5} {p50:10.2f} {echo:10.2f} {mc:10.2f} {p50 / echo:8.2f}  {stages}")
PY
  done
done
