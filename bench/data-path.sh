#!/usr/bin/env bash
# The host data path around the experts, measured without a GPU (or with
# --device cuda on a GPU host): a synthetic layer with tiny experts
# (H=2048, I=16, E=64, k=6), so that compute is negligible, served by a
# router with P = 0, 1 and 2 workers; one client sends N = 8, 512 and 4096
# tokens (bf16 on the wire) one at a time. Per N it prints the service's
# p50, the server's stage table, and two references timed in the same run:
# a memcpy of the request's activation bytes and a gRPC echo of the same
# payload (moe-wire-bench), and the ratios p50 / echo round trip.
#
#   bench/data-path.sh [BUILD_DIR] [--device cpu|cuda] [--requests R]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
device=cpu
requests=20
while (($#)); do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    *) build="$1"; shift ;;
  esac
done
for b in server/moe-router worker/moe-worker client/moe-loadtest bench/moe-wire-bench; do
  [[ -x "$build/$b" ]] || { echo "data-path: build $build/$b first" >&2; exit 1; }
done
hidden=2048
dtype_args=(--weight-dtype f32)
[[ "$device" == cuda* ]] && dtype_args=(--weight-dtype bf16)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

printf '%-3s %-5s %10s %10s %10s %8s  %s\n' P N "p50 ms" "echo ms" "memcpy ms" "p50/echo" "server stages (mean us)"
for n in 8 512 4096; do
  bytes=$((n * hidden * 2))
  "$build/bench/moe-wire-bench" --bytes "$bytes" --reps "$requests" > "$out/wire.txt"
  echo_ms=$(tail -1 "$out/wire.txt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["echo_rtt_ms"])')
  memcpy_ms=$(tail -1 "$out/wire.txt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["memcpy_ms"])')
  for p in 0 1 2; do
    run="\$MOE_BIN/client/moe-loadtest --target \$MOE_TARGET -c 1 -n $requests --warmup 0s --tokens $n --dtype bf16 --server-timing --format json > $out/lt.json 2>/dev/null"
    "$here/deploy/local/moe-local.sh" --workers "$p" --port 50081 --build-dir "$build" \
      --run "$run" -- --synthetic --hidden "$hidden" --inter 16 --experts 64 --top-k 6 \
      --seed 1 --max-batch-tokens 4096 --device "$device" "${dtype_args[@]}" >/dev/null 2>&1
    python3 - "$out/lt.json" "$p" "$n" "$echo_ms" "$memcpy_ms" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
p, n, echo, mc = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
p50 = j["latency_ms"]["p50"] if "latency_ms" in j else j["p50"]
st = j.get("server_stage_us", {})
stages = " ".join(f"{k} {st[k]:.0f}" for k in
                  ["queue", "route", "plan", "dispatch", "experts", "combine", "shared", "wire", "total"]
                  if k in st)
print(f"{p:<3} {n:<5} {p50:10.2f} {echo:10.2f} {mc:10.2f} {p50/echo:8.2f}  {stages}")
PY
  done
done
